"""Issue 21, point 5: a compaction is all or nothing across a SIGKILL.

``compaction_crash_child.py`` runs five turns of an agent that keeps two and
compacts three at a time, and is SIGKILLed while the model writes the summary
(nothing is written: the turns stay live and the next turn's end compacts them)
or just after the compaction committed (it stays done, and is not done again).
A fresh process on the same database (a SQLite file, then PostgreSQL) takes a
sixth turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase

CHILD = Path(__file__).with_name("compaction_crash_child.py")

Spawn = Callable[[str], ChildProcess]


@pytest.fixture
def spawn(tmp_path: Path, crash_db: CrashDatabase) -> Iterator[Spawn]:
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        yield lambda phase: start(phase, [crash_db.where, phase])


def live_turns(db: CrashDatabase) -> list[str]:
    return sorted(turn_id for (turn_id,) in db.rows("select turn_id from turns"))


def archived_turns(db: CrashDatabase) -> list[str]:
    return sorted(turn_id for (turn_id,) in db.rows("select turn_id from archived_turns"))


@pytest.mark.parametrize("killed", ["summarising", "committed"])
def test_a_compaction_is_done_once_or_not_at_all_across_a_sigkill(spawn, crash_db, killed):
    first = spawn(killed)
    first.wait_for("SUMMARISING" if killed == "summarising" else "COMPACTED")
    first.kill()
    live_before, archived_before = live_turns(crash_db), archived_turns(crash_db)

    recovering = spawn("recover")
    result: dict[str, Any] = json.loads(recovering.wait_for("RESULT "))
    recovering.finish()

    if killed == "summarising":
        assert (live_before, archived_before) == (["t1", "t2", "t3", "t4", "t5"], [])
        # the sixth turn's end compacts the four oldest, with a summary of its own
        assert result["live"] == ["t5", "t6"]
        assert result["archived"] == ["t1", "t2", "t3", "t4"]
        assert result["summary"].startswith("S1 by pid ")
        assert result["t6_began_with"] == "count 1"  # asked before its end compacted
    else:
        assert (live_before, archived_before) == (["t4", "t5"], ["t1", "t2", "t3"])
        assert result["live"] == ["t4", "t5", "t6"]  # too few to compact again
        assert result["archived"] == ["t1", "t2", "t3"]
        assert result["t6_began_with"].endswith(result["summary"])
    assert live_turns(crash_db) == result["live"]
