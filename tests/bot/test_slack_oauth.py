"""Many workspaces: the OAuth install flow end to end, and one process serving two of them.

The fake Slack plays both of Slack's parts: the page where a person approves the
app (``/oauth/v2/authorize``, which redirects back with a code) and
``oauth.v2.access``, which trades the code for that workspace's bot token
(tests/fakes/slack_oauth.py). Installations are kept in the bot's own database, on
SQLite and PostgreSQL. A reply, a tool call and a Stop are each shown in their own
workspace, with its token: the fake answers ``channel_not_found`` to any other.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from html import unescape
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent import Agent, AgentRuntime, ConfigError, SessionStore, SQLiteStore
from agent.stores.postgres import PostgresStore
from agent.testing import ScriptedModel
from bot.config_file import BotConfig
from bot.schedules import Schedule, firing_now
from bot.settings import Settings
from bot.slack.app import bolt_app
from bot.slack.channel import SlackChannel
from bot.slack.firing import fire
from bot.slack.http import web_app
from bot.slack.installations import SOURCE, StoreInstallations
from bot.slack.oauth import SignedStates, oauth_settings
from bot.slack.run import SlackConnection, schedule_team
from bot.slack.tools import slack_tools
from bot.slack.workspaces import Installed
from tests.bot.slack_harness import SECRET, Bot, PausingModel, answering
from tests.fakes.local_server import serve_locally
from tests.fakes.slack_api import FakeSlack

OTHER_TEAM, OTHER_TOKEN, OTHER_BOT = "T0OTHER", "xoxb-other-workspace-token", "U0BOT2"
OTHER_CHANNEL = "C0OTHER"
STATE_SECRET = "a-state-secret-long-enough-to-sign"


@dataclass
class Served:
    bot: Bot
    installations: StoreInstallations
    store: SessionStore


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened: SessionStore
    if request.param == "sqlite":
        opened = await SQLiteStore.open(tmp_path / "bot.db")
    else:
        opened = await PostgresStore.open(request.getfixturevalue("postgres_url"))
    try:
        yield opened
    finally:
        await opened.close()


@asynccontextmanager
async def serving(store: SessionStore) -> AsyncIterator[Served]:
    """The app installed by OAuth: no bot token of its own, one per workspace."""
    hold, held = asyncio.Event(), asyncio.Event()
    model = PausingModel(ScriptedModel(answering(hold, held)), hold, held)
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        slack.add_workspace(OTHER_TEAM, token=OTHER_TOKEN, bot_user_id=OTHER_BOT, bot_id="B0BOT2")
        slack.add_user("U0BOB", name="bob")
        slack.add_channel(OTHER_CHANNEL, name="other", members=["U0BOB"], team=OTHER_TEAM)
        base = AsyncWebClient(base_url=slack.base_url)  # the app's: no token
        installations = StoreInstallations(store)
        workspaces = Installed(
            installations, lambda token: AsyncWebClient(token=token, base_url=slack.base_url)
        )
        agent = Agent(name="bot", model=model, tools=slack_tools(workspaces))
        runtime = AgentRuntime(store, [agent])
        await runtime.start()
        channel = SlackChannel(runtime, "bot", base, bot_user_id="", workspaces=workspaces)
        oauth = oauth_settings(
            client_id=slack.oauth.client_id,
            client_secret=slack.oauth.client_secret,
            state_secret=STATE_SECRET,
            installations=installations,
            authorization_url=slack.oauth.authorize_url(),
        )
        app = web_app(bolt_app(channel, base, SECRET, oauth=oauth), SECRET)
        runner, url = await serve_locally(app)
        slack.oauth.redirect_url = f"{url}/slack/oauth_redirect"
        try:
            bot = Bot(slack, url, http, model, runtime, hold, held, channel, base)
            yield Served(bot, installations, store)
        finally:
            await runner.cleanup()
            await channel.drain(grace=1.0)
            channel.close()
            await runtime.close()


async def install(bot: Bot, team: str, *, state: str | None = None) -> tuple[int, str]:
    """A person installs the app in ``team``, as a browser goes: install page, Slack, back."""
    async with aiohttp.ClientSession() as browser:
        async with browser.get(f"{bot.url}/slack/install", allow_redirects=False) as page:
            assert page.status == 200
            html = await page.text()
            cookie = page.headers["Set-Cookie"].split(";")[0]  # Secure: a browser sends it on https
        [link] = re.findall(r'href="([^"]+/oauth/v2/authorize[^"]*)"', html)
        async with browser.get(unescape(link) + f"&team={team}", allow_redirects=False) as slack:
            assert slack.status == 302
            back = slack.headers["Location"]
        if state is not None:
            back = re.sub(r"state=[^&]+", f"state={state}", back)
        async with browser.get(back, headers={"Cookie": cookie}, allow_redirects=False) as done:
            return done.status, await done.text()


def mention_in(bot: Bot, team: str, channel: str, text: str) -> tuple[str, dict[str, Any]]:
    ts = bot.slack.post_user_message(channel, f"<@{_bot_of(team)}> {text}")
    envelope = bot.envelope("app_mention", f"<@{_bot_of(team)}> {text}", ts, channel=channel)
    envelope["team_id"] = envelope["event"]["team"] = team
    envelope["event_id"] = f"Ev{team}{ts}"
    return ts, envelope


def app_event(bot: Bot, team: str, inner: dict[str, Any]) -> dict[str, Any]:
    """An Events API envelope of ``team``'s, as Slack wraps every event."""
    return {
        "type": "event_callback",
        "team_id": team,
        "api_app_id": bot.slack.app_id,
        "event_id": f"Ev-{inner['type']}",
        "event_time": int(time.time()),
        "event": inner,
    }


