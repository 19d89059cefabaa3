"""Issue 22, point 2: a SIGKILL in a batch of concurrent calls resumes only the calls still owed.

``parallel_crash_child.py`` runs one batch of four calls (remote ``C1``, slow;
remote ``C2``; local ``C3``; remote ``C4``) on a SQLite file and on PostgreSQL,
and is SIGKILLed at one of two points: once the three fast calls committed their
results while ``C1`` still runs (they wait as memos, unplaced behind it), or
while the local call is inside its transaction with the remote calls around it.
A fresh process resumes the turn; every call must end with exactly one result,
in call order, a call whose result was on disk must not run again, and the
local call's write must be there exactly once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent import parallel_crash_child as child
from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase

CHILD = Path(__file__).with_name("parallel_crash_child.py")

Spawn = Callable[[str], ChildProcess]


@pytest.fixture
def spawn(tmp_path: Path, crash_db: CrashDatabase) -> Iterator[Spawn]:
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        yield lambda phase: start(phase, [crash_db.where, tmp_path / "runs.log", phase])


def messages(db: CrashDatabase) -> list[dict[str, Any]]:
    return [json.loads(body) for (body,) in db.rows("select body from messages order by idx")]


def tool_steps(db: CrashDatabase) -> dict[str, dict[str, Any]]:
    rows = db.rows("select step_id, result from steps")
    return {step: json.loads(memo) for step, memo in rows if step.startswith("tool:")}


def runs(log: Path, pid: int) -> Counter[str]:
    """How often each call ran in the process ``pid``."""
    lines = [line.split() for line in log.read_text().splitlines()]
    return Counter(call_id for _, call_id, by in lines if int(by) == pid)


def has_rows_table(db: CrashDatabase) -> bool:
    if db.kind == "sqlite":
        found = db.rows("select name from sqlite_master where name = 'parallel_rows'")
    else:
        found = db.rows("select to_regclass('parallel_rows')::text")
        found = [row for row in found if row[0] is not None]
    return bool(found)


def rows_written(db: CrashDatabase) -> list[str]:
    return [call_id for (call_id,) in db.rows("select call_id from parallel_rows")]


@pytest.mark.parametrize("killed", ["settled", "in_local"])
def test_a_sigkill_mid_batch_resumes_only_the_calls_still_owed(spawn, crash_db, tmp_path, killed):
    running = spawn(killed)
    running.wait_for("SETTLED" if killed == "settled" else "IN_LOCAL")
    running.kill()

    at_kill = tool_steps(crash_db)
    committed = {step.rsplit(":", 1)[1] for step in at_kill}
    if killed == "settled":
        # the fast calls' results are on disk, as memos: none is placed before C1's
        assert committed == {"C2", "C3", "C4"}
        assert all("result" in memo for memo in at_kill.values())
        assert [m["role"] for m in messages(crash_db)] == ["user", "assistant"]
        assert rows_written(crash_db) == ["C3"]
    else:
        # the local call's transaction never committed: neither its result nor its row
        assert "C3" not in committed
        assert not has_rows_table(crash_db) or rows_written(crash_db) == []

    recovering = spawn("recover")
    result = json.loads(recovering.wait_for("RESULT "))
    recovering.finish()

    assert result == {"type": "Completed", "text": "r1,r2,r3,r4"}
    stored = messages(crash_db)
    roles = [m["role"] for m in stored]
    assert roles == ["user", "assistant", "tool", "tool", "tool", "tool", "assistant"]
    # exactly one result per call, in call order, whatever order they ended in
    assert [m["call_id"] for m in stored[2:6]] == list(child.CALLS)
    assert [m["result"] for m in stored[2:6]] == ["r1", "r2", "r3", "r4"]
    assert rows_written(crash_db) == ["C3"]  # the local write happened exactly once
    # the recovery ran exactly the calls with nothing on disk, each once
    again = runs(tmp_path / "runs.log", recovering.proc.pid)
    assert again == Counter(set(child.CALLS) - committed), (again, committed)
