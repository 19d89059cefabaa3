"""Issue 21, point 3 in Slack: how a follow-up in a thread with a turn at work is taken.

Per channel, from ``BOT_CONFIG``'s ``[follow_ups]``: ``replace`` supersedes the
reply being written (the default, shown in test_slack_app), ``steer`` adds the
message to the turn at work, whose reply shows it was taken in and answers it,
and ``queue`` lets the turn finish and answers the follow-up after. Each test
serves the real app against the fake Slack, with the turn kept at work by a tool
that waits for the test's signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from agent import Agent, AgentRuntime, ConfigError, SQLiteStore, UserMessage
from agent.testing import ScriptedModel
from bot.config_file import FollowUpMode, FollowUps, load_bot_config
from bot.settings import Settings
from bot.slack.app import bolt_app
from bot.slack.channel import SlackChannel
from bot.slack.http import web_app
from bot.slack.run import slack_client
from bot.texts import FOLLOW_UP_TAKEN, SUPERSEDED
from tests.bot.slack_harness import SECRET, WAIT, Bot, PausingModel, announce
from tests.bot.test_slack_endings import WAITING, Signal, answer, mention, waiting_tool
from tests.fakes.local_server import serve_locally
from tests.fakes.slack_api import FakeSlack, Message


@asynccontextmanager
async def serving(
    tmp_path: Path, slack: FakeSlack, signal: Signal, mode: FollowUpMode
) -> AsyncIterator[Bot]:
    """The app, with follow-ups in the fake's channel taken as ``mode`` says."""
    model = PausingModel(ScriptedModel(answer), asyncio.Event(), asyncio.Event())
    async with aiohttp.ClientSession() as http:
        store = await SQLiteStore.open(tmp_path / "bot.db")
        client = slack_client(
            Settings(slack_bot_token=slack.token, slack_api_url=slack.base_url, _env_file=None)
        )
        agent = Agent(name="bot", model=model, tools=[announce, waiting_tool(signal)])
        runtime = AgentRuntime(store, agent)
        follow_ups = FollowUps(channels={slack.channel_id: mode})
        channel = SlackChannel(
            runtime, "bot", client, bot_user_id=slack.bot_user_id, follow_ups=follow_ups
        )
        await runtime.start()
        runner, url = await serve_locally(web_app(bolt_app(channel, client, SECRET), SECRET))
        try:
            yield Bot(
                slack, url, http, model, runtime, asyncio.Event(), asyncio.Event(), channel, client
            )
        finally:
            await runner.cleanup()
            await channel.drain(grace=0.5)
            channel.close()
            await runtime.close()
            await store.close()


async def follow_up(bot: Bot, root: str, text: str) -> str:
    """A mention in ``root``'s thread, delivered as Slack does: the mention, then its copy."""
    said = f"<@U0BOT> {text}"
    ts = bot.slack.post_user_message(bot.slack.channel_id, said, thread_ts=root)
    assert await bot.deliver(bot.envelope("app_mention", said, ts, thread_ts=root)) == 200
    assert await bot.deliver(bot.envelope("message", said, ts, thread_ts=root)) == 200
    return ts


def bot_replies(bot: Bot, replies: list[Message]) -> list[Message]:
    """The bot's messages among a thread's replies (the person's follow-ups are there too)."""
    return [m for m in replies if m.user == bot.slack.bot_user_id]


async def test_in_a_steering_channel_a_follow_up_is_taken_in_by_the_reply_at_work(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    async with serving(tmp_path, slack, signal, "steer") as bot:
        root = await mention(bot, WAITING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        steer_ts = await follow_up(bot, root, "and mention the date")
        session = bot.runtime.session("bot", f"slack:{slack.team_id}:{slack.channel_id}:{root}")
        [record] = await session.turns()
        assert [s.text for s in record.steering] == ["and mention the date"]
        signal.go.set()
        [said] = bot_replies(bot, await bot.written_replies(root, 2))
        [record] = await session.turns()  # the follow-up opened no turn of its own
        transcript = await session.transcript()

    assert said.text.endswith("you said: and mention the date")
    [taken] = [t for t in said.tasks.values() if t["title"] == FOLLOW_UP_TAKEN]
    assert (taken["status"], taken["details"]) == ("complete", "and mention the date")
    assert SUPERSEDED not in said.text
    steers = [m for m in transcript if isinstance(m, UserMessage) and m.steer]
    assert [(m.steer, m.user) for m in steers] == [
        (f"{slack.team_id}:{slack.channel_id}:{steer_ts}", slack.user_id)
    ]
    # one turn: asked for the call, then once with the call's result and the steer
    root_turn = f"{slack.team_id}:{slack.channel_id}:{root}"
    assert [(r.turn_id, r.step) for r in bot.model.requests] == [
        (root_turn, "model:1"),
        (root_turn, "model:4"),
    ]


async def test_in_a_queueing_channel_a_follow_up_waits_for_the_reply_at_work(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    async with serving(tmp_path, slack, signal, "queue") as bot:
        root = await mention(bot, WAITING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        await follow_up(bot, root, "and then this")
        signal.go.set()
        first, second = bot_replies(bot, await bot.written_replies(root, 3))

    assert first.text == "done: {'went': True}"  # finished, not superseded
    assert second.text == "you said: and then this"


async def test_in_a_steering_channel_a_follow_up_after_the_reply_is_a_turn_of_its_own(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    signal.go.set()
    async with serving(tmp_path, slack, signal, "steer") as bot:
        root = await mention(bot, WAITING)
        await bot.written_replies(root)
        await follow_up(bot, root, "one more thing")
        _, second = bot_replies(bot, await bot.written_replies(root, 3))
    assert second.text == "you said: one more thing"


def test_bot_config_sets_how_follow_ups_are_taken_by_channel(tmp_path: Path) -> None:
    assert FollowUps().mode_in("C0GENERAL") == "replace"  # REPLACE_IN_FLIGHT's default
    assert FollowUps().mode_in("C0GENERAL", replace_in_flight=False) == "queue"
    path = tmp_path / "bot.toml"
    path.write_text('[follow_ups]\nmode = "queue"\nchannels = { C0SUPPORT = "steer" }\n')
    follow_ups = load_bot_config(path).follow_ups
    assert follow_ups.mode_in("C0SUPPORT") == "steer"
    assert follow_ups.mode_in("C0GENERAL", replace_in_flight=True) == "queue"  # the file's
    path.write_text('[follow_ups]\nmode = "merge"\nchannels = { general = "steer" }\n')
    with pytest.raises(ConfigError) as refused:
        load_bot_config(path)
    assert "follow_ups.mode: Input should be 'replace', 'steer' or 'queue'" in str(refused.value)
    assert "'general' is not a channel id" in str(refused.value)
