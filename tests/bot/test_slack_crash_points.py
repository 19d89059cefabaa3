"""SIGKILL at each point of a reply's life, and the next start shows it exactly once.

The kill points are deterministic: the fake Slack kills the bot's process from
inside the call it names, after (or before) applying it and before answering,
so the bot dies with that call made and its answer never read. Where the turn
must be done first, the fake holds the call until the store says it is. Each
test runs on a SQLite file and again on PostgreSQL (``crash_db``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import pytest

from agent.core.records import SessionKey
from bot.slack.channel.delivery import DeliveryState
from bot.texts import SUPERSEDED
from tests.agent.crash_db import CrashDatabase
from tests.bot.test_slack_process import WAIT, Launch, launch, mention, post_signed, until
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply, Response
from tests.fakes.slack_api import FakeSlack, Message

__all__ = ["launch"]  # the process tests' fixtures, shared with the post kills

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


async def turn_completed(db: CrashDatabase, slack: FakeSlack, ts: str) -> None:
    key = SessionKey("bot", f"slack:{slack.team_id}:{slack.channel_id}:{ts}")
    turn_id = f"{slack.team_id}:{slack.channel_id}:{ts}"
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        store = await db.open()
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
    slack: FakeSlack, launch: Launch, crash_db: CrashDatabase, method: str, applied: bool
):
    async with FakeAnthropic() as api:
        api.queue(Reply.text(FULL), Reply.text(FULL))
        claude = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "DATABASE_URL": crash_db.url,
        }
        first = await launch(**claude)
        slack.on_call(method, killing(first.proc), applied=applied)  # type: ignore[arg-type]
        ts, envelope = mention(slack, "when is the deploy?")
        await post_signed(first.port, envelope)
        assert await asyncio.wait_for(first.proc.wait(), WAIT) == -signal.SIGKILL

        await launch(**claude)

        replies = await one_whole_reply(slack, ts)
        assert [(m.text, m.stream) for m in replies] == [(FULL, "stopped")]


async def test_a_bot_killed_after_its_turn_ended_but_before_the_reply_existed_shows_it(
    slack: FakeSlack, launch: Launch, crash_db: CrashDatabase
):
    async with FakeAnthropic() as api:
        api.queue(Reply.text(FULL))
        claude = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "DATABASE_URL": crash_db.url,
        }
        first = await launch(**claude)
        held = slack.hold_next("chat.startStream")
        slack.on_call("chat.startStream", killing(first.proc), applied=False)  # type: ignore[arg-type]
        ts, envelope = mention(slack, "when is the deploy?")
        await post_signed(first.port, envelope)
        await turn_completed(crash_db, slack, ts)
        held.set()
        assert await asyncio.wait_for(first.proc.wait(), WAIT) == -signal.SIGKILL
        assert slack.replies(slack.channel_id, ts) == []

        await launch(**claude)

        replies = await one_whole_reply(slack, ts)
        assert [m.text for m in replies] == [FULL]
        assert len(api.requests) == 1


async def test_an_event_is_acked_only_once_its_turn_is_admitted_so_a_kill_then_loses_nothing(
    slack: FakeSlack, launch: Launch, crash_db: CrashDatabase
):
    # Slack never sends an acknowledged event again: a bot that acked first and
    # admitted after could die in between and lose the question for good. The killed
    # bot may have asked Claude already (its turn runs as the ack goes out) without
    # committing the reply, so Claude answers the same however often it is asked.
    async with FakeAnthropic(script=lambda body: Reply.text(FULL)) as api:
        claude = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "DATABASE_URL": crash_db.url,
        }
        first = await launch(**claude)
        held = slack.hold_next("chat.startStream")  # the reply waits: admission is under test
        ts, envelope = mention(slack, "when is the deploy?")
        assert await post_signed(first.port, envelope) == 200
        first.proc.send_signal(signal.SIGKILL)  # the moment the ack arrived
        assert await asyncio.wait_for(first.proc.wait(), WAIT) == -signal.SIGKILL

        key = SessionKey("bot", f"slack:{slack.team_id}:{slack.channel_id}:{ts}")
        store = await crash_db.open()
        try:
            admitted = (await store.load(key)).turns.get(f"{slack.team_id}:{slack.channel_id}:{ts}")
        finally:
            await store.close()
        assert admitted is not None  # in the store before Slack had its ack
        held.set()

        await launch(**claude)

        replies = await one_whole_reply(slack, ts)
        assert [m.text for m in replies] == [FULL]


async def test_a_stream_opened_as_the_bot_died_goes_back_to_its_own_reply_not_its_neighbour(
    slack: FakeSlack, launch: Launch, crash_db: CrashDatabase
):
    # Slack tags a stream only when it stops. Here a superseded reply was opening its
    # closing note's stream when the bot died, and the newer turn of the thread had no
    # message yet: both are taken up at the next start, and the untagged stream is the
    # superseded one's alone. The first read after the start is slow, so the newer
    # reply's look at the thread comes first: one that took any untagged stream would.
    alive: list[asyncio.subprocess.Process] = []

    def claude_says(body: dict[str, Any]) -> Response:
        # silent on the first question, and on the newer one until the kill
        if "the freeze" not in json.dumps(body["messages"][-1]) or alive[0].returncode is None:
            return Hang(Reply.text("never said"), after_events=2)
        return Reply.text(FULL)

    async with FakeAnthropic(claude_says) as api:
        claude = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "DATABASE_URL": crash_db.url,
        }
        first = await launch(**claude)
        alive.append(first.proc)

        def opens_the_note(params: Any) -> bool:
            return "superseded" in str(params.values.get("chunks"))

        slack.on_call("chat.startStream", killing(first.proc), where=opens_the_note)  # type: ignore[arg-type]
        root, envelope = mention(slack, "when is the deploy?")
        await post_signed(first.port, envelope)
        await until(lambda: len(api.requests) == 1, "the first question is with Claude")
        # The note waits until the newer message is acknowledged, so the bot dies where
        # this test says on every store: on PostgreSQL the superseded turn's own ending
        # may commit, and its note open, before the newer message's ack leaves.
        note = slack.hold_next("chat.startStream")
        newer, envelope = mention(slack, "and the freeze?", thread_ts=root)
        assert await post_signed(first.port, envelope) == 200
        note.set()
        assert await asyncio.wait_for(first.proc.wait(), WAIT) == -signal.SIGKILL
        [orphan] = [m for m in slack.replies(slack.channel_id, root) if m.is_from_bot]
        assert (orphan.stream, orphan.metadata) == ("streaming", None)
        slack.slow_down("conversations.replies", 0.5, times=1)

        await launch(**claude)

        def settled() -> list[tuple[str, str | None]]:
            return [
                (m.text, (m.metadata or {}).get("event_payload", {}).get("turn"))
                for m in slack.replies(slack.channel_id, root)
                if m.is_from_bot and m.stream != "streaming"
            ]

        superseded_turn = f"{slack.team_id}:{slack.channel_id}:{root}"
        newer_turn = f"{slack.team_id}:{slack.channel_id}:{newer}"
        expected = [(SUPERSEDED, superseded_turn), (FULL, newer_turn)]
        await until(lambda: settled() == expected, lambda: f"{expected}, not {settled()}")
        mine = [m for m in slack.replies(slack.channel_id, root) if m.is_from_bot]
        assert mine[0].ts == orphan.ts  # the stream the bot died opening, taken back


async def test_a_bot_killed_between_keeping_a_reply_owed_and_admitting_its_turn_shows_it_once(
    slack: FakeSlack, launch: Launch, crash_db: CrashDatabase
):
    # A follow-up's admission writes twice: that the thread is owed a reply, then the
    # turn. No Slack call comes between the two, so the kill is the database it leaves:
    # the first write made, the second not. The event was never acknowledged, so Slack
    # sends it again. Taking up the owed reply at the start as well (it waited on
    # PostgreSQL for the turn to appear, then showed it with nobody to stream it to)
    # posted the answer twice.
    async with FakeAnthropic() as api:
        api.queue(Reply.text(FULL), Reply.text("And the freeze ends on Monday."))
        claude = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "DATABASE_URL": crash_db.url,
        }
        first = await launch(**claude)
        root, envelope = mention(slack, "when is the deploy?")
        await post_signed(first.port, envelope)
        await one_whole_reply(slack, root)
        first.proc.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(first.proc.wait(), WAIT) == -signal.SIGKILL

        newer, envelope = mention(slack, "and the freeze?", thread_ts=root)
        key = SessionKey("bot", f"slack:{slack.team_id}:{slack.channel_id}:{root}")
        newer_turn = f"{slack.team_id}:{slack.channel_id}:{newer}"
        store = await crash_db.open()
        try:
            assert await store.claim_delivery(key, newer_turn, DeliveryState(since=0).to_json())
        finally:
            await store.close()

        second = await launch(**claude)
        assert await post_signed(second.port, envelope) == 200  # Slack's redelivery

        def answers() -> list[Message]:
            return [
                m
                for m in slack.replies(slack.channel_id, root)
                if (m.metadata or {}).get("event_payload", {}).get("turn") == newer_turn
            ]

        await until(
            lambda: (
                [m.text for m in answers()] == ["And the freeze ends on Monday."]
                and answers()[0].stream == "stopped"
            ),
            lambda: f"one streamed answer, not {[(m.text, m.stream) for m in answers()]}",
        )
        second.proc.send_signal(signal.SIGTERM)  # stopped cleanly: nothing is still showing
        assert await asyncio.wait_for(second.proc.wait(), WAIT) == 0
        store = await crash_db.open()
        try:
            assert (await store.load(key)).turns[newer_turn].status == "completed"
        finally:
            await store.close()
        assert len(answers()) == 1
        refused = [c.error for c in slack.calls_to("chat.startStream") if not c.ok]
        assert refused == []  # it streamed to the person who asked
