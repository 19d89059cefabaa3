"""Issue 21, point 3: a steer outlives a SIGKILL between it and the turn's next step.

``steer_crash_child.py`` runs a turn whose tool is in flight when the turn is
steered, on a SQLite file and on PostgreSQL, and is SIGKILLed at one of two
points: just after `steer` returned (the memo is on disk, the tool still runs,
nothing placed), or just after the steer was placed and the model asked with
it. A fresh process on the same database resumes the turn; the steer must reach
the model exactly once in the transcript and the turn must answer it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent import steer_crash_child as child
from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase

CHILD = Path(__file__).with_name("steer_crash_child.py")
STEP = f"steer:{child.TURN_ID}:{child.STEER_ID}"

Spawn = Callable[[str], ChildProcess]


@pytest.fixture
def spawn(tmp_path: Path, crash_db: CrashDatabase) -> Iterator[Spawn]:
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        yield lambda phase: start(phase, [crash_db.where, tmp_path / "models.log", phase])


def messages(db: CrashDatabase) -> list[dict[str, Any]]:
    return [json.loads(body) for (body,) in db.rows("select body from messages order by idx")]


def steer_messages(db: CrashDatabase) -> list[dict[str, Any]]:
    return [m for m in messages(db) if m["role"] == "user" and m.get("steer")]


def steer_memos(db: CrashDatabase) -> list[dict[str, Any]]:
    rows = db.rows(f"select result from steps where step_id = '{STEP}'")
    return [json.loads(result) for (result,) in rows]


def model_asks(log: Path) -> list[str]:
    return [line.split()[1] for line in log.read_text().splitlines()]


@pytest.mark.parametrize("killed", ["stored", "placed"])
def test_a_steer_reaches_the_model_once_after_a_sigkill(spawn, crash_db, tmp_path, killed):
    steering = spawn(killed)
    steering.wait_for("ASKED_WITH_STEER" if killed == "placed" else "STEERED")
    steering.kill()

    assert steer_memos(crash_db) == [{"text": child.STEER, "by": "U2", "number": 1}]
    placed_before = steer_messages(crash_db)
    assert len(placed_before) == (1 if killed == "placed" else 0)
    if killed == "stored":
        assert [m["role"] for m in messages(crash_db)] == ["user", "assistant"]  # tool in flight

    recovering = spawn("recover")
    result = json.loads(recovering.wait_for("RESULT "))
    recovering.finish()

    assert result == {"type": "Completed", "text": child.STEERED_TEXT}
    [placed] = steer_messages(crash_db)
    assert (placed["text"], placed["user"], placed["steer"]) == (child.STEER, "U2", child.STEER_ID)
    roles = [m["role"] for m in messages(crash_db)]
    assert roles == ["user", "assistant", "tool", "user", "assistant"]
    # asked once before the call, and with the steer once per process that got that far
    steered_asks = 2 if killed == "placed" else 1
    assert model_asks(tmp_path / "models.log") == ["steered=no"] + ["steered=yes"] * steered_asks
