"""A cancel request outlives the process that stored it: SIGKILL, then a new process obeys it.

The turn (run by ``cancel_crash_child.py`` on a SQLite file, and again on
PostgreSQL) is one model reply asking for a batch of two async tools, ``first``
then ``second``, and a final reply once both have results. The main test goes:

1. start a child that runs the turn until ``first`` is entered and blocks, then
   calls ``session.cancel`` itself and prints ``CANCEL_STORED`` once it returned;
2. SIGKILL it there (the tool still running, so the turn never reached a
   boundary to stop at) and read the database: the turn is still
   ``running``, its ``cancel`` column says ``requested``, no tool result exists;
3. start a fresh child on the same database: its runtime's start-up recovers the
   turn, which must end ``cancelled`` at its first boundary, closing both calls
   with ``{"cancelled": true}``, without asking the model or entering a tool.

Without the stored request the next start would replay the turn to
completion: a second model call, ``first`` entered from two pids, ``second``
run, which is what the assertions on the logs rule out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agent import cancel_crash_child as child
from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase

CHILD = Path(__file__).with_name("cancel_crash_child.py")
CALLS = [("first", child.FIRST_CALL), ("second", child.SECOND_CALL)]
BATCH_STEPS = {f"tool:1:{call_id}" for _, call_id in CALLS}
CANCELLED_CALL = {"cancelled": True}
KINDS = {child.FIRST_CALL: "remote", child.SECOND_CALL: "remote"}
"""The kind of each call, recorded with the reply that made them."""


class Child(ChildProcess):
    """A ``cancel_crash_child.py`` process: its events and its turns' results."""

    def events(self, turn_id: str = child.TURN_ID) -> list[str]:
        """The events of one turn this process saw, as ``type`` or ``type call_id``."""
        return [
            line.removeprefix(f"{turn_id} ").removesuffix(" -")
            for line in self.printed("EVENT ")
            if line.startswith(f"{turn_id} ")
        ]

    def results(self) -> dict[str, dict[str, Any]]:
        """Each turn's result, as the recovering process printed it at its end."""
        self.finish()
        out: dict[str, dict[str, Any]] = {}
        for line in self.printed("RESULT "):
            turn_id, body = line.split(" ", 1)
            out[turn_id] = json.loads(body)
        return out


Spawn = Callable[[str], Child]


@pytest.fixture
def spawn(tmp_path: Path, crash_db: CrashDatabase) -> Iterator[Spawn]:
    """Start children on ``crash_db``; any still alive at teardown is SIGKILLed and reaped."""
    with start_children(Child, CHILD, tmp_path) as start:

        def spawn_phase(phase: str) -> Child:
            return start(phase, [crash_db.where, tmp_path / "calls.log", phase])

        yield spawn_phase


@dataclass(frozen=True)
class Turn:
    status: str
    cancel: str | None
    record: dict[str, Any]


@dataclass(frozen=True)
class Stored:
    """What the database holds for the test's one session."""

    session_status: str
    turns: dict[str, Turn]
    steps: dict[str, dict[str, Any]]
    messages: list[dict[str, Any]]

    def roles(self, turn_id: str = child.TURN_ID) -> list[str]:
        return [body["role"] for body in self.messages if body["turn_id"] == turn_id]

    @property
    def tool_messages(self) -> list[tuple[str, str, Any, bool]]:
        return [
            (body["name"], body["call_id"], body["result"], body["is_error"])
            for body in self.messages
            if body["role"] == "tool"
        ]


def _stored(db: CrashDatabase) -> Stored:
    [(session_status,)] = db.rows("select status from sessions")
    turns = {
        str(turn_id): Turn(status=str(status), cancel=cancel, record=json.loads(record))
        for turn_id, status, cancel, record in db.rows(
            "select turn_id, status, cancel, record from turns order by seq"
        )
    }
    steps: dict[str, dict[str, Any]] = {}
    for turn_id, step, result in db.rows("select turn_id, step_id, result from steps"):
        assert turn_id == child.TURN_ID  # the queued turn of the second test never steps
        steps[str(step)] = json.loads(result)
    rows = db.rows("select idx, body from messages order by idx")
    assert [idx for idx, _ in rows] == list(range(len(rows)))  # no gap, no repeat
    return Stored(
        session_status=str(session_status),
        turns=turns,
        steps=steps,
        messages=[json.loads(body) for _, body in rows],
    )