def _bot_of(team: str) -> str:
    return OTHER_BOT if team == OTHER_TEAM else "U0BOT"


async def test_two_workspaces_install_through_oauth_and_each_is_answered_as_itself(
    store: SessionStore,
):
    async with serving(store) as served:
        bot = served.bot
        for team in (bot.slack.team_id, OTHER_TEAM):
            status, page = await install(bot, team)
            assert status == 200, page
        assert bot.slack.oauth.exchanged == [bot.slack.team_id, OTHER_TEAM]
        assert await served.installations.teams() == sorted([bot.slack.team_id, OTHER_TEAM])
        kept = await store.place_policies(SOURCE)
        assert {v["bot_user_id"] for v in kept.values()} == {"U0BOT", OTHER_BOT}

        here, first = mention_in(bot, bot.slack.team_id, bot.slack.channel_id, "hello")
        there, second = mention_in(bot, OTHER_TEAM, OTHER_CHANNEL, "read #other")
        bot.slack.post_user_message(OTHER_CHANNEL, "the other workspace's news", user="U0BOB")
        assert await bot.deliver(first) == 200
        assert await bot.deliver(second) == 200

        [said_here] = await bot.written_replies(here)
        [said_there] = await bot.written_replies(there, channel=OTHER_CHANNEL)
        assert said_here.text == "you said: hello"
        assert said_here.user == "U0BOT"
        # the tool read the other workspace's channel with that workspace's token
        assert "the other workspace's news" in said_there.text
        assert said_there.user == OTHER_BOT


async def test_a_forged_or_replayed_state_installs_nothing(store: SessionStore):
    async with serving(store) as served:
        bot = served.bot
        forged = SignedStates("another-secret-of-enough-length!!")
        status, _ = await install(bot, OTHER_TEAM, state=await forged.async_issue())

        assert status in (400, 401)  # Bolt's failure page, never a 5xx
        assert bot.slack.oauth.exchanged == []
        assert await served.installations.teams() == []


