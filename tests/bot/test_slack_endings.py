"""The Stop button while a turn works, and how stopped, withdrawn and held turns end in Slack.

Each test serves the real app (Bolt behind aiohttp, the real slack_sdk client)
against the fake Slack. A turn is kept at work by a tool that waits on an event
the test controls; a "restart" closes the runtime and serves a new app on the
same database and the same fake Slack, with the channel's start-up first.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent import (
    Agent,
    AgentRuntime,
    Cancelled,
    Interrupted,
    ModelRequest,
    SQLiteStore,
    ToolContext,
    ToolMessage,
    tool,
)
from agent.core.events import TurnInterrupted
from agent.core.records import Commit, SessionKey
from agent.core.turns import INTERRUPT_REASONS, POISON_RUNS
from agent.errors import ModelError
from agent.testing import ScriptedModel, call, reply
from bot.schedules import Firing, Schedule
from bot.settings import Settings
from bot.slack.app import bolt_app
from bot.slack.blocks import STOP
from bot.slack.channel import SlackChannel
from bot.slack.channel.delivery import DeliveryState
from bot.slack.channel.endings import closing_line
from bot.slack.channel.retrying import RETRY_EVENT
from bot.slack.channel.stopping import STOP_EVENT
from bot.slack.firing import ScheduleFailed, fire, fire_by_hand, has_fired
from bot.slack.http import web_app
from bot.slack.run import slack_client
from bot.texts import (
    CANCELLED,
    FAILED_PREFIX,
    HELD,
    INTERRUPTED,
    ONLY_ASKER_RETRIES,
    ONLY_PARTICIPANTS_STOP,
    RETRY_OFFER,
    stopped_by,
    withdrawn_by,
)
from tests.bot.hatches_harness import click_on, running_hatches_bot, wait_until
from tests.bot.slack_harness import SECRET, WAIT, Bot, PausingModel, announce, ask_for_approval
from tests.fakes.local_server import serve_locally
from tests.fakes.slack_api import STREAM_METHODS, FakeSlack, Message

WAITING = "wait for the signal"
SAYING_WAITING = "say a word, then wait for the signal"
FAILING = "fail the first time"
READING = "read everything"


@pytest.fixture(autouse=True)
def no_stop_of_slacks_own(slack: FakeSlack) -> None:
    """These tests are of the bot's own Stop button: Slack shows none on the thread here.

    Slack's agent sessions show their Stop only to an app that subscribes to
    ``agent_session_stopped``; without it, ``agents.sessions.setStatus`` warns, and the
    bot shows its own (tests/bot/test_slack_surface.py covers Slack's Stop).
    """
    slack.agent_surface.stop_subscribed = False


@dataclasses.dataclass
class Signal:
    """What the waiting tool waits on, and an event set once it is waiting."""

    go: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    waiting: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


def waiting_tool(signal: Signal) -> Any:
    @tool
    async def wait_for_signal() -> dict[str, Any]:
        """Wait until the test says go."""
        signal.waiting.set()
        await signal.go.wait()
        return {"went": True}

    return wait_for_signal


def progress_tool(signal: Signal) -> Any:
    @tool
    async def read_everything(ctx: ToolContext) -> dict[str, Any]:
        """Read for a while, saying how far it got."""
        ctx.progress("read 40 of 120 messages")
        ctx.progress("read 80 of 120 messages")  # within a second: not shown
        signal.waiting.set()
        await signal.go.wait()
        return {"read": 120}

    return read_everything


def answer(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        return reply(f"done: {last.result}")
    if FAILING in last.text and not request.turn_id.endswith(".retry"):
        raise ModelError("the model is down", retryable=False)
    if SAYING_WAITING in last.text:
        return reply("On it.", call("wait_for_signal", {}))
    if WAITING in last.text:
        return reply("", call("wait_for_signal", {}))
    if READING in last.text:
        return reply("", call("read_everything", {}))
    return reply(f"you said: {last.text}")


@asynccontextmanager
async def serving(tmp_path: Path, slack: FakeSlack, signal: Signal) -> AsyncIterator[Bot]:
    """The app on the database in ``tmp_path``; its start-up takes up what was owed."""
    hold = asyncio.Event()
    model = PausingModel(ScriptedModel(answer), hold, asyncio.Event())
    async with aiohttp.ClientSession() as http:
        store = await SQLiteStore.open(tmp_path / "bot.db")
        client = slack_client(
            Settings(slack_bot_token=slack.token, slack_api_url=slack.base_url, _env_file=None)
        )
        tools = [announce, waiting_tool(signal), progress_tool(signal)]
        agent = Agent(name="bot", model=model, tools=tools, tool_cancel_grace=0.05)
        runtime = AgentRuntime(store, agent)
        channel = SlackChannel(runtime, "bot", client, bot_user_id=slack.bot_user_id)
        await channel.resume_replies()  # before the runtime's start, as bot.serve does
        await runtime.start()
        runner, url = await serve_locally(web_app(bolt_app(channel, client, SECRET), SECRET))
        try:
            yield Bot(slack, url, http, model, runtime, hold, asyncio.Event(), channel, client)
        finally:
            await runner.cleanup()
            await channel.drain(grace=0.5)
            channel.close()
            await runtime.close()
            await store.close()


def tagged(slack: FakeSlack, ts: str, event_type: str) -> list[Message]:
    """The thread's replies whose metadata says they are ``event_type``."""
    return [
        m
        for m in slack.replies(slack.channel_id, ts)
        if isinstance(m.metadata, dict) and m.metadata.get("event_type") == event_type
    ]


def stop_messages(slack: FakeSlack, ts: str) -> list[Message]:
    return tagged(slack, ts, STOP_EVENT)


def stop_posts(slack: FakeSlack) -> int:
    """How many times a Stop button's message was posted (a second post would be a defect)."""
    return sum(
        STOP_EVENT in str(c.params.get("metadata")) for c in slack.calls_to("chat.postMessage")
    )


async def stop_button_in(slack: FakeSlack, ts: str) -> Message:
    await wait_until(lambda: stop_messages(slack, ts) != [], "the Stop button was shown")
    [shown] = stop_messages(slack, ts)
    return shown


def turn_key(slack: FakeSlack, ts: str) -> tuple[str, str]:
    return (
        f"slack:{slack.team_id}:{slack.channel_id}:{ts}",
        f"{slack.team_id}:{slack.channel_id}:{ts}",
    )


async def mention(bot: Bot, text: str) -> str:
    ts = bot.slack.post_user_message(bot.slack.channel_id, f"<@U0BOT> {text}")
    assert await bot.deliver(bot.envelope("app_mention", f"<@U0BOT> {text}", ts)) == 200
    return ts


async def held_at_next_start(tmp_path: Path, session_id: str, turn_id: str) -> None:
    """Count the turn's runs up to the poison limit, as if the process had died in each."""
    store = await SQLiteStore.open(tmp_path / "bot.db")
    try:
        key = SessionKey("bot", session_id)
        record = (await store.load(key)).turns[turn_id]
        assert record.is_unfinished
        await store.commit(key, Commit(turns=(dataclasses.replace(record, runs=POISON_RUNS),)))
    finally:
        await store.close()


async def test_a_running_turn_shows_a_stop_button_its_asker_can_use_and_a_stranger_cannot(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    slack.add_user("U0BEN", name="ben")
    slack.join(slack.channel_id, "U0BEN")
    async with serving(tmp_path, slack, signal) as bot:
        ts = await mention(bot, WAITING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        shown = await stop_button_in(slack, ts)
        [actions] = [b for b in shown.blocks if b["type"] == "actions"]
        assert [e["action_id"] for e in actions["elements"]] == [STOP]

        await click_on(bot, shown, "Stop", "U0BEN")
        assert await bot.ephemerals_to("U0BEN") == [ONLY_PARTICIPANTS_STOP]
        session_id, turn_id = turn_key(slack, ts)
        session = bot.runtime.session("bot", session_id)
        assert (await session.turns())[0].is_unfinished
        await click_on(bot, shown, "Stop", slack.user_id)

        result = await asyncio.wait_for(session.result(turn_id), WAIT)
        assert isinstance(result, Cancelled)
        assert not signal.go.is_set()  # stopped while its tool still waited
        [said] = await bot.written_replies(ts)
        assert said.text.endswith(stopped_by(slack.user_id))
        assert stop_messages(slack, ts) == []
        assert stop_posts(slack) == 1


async def test_a_reply_posted_where_slack_offers_no_stream_has_a_stop_button_too(
    tmp_path: Path, slack: FakeSlack
):
    slack.disable(*STREAM_METHODS)
    signal = Signal()
    async with serving(tmp_path, slack, signal) as bot:
        ts = await mention(bot, SAYING_WAITING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        shown = await stop_button_in(slack, ts)

        await click_on(bot, shown, "Stop", slack.user_id)

        session_id, turn_id = turn_key(slack, ts)
        result = await bot.runtime.session("bot", session_id).result(turn_id)
        assert isinstance(result, Cancelled)
        [said] = await bot.written_replies(ts)
        assert said.text == f"On it.\n\n{stopped_by(slack.user_id)}"
        assert said.stream is None  # posted and updated, never streamed
        assert stop_messages(slack, ts) == []
        assert stop_posts(slack) == 1


async def test_the_stop_button_goes_when_the_turn_ends_and_a_restart_never_posts_a_second(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    async with serving(tmp_path, slack, signal) as first:
        ts = await mention(first, WAITING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        await stop_button_in(slack, ts)
    # the process stopped mid-turn: its Stop button is still up
    assert len(stop_messages(slack, ts)) == 1
    signal.go.set()

    async with serving(tmp_path, slack, signal) as second:
        [said] = await second.written_replies(ts)

        assert said.text == "done: {'went': True}"
        assert stop_messages(slack, ts) == []
        assert stop_posts(slack) == 1
        assert len(slack.calls_to("chat.delete")) == 1


async def test_a_stop_button_posted_unseen_is_looked_for_again_and_taken_down_at_the_end(
    tmp_path: Path, slack: FakeSlack
):
    # its post's answer was lost and the thread could not be read back: it may be up
    signal = Signal()
    slack.drop_connection("chat.postMessage", applied=True)
    slack.fail_next("conversations.replies", "internal_error", times=4)
    async with serving(tmp_path, slack, signal) as bot:
        ts = await mention(bot, WAITING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        await stop_button_in(slack, ts)
        signal.go.set()

        [said] = await bot.written_replies(ts)

    assert said.text == "done: {'went': True}"
    assert stop_messages(slack, ts) == []
    assert stop_posts(slack) == 1


async def test_a_held_turn_tells_its_thread_once_and_not_again_at_the_next_start(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    async with serving(tmp_path, slack, signal) as first:
        ts = await mention(first, WAITING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
    session_id, turn_id = turn_key(slack, ts)
    await held_at_next_start(tmp_path, session_id, turn_id)

    async with serving(tmp_path, slack, signal) as second:
        said, offer = await second.written_replies(ts, 2)
        result = await second.runtime.session("bot", session_id).result(turn_id)
    assert isinstance(result, Interrupted)
    assert said.text.endswith(HELD)
    assert stop_messages(slack, ts) == []
    posted = len(slack.calls)

    async with serving(tmp_path, slack, signal) as third:
        assert await third.channel.resume_replies() == 0
    assert [m.text for m in slack.replies(slack.channel_id, ts)] == [said.text, RETRY_OFFER]
    assert offer.text == RETRY_OFFER  # a held turn may be retried from its thread
    assert not [c for c in slack.calls[posted:] if c.method.startswith("chat.")]


async def test_an_operators_interrupt_ends_the_reply_saying_so_not_as_a_cancel(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    async with serving(tmp_path, slack, signal) as bot:
        ts = await mention(bot, SAYING_WAITING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        session_id, turn_id = turn_key(slack, ts)
        session = bot.runtime.session("bot", session_id)
        assert await session.interrupt_turn(turn_id)
        said, offer = await bot.written_replies(ts, 2)
        result = await session.result(turn_id)

    assert isinstance(result, Interrupted)
    assert said.text.startswith("On it.")
    assert said.text.endswith(INTERRUPTED["interrupted"])
    assert offer.text == RETRY_OFFER  # interrupted, not answered: it may be asked again
    assert stop_messages(slack, ts) == []


async def test_a_tools_progress_shows_under_its_task_line_and_not_in_the_answer(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    async with serving(tmp_path, slack, signal) as bot:
        ts = await mention(bot, READING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        await wait_until(
            lambda: any(
                "read 40" in t.get("details", "")
                for m in slack.replies(slack.channel_id, ts)
                for t in m.tasks.values()
            ),
            "the progress line shown",
        )
        signal.go.set()
        [said, *_] = await bot.written_replies(ts)

    [task] = said.tasks.values()
    assert task["details"] == "read 40 of 120 messages"  # one line a second at the most
    assert task["status"] == "complete"
    assert "read 40" not in said.text


async def test_where_nothing_streams_a_tools_progress_is_the_threads_status(
    tmp_path: Path, slack: FakeSlack
):
    slack.disable(*STREAM_METHODS)
    signal = Signal()
    async with serving(tmp_path, slack, signal) as bot:
        ts = await mention(bot, READING)
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        await wait_until(
            lambda: slack.status(slack.channel_id, ts) == "read 40 of 120 messages",
            "the status says how far it got",
        )
        signal.go.set()
        await bot.written_replies(ts)
    assert slack.status(slack.channel_id, ts) == ""  # cleared as the reply ends


def retry_messages(slack: FakeSlack, ts: str) -> list[Message]:
    return tagged(slack, ts, RETRY_EVENT)


async def test_a_failed_reply_offers_retry_to_its_asker_who_gets_the_answer_in_the_thread(
    tmp_path: Path, slack: FakeSlack
):
    slack.add_user("U0BEN", name="ben")
    slack.join(slack.channel_id, "U0BEN")
    async with serving(tmp_path, slack, Signal()) as bot:
        ts = await mention(bot, FAILING)
        said, offer = await bot.written_replies(ts, 2)
        assert said.text.startswith(FAILED_PREFIX)
        assert retry_messages(slack, ts) == [offer]
        assert offer.text == RETRY_OFFER

        await click_on(bot, offer, "Retry", "U0BEN")  # not the asker, nor an admin
        assert await bot.ephemerals_to("U0BEN") == [ONLY_ASKER_RETRIES]
        await click_on(bot, offer, "Retry", slack.user_id)

        _, _, done = await bot.written_replies(ts, 3)
        assert done.text == f"you said: {FAILING}"
        session_id, turn_id = turn_key(slack, ts)
        turns = await bot.runtime.session("bot", session_id).turns()
        assert [(t.turn_id, t.status, t.retry_of) for t in turns] == [
            (turn_id, "failed", None),
            (f"{turn_id}.retry", "completed", turn_id),
        ]
        [spent] = retry_messages(slack, ts)
        assert spent.text.startswith(f"Retried by <@{slack.user_id}>")
        assert [b["type"] for b in spent.blocks] == ["context"]  # no button left

        # a click that raced the first (the button still shown to it) shows nothing more
        await click_on(bot, offer, "Retry", slack.user_id)
        await bot.written_replies(ts, 3)
        assert len(await bot.runtime.session("bot", session_id).turns()) == 2
    assert len(slack.replies(slack.channel_id, ts)) == 3


async def test_a_workspace_admin_may_retry_someone_elses_failed_reply(
    tmp_path: Path, slack: FakeSlack
):
    slack.add_user("U0ADMIN", name="admin", is_admin=True)
    slack.join(slack.channel_id, "U0ADMIN")
    async with serving(tmp_path, slack, Signal()) as bot:
        ts = await mention(bot, FAILING)
        _, offer = await bot.written_replies(ts, 2)
        await click_on(bot, offer, "Retry", "U0ADMIN")
        _, spent, done = await bot.written_replies(ts, 3)

    assert done.text == f"you said: {FAILING}"
    assert spent.text.startswith("Retried by <@U0ADMIN>")


async def test_an_ending_shown_again_after_a_restart_does_not_post_a_second_retry(
    tmp_path: Path, slack: FakeSlack
):
    async with serving(tmp_path, slack, Signal()) as first:
        ts = await mention(first, FAILING)
        said, _ = await first.written_replies(ts, 2)
        session_id, turn_id = turn_key(slack, ts)
        # as if the process died after the Retry went up, before the reply was let go
        owed = DeliveryState(reply=said.ts, since=0)
        await first.channel.decisions.renderer.deliveries.keep(session_id, turn_id, owed)

    async with serving(tmp_path, slack, Signal()) as second:
        await second.written_replies(ts, 2)
    assert len(retry_messages(slack, ts)) == 1
    assert len(slack.replies(slack.channel_id, ts)) == 2


@pytest.mark.parametrize("reason", sorted(INTERRUPT_REASONS))
def test_every_interrupt_reason_has_its_own_closing_line(reason: str):
    ended = TurnInterrupted(
        agent="bot",
        session="s",
        turn_id="t",
        seq=1,
        reason=reason,
        detail=INTERRUPT_REASONS[reason],
    )
    line = closing_line(ended)
    assert line == INTERRUPTED[reason]
    assert line not in CANCELLED.values()


async def test_a_withdrawn_request_ends_its_reply_naming_the_admin_once(tmp_path: Path):
    async with running_hatches_bot(tmp_path) as bot:
        bot.slack.add_user("U0ADMIN", name="admin", is_admin=True)
        bot.slack.join(bot.slack.channel_id, "U0ADMIN")
        ts, card = await ask_for_approval(bot)

        await click_on(bot, card, "Withdraw", "U0ADMIN")

        line = withdrawn_by("U0ADMIN")
        await wait_until(
            lambda: any(m.text == line for m in bot.slack.replies(bot.slack.channel_id, ts)),
            "the thread was told",
        )
        # the note lands before the withdrawal forgets what the thread was owed
        await wait_until(lambda: bot.channel.in_flight == 0, "the withdrawal done")
        next_start = SlackChannel(bot.runtime, "bot", bot.client, bot_user_id="U0BOT")
        assert await next_start.resume_replies() == 0  # nothing owed: it is not told again
        said = [m.text for m in bot.slack.replies(bot.slack.channel_id, ts)]
        assert said.count(line) == 1


async def test_a_firing_whose_turn_is_held_fails_saying_so_and_is_not_fired_again(
    tmp_path: Path, slack: FakeSlack
):
    signal = Signal()
    daily = Schedule(name="daily", cron="0 9 * * *", channel=slack.channel_id, prompt=WAITING)
    firing = Firing(daily, datetime(2026, 12, 7, 9, 0, tzinfo=UTC), None)
    async with serving(tmp_path, slack, signal) as first:
        firing_task = asyncio.create_task(fire(first.channel, first.runtime, slack.team_id, firing))
        await asyncio.wait_for(signal.waiting.wait(), WAIT)
        firing_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await firing_task
    await held_at_next_start(tmp_path, firing.session(slack.team_id), firing.turn_id)

    async with serving(tmp_path, slack, signal) as second:
        with pytest.raises(ScheduleFailed) as failed:
            await fire_by_hand(second.channel, second.runtime, slack.team_id, firing)
        assert await has_fired(second.channel, second.runtime, slack.team_id, firing)

    said = str(failed.value)
    assert f"the turn {firing.turn_id} is held" in said
    assert f"python -m bot turns --held --retry {firing.turn_id}" in said
    assert not signal.go.is_set()  # the held turn's tool was never run again