def _log(path: Path) -> list[dict[str, str]]:
    """The fsynced log lines of every child: ``kind key=value ...`` as a dict."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        kind, *pairs = line.split()
        entries.append({"kind": kind, **dict(pair.split("=", 1) for pair in pairs)})
    return entries


def _model_asks(tmp_path: Path) -> list[tuple[int, str, str]]:
    """Every ask of the model in any process: (pid, turn, step)."""
    return [
        (int(e["pid"]), e["turn"], e["step"])
        for e in _log(tmp_path / "calls.log")
        if e["kind"] == "model"
    ]


def _tool_entries(tmp_path: Path) -> list[tuple[str, int]]:
    """Every entry into a tool in any process: (tool, pid); none was ever abandoned."""
    log = _log(tmp_path / "calls.log")
    assert [e for e in log if e["kind"] == "abandoned"] == []  # a running tool is let finish
    return [(e["tool"], int(e["pid"])) for e in log if e["kind"] == "entered"]


def _cancel_while_first_runs_then_kill(
    spawn: Spawn, db: CrashDatabase, logs: Path, phase: str
) -> Child:
    """Run the turn into ``first``, have the child cancel it, SIGKILL it; check the database."""
    canceller = spawn(phase)
    canceller.wait_for("IN_FIRST")
    assert json.loads(canceller.wait_for("CANCEL_STORED ")) is True
    canceller.kill()

    # the turn was stopped nowhere: the tool it waits on was still running at the kill
    assert "turn.cancelled" not in canceller.events()
    assert [e for e in canceller.events() if e.startswith("action.")] == [
        f"action.requested {child.FIRST_CALL}"
    ]
    killed = _stored(db)
    assert killed.session_status == "running"
    assert list(killed.turns) == [child.TURN_ID]
    turn = killed.turns[child.TURN_ID]
    assert (turn.status, turn.record["status"], turn.record["result"]) == (
        "running",
        "running",
        None,
    )
    # the batch's reply committed; neither of its calls has a result yet
    assert killed.steps == {"model:1": {"message": 1, "kinds": KINDS}}
    assert killed.roles() == ["user", "assistant"]
    assert killed.tool_messages == []
    [_, batch] = killed.messages
    assert [(c["name"], c["id"]) for c in batch["content"] if c["kind"] == "tool_call"] == CALLS
    # this process asked the model once and entered ``first`` only
    assert _model_asks(logs) == [(canceller.proc.pid, child.TURN_ID, "model:1")]
    assert _tool_entries(logs) == [("first", canceller.proc.pid)]
    return canceller


def test_a_cancel_stored_before_a_sigkill_ends_the_turn_cancelled_at_the_next_start(
    spawn, tmp_path, crash_db
):
    canceller = _cancel_while_first_runs_then_kill(spawn, crash_db, tmp_path, "cancel-running")
    # the request is on disk, in its own column: all the next process has to go on
    assert _stored(crash_db).turns[child.TURN_ID].cancel == "requested"

    recoverer = spawn("recover")
    assert recoverer.results() == {
        child.TURN_ID: {"type": "Cancelled", "reason": "requested"},
    }
    # stopped at its first boundary: no tool started, no model streamed, here
    assert recoverer.events()[-1] == "turn.cancelled"
    assert [e for e in recoverer.events() if e.startswith(("action.", "message."))] == []

    final = _stored(crash_db)
    assert final.session_status == "idle"
    turn = final.turns[child.TURN_ID]
    assert (turn.status, turn.cancel) == ("cancelled", "requested")
    assert turn.record["result"] == {
        "status": "cancelled",
        "turn_id": child.TURN_ID,
        "reason": "requested",
    }
    # both calls of the batch closed, in order, so the next model call gets a valid thread
    assert final.roles() == ["user", "assistant", "tool", "tool"]
    assert final.tool_messages == [(name, call_id, CANCELLED_CALL, True) for name, call_id in CALLS]
    assert final.steps == {
        "model:1": {"message": 1, "kinds": KINDS},
        f"tool:1:{child.FIRST_CALL}": {"message": 2, "is_error": True},
        f"tool:1:{child.SECOND_CALL}": {"message": 3, "is_error": True},
    }

    # across both processes: one model ask, one entry into ``first``, none into ``second``
    assert _model_asks(tmp_path) == [(canceller.proc.pid, child.TURN_ID, "model:1")]
    assert _tool_entries(tmp_path) == [("first", canceller.proc.pid)]


def test_a_queued_turn_cancelled_before_a_sigkill_is_not_run_by_the_next_start(
    spawn, tmp_path, crash_db
):
    canceller = spawn("cancel-queued")
    canceller.wait_for("IN_FIRST")
    assert json.loads(canceller.wait_for("CANCEL_STORED ")) is True
    canceller.kill()

    killed = _stored(crash_db)
    assert killed.session_status == "running"
    assert list(killed.turns) == [child.TURN_ID, child.QUEUED_ID]
    running, queued = killed.turns[child.TURN_ID], killed.turns[child.QUEUED_ID]
    assert (running.status, running.cancel) == ("running", None)
    # a turn that never opened ended at once: no request left to carry out, nothing written
    assert (queued.status, queued.record["result"]["reason"]) == ("cancelled", "requested")
    assert killed.roles(child.QUEUED_ID) == []
    assert canceller.events(child.QUEUED_ID) == ["turn.cancelled"]
    assert "turn.cancelled" not in canceller.events()
    assert _tool_entries(tmp_path) == [("first", canceller.proc.pid)]

    recoverer = spawn("recover")
    assert recoverer.results() == {
        child.TURN_ID: {"type": "Completed", "text": child.DONE_TEXT},
        child.QUEUED_ID: {"type": "Cancelled", "reason": "requested"},
    }
    final = _stored(crash_db)
    assert final.session_status == "idle"
    assert final.turns[child.QUEUED_ID] == queued  # untouched by the recovery
    assert final.turns[child.TURN_ID].status == "completed"
    # the running turn replayed its unfinished call (at least once) and went on to its end
    assert final.roles() == ["user", "assistant", "tool", "tool", "assistant"]
    assert final.roles(child.QUEUED_ID) == []
    assert [(pid, turn) for pid, turn, _ in _model_asks(tmp_path)] == [
        (canceller.proc.pid, child.TURN_ID),
        (recoverer.proc.pid, child.TURN_ID),
    ]
    assert _tool_entries(tmp_path) == [
        ("first", canceller.proc.pid),
        ("first", recoverer.proc.pid),
        ("second", recoverer.proc.pid),
    ]
