"""SIGKILL at each point of a reply's life, and the next start shows it exactly once.

The kill points are deterministic: the fake Slack kills the bot's process from
inside the call it names, after (or before) applying it and before answering,
so the bot dies with that call made and its answer never read. Where the turn
must be done first, the fake holds the call until the store says it is.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from agent import SQLiteStore
from agent.core.records import SessionKey
from tests.bot.test_slack_process import WAIT, Launch, launch, mention, post_signed, slack
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import FakeSlack, Message

__all__ = ["launch", "slack"]  # the process tests' fixtures, shared with the post kills

FULL = "The deploy moved to Friday at noon, after the freeze."


def killing(proc: asyncio.subprocess.Process) -> object:
    return lambda: os.kill(proc.pid, signal.SIGKILL)


async def one_whole_reply(slack: FakeSlack, ts: str) -> list[Message]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        replies = slack.replies(slack.channel_id, ts)
        if replies and replies[-1].text == FULL and replies[-1].stream != "streaming":
            break
        await asyncio.sleep(0.02)
    return slack.replies(slack.channel_id, ts)


async def turn_completed(db: Path, slack: FakeSlack, ts: str) -> None:
    key = SessionKey("bot", f"slack:{slack.team_id}:{slack.channel_id}:{ts}")
    turn_id = f"{slack.team_id}:{slack.channel_id}:{ts}"
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        store = await SQLiteStore.open(db)
        try:
            record = (await store.load(key)).turns.get(turn_id)
        finally:
            await store.close()
        if record is not None and record.status == "completed":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"turn {turn_id} never completed")


@pytest.mark.parametrize(
    ("method", "applied"),
    [
        ("assistant.threads.setStatus", True),  # admitted, nothing shown yet
        ("chat.startStream", False),  # about to open the reply
        ("chat.startStream", True),  # the reply opened, its ts never read nor kept
        ("chat.stopStream", False),  # streamed, not finished
        ("chat.stopStream", True),  # finished, its state not yet forgotten
    ],
    ids=["admitted", "opening", "opened-unsaved", "streamed", "finished"],
)
async def test_a_bot_killed_at_each_point_of_a_reply_shows_it_once_at_its_next_start(
    slack: FakeSlack, launch: Launch, method: str, applied: bool
):
    async with FakeAnthropic() as api:
        api.queue(Reply.text(FULL), Reply.text(FULL))
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        first = await launch(**claude)
        slack.on_call(method, killing(first.proc), applied=applied)  # type: ignore[arg-type]
        ts, envelope = mention(slack, "when is the deploy?")
        await post_signed(first.port, envelope)
        assert await asyncio.wait_for(first.proc.wait(), WAIT) == -signal.SIGKILL

        await launch(**claude)

        replies = await one_whole_reply(slack, ts)
        assert [(m.text, m.stream) for m in replies] == [(FULL, "stopped")]


async def test_a_bot_killed_after_its_turn_ended_but_before_the_reply_existed_shows_it(
    slack: FakeSlack, launch: Launch, tmp_path: Path
):
    async with FakeAnthropic() as api:
        api.queue(Reply.text(FULL))
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        first = await launch(**claude)
        held = slack.hold_next("chat.startStream")
        slack.on_call("chat.startStream", killing(first.proc), applied=False)  # type: ignore[arg-type]
        ts, envelope = mention(slack, "when is the deploy?")
        await post_signed(first.port, envelope)
        await turn_completed(tmp_path / "bot.db", slack, ts)
        held.set()
        assert await asyncio.wait_for(first.proc.wait(), WAIT) == -signal.SIGKILL
        assert slack.replies(slack.channel_id, ts) == []

        await launch(**claude)

        replies = await one_whole_reply(slack, ts)
        assert [m.text for m in replies] == [FULL]
        assert len(api.requests) == 1


async def test_an_event_is_acked_only_once_its_turn_is_admitted_so_a_kill_then_loses_nothing(
    slack: FakeSlack, launch: Launch, tmp_path: Path
):
    # Slack never sends an acknowledged event again: a bot that acked first and
    # admitted after could die in between and lose the question for good
    async with FakeAnthropic() as api:
        api.queue(Reply.text(FULL))
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        first = await launch(**claude)
        held = slack.hold_next("chat.startStream")  # the reply waits: admission is under test
        ts, envelope = mention(slack, "when is the deploy?")
        assert await post_signed(first.port, envelope) == 200
        first.proc.send_signal(signal.SIGKILL)  # the moment the ack arrived
        assert await asyncio.wait_for(first.proc.wait(), WAIT) == -signal.SIGKILL

        key = SessionKey("bot", f"slack:{slack.team_id}:{slack.channel_id}:{ts}")
        store = await SQLiteStore.open(tmp_path / "bot.db")
        try:
            admitted = (await store.load(key)).turns.get(f"{slack.team_id}:{slack.channel_id}:{ts}")
        finally:
            await store.close()
        assert admitted is not None  # in the store before Slack had its ack
        held.set()

        await launch(**claude)

        replies = await one_whole_reply(slack, ts)
        assert [m.text for m in replies] == [FULL]
