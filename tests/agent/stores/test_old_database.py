"""A database written by the release before the layout move opens, and its turns finish.

``fixtures/before_layout.sqlite`` was written by ``fixtures/make_before_layout.py``
run against commit 5baa167. Every persisted value is read back through today's
code: statuses, step keys, stored JSON, the event log, deliveries, policies.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from agent import (
    AgentRuntime,
    AssistantMessage,
    Completed,
    SQLiteStore,
    TextBlock,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from agent.core.events import TURN_EVENT_ADAPTER
from tests.agent.fixtures.make_before_layout import (
    AGENT,
    APPROVER,
    CRASHED,
    CRASHED_TURN,
    DONE,
    DONE_ASK,
    DONE_DELIVERY,
    DONE_TURN,
    INPUT_ID,
    PARKED,
    PARKED_TURN,
    PLACE_POLICY,
    make_agent,
)
from tests.agent.helpers import read_only

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "before_layout.sqlite"
WAIT_SECONDS = 20.0


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    """A copy of the fixture: opening a database migrates and writes it."""
    path = tmp_path / "before_layout.sqlite"
    shutil.copyfile(FIXTURE, path)
    # The killed process's lease ran 30 s past the day the file was written; say it
    # ran out, as it has for any later reader, so no machine's clock can make the
    # runtime wait on it. Nothing the old code spelled is touched.
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE leases SET until = 0 WHERE session_id = 'crashed'")
    return path


@pytest.fixture
async def old_store(old_file: Path) -> AsyncIterator[SQLiteStore]:
    store = await SQLiteStore.open(old_file)
    yield store
    await store.close()


def test_the_fixture_holds_the_three_turns_as_the_old_code_spelled_them(old_file: Path):
    # the spelled values themselves: a status or step key written differently today
    # would leave these rows unread, so the tests below would fail too
    assert read_only(old_file, "SELECT version FROM schema_version") == [(7,)]
    assert read_only(
        old_file,
        "SELECT s.session_id, s.status, t.turn_id, t.status FROM turns AS t"
        " JOIN sessions AS s ON s.id = t.session ORDER BY s.id",
    ) == [
        ("done", "idle", "t-done", "completed"),
        ("parked", "suspended", "t-parked", "suspended"),
        ("crashed", "running", "t-crashed", "running"),
    ]
    assert read_only(old_file, "SELECT turn_id, step_id FROM steps ORDER BY turn_id, step_id") == [
        ("t-crashed", "model:1"),
        ("t-crashed", "tool:1:c1"),
        ("t-done", "model:1"),
        ("t-done", "model:3"),
        ("t-done", "tool:1:c1"),
        ("t-parked", "model:1"),
    ]


async def test_the_completed_turn_reads_back_unchanged(old_store: SQLiteStore):
    stored = await old_store.load(DONE)

    usage = Usage(input_tokens=10, output_tokens=4)
    assert stored.transcript == [
        UserMessage(turn_id=DONE_TURN, text=DONE_ASK),
        AssistantMessage(
            turn_id=DONE_TURN,
            content=(
                TextBlock(text="Let me look."),
                ToolCall(id="c1", name="lookup", input={"city": "Paris"}),
            ),
            stop_reason="tool_use",
            usage=usage,
        ),
        ToolMessage(
            turn_id=DONE_TURN, call_id="c1", name="lookup", result={"city": "Paris", "sky": "clear"}
        ),
        AssistantMessage(
            turn_id=DONE_TURN,
            content=(TextBlock(text="Skies: Paris clear."),),
            stop_reason="end_turn",
            usage=Usage(input_tokens=10, output_tokens=5),
        ),
    ]
    assert stored.status == "idle"
    record = stored.turns[DONE_TURN]
    assert (record.status, record.seq, record.opening_index) == ("completed", 1, 0)
    assert record.result == Completed(
        turn_id=DONE_TURN, text="Skies: Paris clear.", usage=Usage(input_tokens=20, output_tokens=9)
    )
    assert await old_store.load_steps(DONE, DONE_TURN) == {
        "model:1": {"message": 1},
        "tool:1:c1": {"message": 2, "is_error": False},
        "model:3": {"message": 3},
    }


async def test_the_delivery_events_and_place_policy_read_back(old_store: SQLiteStore):
    assert await old_store.load_delivery(DONE, DONE_TURN) == DONE_DELIVERY
    assert await old_store.deliveries(AGENT) == [(DONE, DONE_TURN, DONE_DELIVERY)]
    assert await old_store.place_policies("slack") == {"C1": PLACE_POLICY}

    logged = await old_store.read_events(DONE, after=0, limit=100)
    events = [(position, TURN_EVENT_ADAPTER.validate_python(body)) for position, body in logged]
    assert [(position, event.type) for position, event in events] == [
        (1, "turn.started"),
        (2, "message.completed"),
        (3, "action.requested"),
        (4, "action.completed"),
        (5, "message.completed"),
        (6, "turn.completed"),
    ]
    assert {(e.agent, e.session, e.turn_id) for _, e in events} == {(AGENT, "done", DONE_TURN)}
    parked_events = await old_store.read_events(PARKED, after=0, limit=100)
    assert [body["type"] for _, body in parked_events if isinstance(body, dict)][-1] == (
        "input.requested"
    )
    bounds = await old_store.event_bounds(DONE)
    assert (bounds.first, bounds.last) == (1, 6)
    listed = await old_store.list_sessions(AGENT)
    assert {(s.session_id, s.status, s.title) for s in listed} == {
        ("done", "idle", DONE_ASK),
        ("parked", "suspended", "Announce: the deploy moved to Friday."),
        ("crashed", "running", "Compare Oslo and Rome."),
    }


async def test_the_running_and_the_suspended_turns_finish_under_todays_runtime(
    old_store: SQLiteStore,
):
    ran: list[str] = []
    async with AgentRuntime(old_store, make_agent(ran)) as runtime:
        # entering resumed the turn the kill stopped: only the call owed a result runs
        crashed = runtime.session(AGENT, CRASHED.session_id)
        result = await asyncio.wait_for(crashed.result(CRASHED_TURN), WAIT_SECONDS)
        assert isinstance(result, Completed)
        assert result.text == "Skies: Oslo snow, Rome sun."
        assert ran == ["lookup Rome"]

        parked = runtime.session(AGENT, PARKED.session_id)
        [pending] = await parked.pending()
        assert (pending.id, pending.call_id, pending.tool) == (INPUT_ID, "c1", "announce")
        await parked.resume(PARKED_TURN, INPUT_ID, True, by=APPROVER)
        result = await asyncio.wait_for(parked.result(PARKED_TURN), WAIT_SECONDS)
        assert isinstance(result, Completed)
        assert result.text == "Announcement: {'posted': True}."
        assert ran == ["lookup Rome", "announce Friday"]

    statuses = {
        key.session_id: (stored.status, {t.turn_id: t.status for t in stored.turns.values()})
        for key in (DONE, PARKED, CRASHED)
        if (stored := await old_store.load(key))
    }
    assert statuses == {
        "done": ("idle", {DONE_TURN: "completed"}),
        "parked": ("idle", {PARKED_TURN: "completed"}),
        "crashed": ("idle", {CRASHED_TURN: "completed"}),
    }
    assert await old_store.unfinished_turns() == []
    assert await old_store.suspended_turns() == []
