"""A parked turn outlives the process that parked it: SIGKILL, then a new process finishes it.

The turn (run by ``hitl_crash_child.py`` on a SQLite file, and again on
PostgreSQL) is: a model reply that calls the async tool ``post_announcement``;
the tool asks ``U1`` to approve with ``ctx.request_input`` and posts only on
``True``; a final reply. Each test goes:

1. start a child in ``park`` phase and wait for its ``PARKED`` line: the turn
   parked and the child froze (event loop included);
2. SIGKILL it and read the database: the park is all on disk (turn and
   session ``suspended``, the request in the turn's record, no answer stored);
3. finish the turn from a *new* process on the same database: answered by ``U1``
   (after a ``U2`` who is refused, in a process of its own), or, for a
   request with a time to live, expired by a fresh runtime's start-up;
4. check the transcript and steps, and the two logs the tool keeps: it was
   entered twice (once to park, once with the answer, in two processes), and
   the side effect after ``request_input`` ran once, or never when expired.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agent import hitl_crash_child as child
from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase

CHILD = Path(__file__).with_name("hitl_crash_child.py")
TTL_SECONDS = 0.5
ANSWER_STEP = f"input:{child.TURN_ID}:{child.INPUT_ID}"
TOOL_STEP = f"tool:1:{child.CALL_ID}"


class Child(ChildProcess):
    """A ``hitl_crash_child.py`` process: its one result."""

    def result(self) -> dict[str, Any]:
        self.finish()
        [line] = self.printed("RESULT ")
        parsed: dict[str, Any] = json.loads(line)
        return parsed


Spawn = Callable[..., Child]


@pytest.fixture
def spawn(tmp_path: Path, crash_db: CrashDatabase) -> Iterator[Spawn]:
    """Start children on ``crash_db``; any still alive at teardown is SIGKILLed and reaped."""
    with start_children(Child, CHILD, tmp_path) as start:

        def spawn_phase(phase: str, *, ttl: float | None = None) -> Child:
            logs = [tmp_path / name for name in ("entries.log", "effects.log")]
            return start(phase, [crash_db.where, *logs, phase, "none" if ttl is None else str(ttl)])

        yield spawn_phase


@dataclass(frozen=True)
class Stored:
    """What the database holds for the test's one session and turn."""

    turn_status: str
    session_status: str
    record: dict[str, Any]
    steps: dict[str, Any]
    messages: list[dict[str, Any]]

    @property
    def roles(self) -> list[str]:
        return [body["role"] for body in self.messages]

    @property
    def tool_results(self) -> list[Any]:
        return [body["result"] for body in self.messages if body["role"] == "tool"]


def _stored(db: CrashDatabase) -> Stored:
    [(session_status,)] = db.rows("select status from sessions")
    [(turn_id, turn_status, record)] = db.rows("select turn_id, status, record from turns")
    assert turn_id == child.TURN_ID
    steps = {
        str(step): json.loads(result)
        for step, result in db.rows("select step_id, result from steps")
    }
    rows = db.rows("select idx, turn_id, body from messages order by idx")
    assert [idx for idx, _, _ in rows] == list(range(len(rows)))  # no gap, no repeat
    assert {turn for _, turn, _ in rows} == {child.TURN_ID}
    return Stored(
        turn_status=str(turn_status),
        session_status=str(session_status),
        record=json.loads(record),
        steps=steps,
        messages=[json.loads(body) for _, _, body in rows],
    )