async def test_a_state_is_good_once_and_not_after_it_expires():
    now = [time.time()]
    states = SignedStates(STATE_SECRET, seconds=600, clock=lambda: now[0])
    state = await states.async_issue()

    assert await states.async_consume(state)
    assert not await states.async_consume(state)  # taken
    late = await states.async_issue()
    now[0] += 601
    assert not await states.async_consume(late)  # expired
    assert not await states.async_consume("1.x.0")


async def test_an_uninstalled_workspace_is_forgotten_and_its_events_answer_nothing(
    store: SessionStore,
):
    async with serving(store) as served:
        bot = served.bot
        for team in (bot.slack.team_id, OTHER_TEAM):
            await install(bot, team)
        uninstalled = app_event(bot, OTHER_TEAM, {"type": "app_uninstalled"})
        assert await bot.deliver(uninstalled) == 200
        assert await served.installations.teams() == [bot.slack.team_id]

        there, second = mention_in(bot, OTHER_TEAM, OTHER_CHANNEL, "hello")
        assert await bot.deliver(second) == 200  # acked: Slack must not send it again
        here, first = mention_in(bot, bot.slack.team_id, bot.slack.channel_id, "still here?")
        await bot.deliver(first)

        [said] = await bot.written_replies(here)
        assert said.text == "you said: still here?"
        assert bot.slack.replies(OTHER_CHANNEL, there) == []


async def test_a_revoked_bot_token_forgets_its_workspace(store: SessionStore):
    async with serving(store) as served:
        bot = served.bot
        await install(bot, OTHER_TEAM)
        tokens = {"oauth": [], "bot": [OTHER_BOT]}
        revoked = app_event(bot, OTHER_TEAM, {"type": "tokens_revoked", "tokens": tokens})

        assert await bot.deliver(revoked) == 200
        assert await served.installations.teams() == []


def test_one_workspace_and_oauth_are_never_mixed_silently():
    both = Settings(
        slack_bot_token="xoxb-" + "x" * 30,
        slack_signing_secret="s",
        slack_client_id="1.2",
        slack_client_secret="c",
        slack_state_secret="y" * 32,
        _env_file=None,
    )
    assert any("not both" in p for p in both.problems())
    partial = Settings(slack_client_id="1.2", slack_signing_secret="s", _env_file=None)
    problems = partial.problems()
    assert any(p.startswith("SLACK_CLIENT_SECRET is needed") for p in problems)
    assert any(p.startswith("SLACK_STATE_SECRET is needed") for p in problems)
    whole = Settings(
        slack_client_id="1.2",
        slack_client_secret="c",
        slack_state_secret="y" * 32,
        slack_signing_secret="s",
        _env_file=None,
    )
    assert whole.installs_by_oauth
    assert whole.problems() == []


async def test_a_schedule_posts_in_its_own_workspace_as_that_workspaces_bot(
    store: SessionStore,
):
    async with serving(store) as served:
        bot = served.bot
        await install(bot, OTHER_TEAM)
        schedule = Schedule(
            name="daily", cron="0 9 * * *", channel=OTHER_CHANNEL, prompt="hello", team=OTHER_TEAM
        )
        firing = firing_now(schedule, datetime.now(UTC))

        await fire(bot.channel, bot.runtime, OTHER_TEAM, firing)  # returns once it is posted

        [posted] = bot.slack.messages(OTHER_CHANNEL)
        assert posted.user == OTHER_BOT  # with the other workspace's token: the fake checks
        assert posted.thread_ts is None  # a turn nobody typed opens its own conversation


def test_with_oauth_installs_a_schedule_must_name_its_workspace():
    config = BotConfig(
        schedules=(Schedule(name="daily", cron="0 9 * * *", channel="C0OTHER", prompt="p"),)
    )
    slack = SlackConnection(AsyncWebClient(), None, Installed(StoreInstallations(), AsyncWebClient))

    with pytest.raises(ConfigError, match="team is needed"):
        schedule_team(slack, config.schedules[0])
