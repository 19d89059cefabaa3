"""A real process is SIGKILLed at each checkpoint boundary; a fresh one recovers the turn.

The turn (run by ``crash_child.py`` on a SQLite file, and again on
PostgreSQL) is: a model reply that calls a local tool; a reply with a batch of
three calls (remote, local, remote); a final reply. The child freezes at the
chosen boundary and prints a marker; we SIGKILL it there, read what had
committed straight from the database, then start a fresh child that enters the
runtime (which resumes the turn) and check the transcript, the tools' side
effects and what the model was asked.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

from tests.agent import crash_child as child
from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase
from tests.agent.helpers import read_only

CHILD = Path(__file__).with_name("crash_child.py")

MODEL_STEPS = frozenset({"model:1", "model:3", "model:7"})
TOOL_STEPS = {"c1": "tool:1:c1", "c2": "tool:3:c2", "c3": "tool:3:c3", "c4": "tool:3:c4"}
ALL_STEPS = MODEL_STEPS | frozenset(TOOL_STEPS.values())
LOCAL_CALLS = frozenset({"c1", "c3"})
REMOTE_CALLS = frozenset({"c2", "c4"})

# What must have committed when the child stands at each kill point: proof that
# the kill happened at the boundary it names, not a step earlier or later.
COMMITTED_AT = {
    "model_commit": {"model:1"},
    "local_tx": {"model:1"},
    "local_commit": {"model:1", "tool:1:c1"},
    "mid_stream": {"model:1", "tool:1:c1"},
    "batch_model_commit": {"model:1", "tool:1:c1", "model:3"},
    "batch_between": {"model:1", "tool:1:c1", "model:3", "tool:3:c2"},
    "remote_in_flight": {"model:1", "tool:1:c1", "model:3"},
    "batch_local_tx": {"model:1", "tool:1:c1", "model:3", "tool:3:c2"},
}


def _position(step: str) -> int:
    return int(step.split(":")[1])


@dataclass
class Phase:
    """One child process: what it logged and, if it was killed, what had committed."""

    kill_point: str | None
    log: list[list[str]]
    committed: set[str]
    turn_status: str | None = None
    result: dict[str, object] | None = None

    @property
    def model_steps(self) -> list[str]:
        return [fields[1] for fields in self.log if fields[0] == "model"]

    def tool_runs(self, kind: str) -> list[str]:
        """The call ids of the ``local`` or ``remote`` tool runs this process began."""
        return [fields[2] for fields in self.log if fields[0] == kind]

    @property
    def remote_keys(self) -> list[tuple[str, str]]:
        return [(fields[2], fields[3]) for fields in self.log if fields[0] == "remote"]


def _committed_steps(db: CrashDatabase) -> set[str]:
    return {str(step) for (step,) in db.rows("select step_id from steps")}


def _run_phase(tmp_path: Path, db: CrashDatabase, number: int, kill_point: str | None) -> Phase:
    log = tmp_path / f"phase{number}.log"
    argv: list[str | Path] = [
        db.where,
        log,
        "start" if number == 1 else "recover",
        kill_point or "none",
    ]
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        process = start(f"phase{number}", argv)
        if kill_point is not None:
            # the marker line, all of it: the child froze right after printing it
            assert process.wait_for(f"KILL-ME {kill_point}") == "", process.explain()
            process.kill()
            result = None
        else:
            process.finish()
            results = process.printed("RESULT ")
            assert len(results) == 1, process.explain()
            result = json.loads(results[0])
    logged = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    if kill_point is None:
        return Phase(kill_point=None, log=logged, committed=set(), result=result)
    [(status,)] = db.rows("select status from turns")
    return Phase(
        kill_point=kill_point, log=logged, committed=_committed_steps(db), turn_status=str(status)
    )


def _crash_and_recover(tmp_path: Path, db: CrashDatabase, kill_points: list[str]) -> list[Phase]:
    phases = [
        _run_phase(tmp_path, db, number, point) for number, point in enumerate(kill_points, start=1)
    ]
    phases.append(_run_phase(tmp_path, db, len(kill_points) + 1, None))
    return phases


def _assert_recovered_once(db: CrashDatabase, phases: list[Phase]) -> None:
    final = phases[-1]

    # each local tool's write exists exactly once (a killed transaction left nothing)
    assert db.rows("select id, item from orders") == [(1, child.ITEM)]
    assert db.rows("select id, item from reservations") == [(1, child.ITEM)]

    # the turn completed, in the store and as the recovering process saw it
    assert db.rows("select turn_id, status from turns") == [(child.TURN_ID, "completed")]
    expected_text = child.final_text(order_id=1, reservation_id=1)
    assert final.result == {"type": "Completed", "text": expected_text}

    # each message is in the transcript exactly once, in order, with no gaps
    rows = db.rows(
        "select idx, turn_id, role, body from messages join sessions on sessions.id = session"
        " where agent = 'shop' order by idx",
    )
    assert [idx for idx, *_ in rows] == list(range(8))
    assert {turn_id for _, turn_id, _, _ in rows} == {child.TURN_ID}
    bodies = [json.loads(body) for *_, body in rows]
    roles = [body["role"] for body in bodies]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool", "tool", "assistant"]
    tool_calls = Counter(body["call_id"] for body in bodies if body["role"] == "tool")
    assert tool_calls == Counter({"c1": 1, "c2": 1, "c3": 1, "c4": 1})
    texts = [
        "".join(block["text"] for block in body["content"] if block["kind"] == "text")
        for body in bodies
        if body["role"] == "assistant"
    ]
    assert texts == [child.FIRST_TEXT, child.SECOND_TEXT, expected_text]
    assert sum(1 for body in bodies if body["role"] == "user") == 1

    steps = db.rows("select step_id from steps")
    assert sorted(step for (step,) in steps) == sorted(ALL_STEPS)

    for before, after in pairwise(phases):
        # the kill happened at the boundary it names, with the turn still unfinished
        assert before.kill_point is not None
        assert before.committed == COMMITTED_AT[before.kill_point]
        assert before.turn_status == "running"
        # a committed model step is never asked again; what was owed is asked once
        # (all of it by the last process; a prefix of it by one that was killed again)
        assert not set(after.model_steps) & before.committed
        owed_steps = sorted(MODEL_STEPS - before.committed, key=_position)
        # a committed tool step never runs again; every owed call runs once
        owed = [c for c, step in TOOL_STEPS.items() if step not in before.committed]
        owed_local = [c for c in owed if c in LOCAL_CALLS]
        owed_remote = [c for c in owed if c in REMOTE_CALLS]
        if after is final:
            assert after.model_steps == owed_steps
            assert after.tool_runs("local") == owed_local
            assert after.tool_runs("remote") == owed_remote
        else:
            assert after.model_steps == owed_steps[: len(after.model_steps)]
            assert after.tool_runs("local") == owed_local[: len(after.tool_runs("local"))]
            assert after.tool_runs("remote") == owed_remote[: len(after.tool_runs("remote"))]

    # the remote tool ran at least once per call, always with that call's one key
    keys: dict[str, set[str]] = {}
    for phase in phases:
        for call_id, key in phase.remote_keys:
            keys.setdefault(call_id, set()).add(key)
    assert set(keys) == REMOTE_CALLS
    assert all(len(seen) == 1 for seen in keys.values()), keys
    assert len({key for seen in keys.values() for key in seen}) == len(REMOTE_CALLS)


@pytest.mark.parametrize(
    "kill_point",
    [
        pytest.param("model_commit", id="after-model-commit"),
        pytest.param("local_tx", id="inside-local-tool-transaction"),
        pytest.param("local_commit", id="after-local-tool-commit"),
        pytest.param("mid_stream", id="mid-stream-of-model-reply"),
        pytest.param("batch_model_commit", id="after-batch-reply-commit"),
        pytest.param("batch_between", id="between-two-calls-of-a-batch"),
        pytest.param("remote_in_flight", id="inside-remote-tool-before-commit"),
        pytest.param("batch_local_tx", id="inside-local-tool-transaction-of-a-batch"),
    ],
)
def test_crash_recovery_completes_turn_exactly_once(tmp_path, crash_db, kill_point):
    phases = _crash_and_recover(tmp_path, crash_db, [kill_point])

    assert _committed_steps(crash_db) == ALL_STEPS
    _assert_recovered_once(crash_db, phases)


@pytest.mark.parametrize(
    "kill_points",
    [
        pytest.param(["local_tx", "local_tx"], id="same-local-transaction-twice"),
        pytest.param(["mid_stream", "batch_local_tx"], id="mid-stream-then-batch-transaction"),
        pytest.param(["local_commit", "batch_between"], id="local-commit-then-mid-batch"),
        pytest.param(["model_commit", "remote_in_flight"], id="model-commit-then-remote"),
    ],
)
def test_crash_recovery_survives_a_second_crash_during_recovery(tmp_path, crash_db, kill_points):
    phases = _crash_and_recover(tmp_path, crash_db, kill_points)

    _assert_recovered_once(crash_db, phases)


def test_crash_inside_local_tool_leaves_no_write_behind(tmp_path):
    # the frozen child has written its order row inside the step's transaction
    sessions = CrashDatabase("sqlite", str(tmp_path / "sessions.db"))
    phase = _run_phase(tmp_path, sessions, 1, "local_tx")
    db = Path(sessions.where)

    assert phase.tool_runs("local") == ["c1"]
    assert Path(f"{db}-wal").stat().st_size > 0  # recovery has a hot WAL to read
    tables = {name for (name,) in read_only(db, "select name from sqlite_master")}
    roles = [role for (role,) in read_only(db, "select role from messages order by idx")]
    assert "orders" not in tables  # the create and the insert died with the transaction
    assert roles == ["user", "assistant"]