def _log(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _entry_pids(tmp_path: Path) -> list[int]:
    entries = _log(tmp_path / "entries.log")
    assert all(
        fields[0] == "entered" and fields[2] == f"call={child.CALL_ID}" for fields in entries
    )
    return [int(fields[1].removeprefix("pid=")) for fields in entries]


def _park_and_kill(
    spawn: Spawn, db: CrashDatabase, logs: Path, *, ttl: float | None
) -> tuple[Child, dict[str, Any]]:
    """Park the turn in a child, SIGKILL it, and check the park is all on disk."""
    parker = spawn("park", ttl=ttl)
    request: dict[str, Any] = json.loads(parker.wait_for("PARKED "))
    parker.kill()

    assert request["id"] == child.INPUT_ID
    assert request["prompt"] == child.PROMPT
    assert request["answerers"] == {"kind": "user", "user": child.APPROVER}
    assert request["schema"] == {"type": "boolean"}
    assert (request["tool"], request["call_id"]) == ("post_announcement", child.CALL_ID)
    assert parker.printed("MODEL ") == ["model:1"]

    parked = _stored(db)
    assert (parked.turn_status, parked.session_status) == ("suspended", "suspended")
    # the record alone carries the request: the resuming process needs nothing else
    assert parked.record["status"] == "suspended"
    assert parked.record["result"]["request"] == request
    assert parked.record["result"]["event"] == {
        "source": "slack",
        "user": child.APPROVER,
        "attested": True,
        "data": {},
    }
    assert parked.record["resumes"] == 0
    # the model's call committed; the parked call has no result and no answer yet
    assert parked.steps == {"model:1": {"message": 1, "kinds": {child.CALL_ID: "remote"}}}
    assert not [step for step in parked.steps if step.startswith("input:")]
    assert parked.roles == ["user", "assistant"]
    # the tool was entered once, and stopped at the ask before its side effect
    assert _entry_pids(logs) == [parker.proc.pid]
    assert _log(logs / "effects.log") == []
    return parker, request


def test_parked_turn_survives_sigkill_and_completes_when_answered_from_a_new_process(
    spawn, tmp_path, crash_db
):
    parker, request = _park_and_kill(spawn, crash_db, tmp_path, ttl=None)
    assert request["expires_at"] is None
    parked = _stored(crash_db)

    # someone the request does not name is refused, from a process of its own
    intruder = spawn("wrong-user")
    intruder.finish()
    [refusal] = intruder.printed("REFUSED ")
    assert "for another person to answer" in json.loads(refusal)
    assert child.APPROVER not in json.loads(refusal)  # never says who could answer
    # and nothing was stored: every row as the killed process left it
    assert _stored(crash_db) == parked
    assert intruder.printed("MODEL ") == []
    assert _entry_pids(tmp_path) == [parker.proc.pid]

    resumer = spawn("resume")
    assert resumer.result() == {"type": "Completed", "text": child.POSTED_TEXT}
    # the new process saw the very request the killed one parked on
    assert json.loads(resumer.wait_for("PENDING ")) == request
    # the committed model step was not asked again; only the one after the tool was
    assert resumer.printed("MODEL ") == ["model:3"]

    final = _stored(crash_db)
    assert (final.turn_status, final.session_status) == ("completed", "idle")
    assert final.record["resumes"] == 1
    assert (final.record["result"]["status"], final.record["result"]["text"]) == (
        "completed",
        child.POSTED_TEXT,
    )
    assert set(final.steps) == {"model:1", TOOL_STEP, ANSWER_STEP, "model:3"}
    answer = final.steps[ANSWER_STEP]
    assert (answer["value"], answer["by"], answer["call"]) == (True, child.APPROVER, "c1")
    assert final.roles == ["user", "assistant", "tool", "assistant"]
    assert final.tool_results == [{"posted": True}]

    # entered twice, in two processes: to park, then from the top with the answer
    entry_pids = _entry_pids(tmp_path)
    assert entry_pids == [parker.proc.pid, resumer.proc.pid]
    assert len(set(entry_pids)) == 2
    # the side effect after request_input ran exactly once, in the resuming process
    [effect] = _log(tmp_path / "effects.log")
    assert effect[:2] == ["posted", f"pid={resumer.proc.pid}"]
    assert " ".join(effect[3:]) == child.ANNOUNCEMENT


def test_overdue_request_of_a_killed_process_expires_at_the_next_start(spawn, tmp_path, crash_db):
    before_park = time.time()
    parker, request = _park_and_kill(spawn, crash_db, tmp_path, ttl=TTL_SECONDS)
    killed_at = time.time()
    # the deadline is the park's wall-clock time plus the ttl, stored with the request
    expires_at = request["expires_at"]
    assert before_park + TTL_SECONDS < expires_at < killed_at + TTL_SECONDS
    parked = _stored(crash_db)

    # nobody runs while the deadline passes, so nobody answers: the database is as it was
    time.sleep(max(0.0, expires_at - time.time()) + 0.1)
    assert _stored(crash_db) == parked

    # a fresh runtime finds the overdue request at start-up and answers it expired
    recoverer = spawn("recover", ttl=TTL_SECONDS)
    assert recoverer.result() == {"type": "Completed", "text": child.EXPIRED_TEXT}
    assert recoverer.printed("MODEL ") == ["model:3"]

    final = _stored(crash_db)
    assert (final.turn_status, final.session_status) == ("completed", "idle")
    assert final.record["resumes"] == 1
    assert set(final.steps) == {"model:1", TOOL_STEP, ANSWER_STEP, "model:3"}
    answer = final.steps[ANSWER_STEP]
    assert answer["expired"] is True
    assert "by" not in answer  # by nobody, with no value
    assert final.roles == ["user", "assistant", "tool", "assistant"]
    # the tool saw the falsy EXPIRED, not an approval
    assert final.tool_results == [{"posted": False, "expired": True}]

    entry_pids = _entry_pids(tmp_path)
    assert entry_pids == [parker.proc.pid, recoverer.proc.pid]
    assert len(set(entry_pids)) == 2
    assert _log(tmp_path / "effects.log") == []  # never posted
