"""Issue 22, point 1: a SIGKILL inside a child turn resumes parent and child, nothing run twice.

``delegation_crash_child.py`` runs a turn of ``lead`` that delegates to
``researcher``; the researcher writes a row (a local call), then calls a slow
remote tool. The process is SIGKILLed while that remote call runs, or while the
researcher's model is asked after the write committed, on a SQLite file and on
PostgreSQL. A fresh process resumes both turns: the parent's call joins the
child it started (no second child), the child's committed steps (its model
steps, its local write) are not done again, and the parent completes with the
child's reply.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent import delegation_crash_child as child
from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase

CHILD = Path(__file__).with_name("delegation_crash_child.py")

Spawn = Callable[[str], ChildProcess]


@pytest.fixture
def spawn(tmp_path: Path, crash_db: CrashDatabase) -> Iterator[Spawn]:
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        yield lambda phase: start(phase, [crash_db.where, tmp_path / "runs.log", phase])


def logged(log: Path, pid: int) -> Counter[str]:
    """What ran in the process ``pid``: ``run <call>`` and ``model <agent> <step>`` lines."""
    lines = [line.rsplit(" ", 1) for line in log.read_text().splitlines()]
    return Counter(what for what, by in lines if int(by) == pid)


def turns(db: CrashDatabase) -> dict[str, str]:
    return {turn: status for turn, status in db.rows("select turn_id, status from turns")}


@pytest.mark.parametrize("killed", ["child_tool", "child_model"])
def test_a_sigkill_in_a_child_turn_resumes_both_without_redoing_committed_steps(
    spawn: Spawn, crash_db: CrashDatabase, tmp_path: Path, killed: str
) -> None:
    running = spawn(killed)
    running.wait_for("IN_CHILD_TOOL" if killed == "child_tool" else "IN_CHILD_MODEL")
    running.kill()
    assert turns(crash_db) == {child.TURN_ID: "running", child.CHILD_TURN: "running"}
    assert [row for (row,) in crash_db.rows("select call_id from child_rows")] == ["W"]

    recovering = spawn("recover")
    result = json.loads(recovering.wait_for("RESULT "))
    recovering.finish()

    assert result == {"type": "Completed", "text": "lead: found wrote+dug"}
    assert turns(crash_db) == {child.TURN_ID: "completed", child.CHILD_TURN: "completed"}
    assert [row for (row,) in crash_db.rows("select call_id from child_rows")] == ["W"]
    again = logged(tmp_path / "runs.log", recovering.proc.pid)
    expected: dict[str, Any] = {
        # the child's first step and its write were committed: neither is done again
        "model researcher model:3": 1,  # asked again only if the kill came mid-model
        "run S": 1,
        "model researcher model:5": 1,
        "model lead model:3": 1,  # the parent's reply, once its call has the child's
    }
    if killed == "child_tool":
        del expected["model researcher model:3"]
    assert again == Counter(expected)
