"""Issue 21, point 6: a turn's result outlives a SIGKILL on either side of its commits.

``output_crash_child.py`` runs a turn of an agent with a result type whose model
first answers without the result and gives it once prompted. It is SIGKILLed
while the model is asked again after the prompt, or just after the result's tool
message committed and before the turn was marked completed. A fresh process on
the same database (a SQLite file, then PostgreSQL) must finish the turn with the
result, asking the model no more than the step that was lost, and store one
prompt and one result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent import output_crash_child as child
from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase

CHILD = Path(__file__).with_name("output_crash_child.py")

Spawn = Callable[[str], ChildProcess]


@pytest.fixture
def spawn(tmp_path: Path, crash_db: CrashDatabase) -> Iterator[Spawn]:
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        yield lambda phase: start(phase, [crash_db.where, tmp_path / "models.log", phase])


def roles(db: CrashDatabase) -> list[str]:
    return [
        json.loads(body)["role"] for (body,) in db.rows("select body from messages order by idx")
    ]


def model_asks(log: Path) -> list[str]:
    return [line.split()[1] for line in log.read_text().splitlines()]


@pytest.mark.parametrize("killed", ["prompted", "resulted"])
def test_a_result_is_given_once_across_a_sigkill(spawn, crash_db, tmp_path, killed):
    first = spawn(killed)
    first.wait_for("ASKED_AGAIN" if killed == "prompted" else "RESULT_STORED")
    first.kill()
    before = roles(crash_db)

    recovering = spawn("recover")
    result: dict[str, Any] = json.loads(recovering.wait_for("RESULT "))
    recovering.finish()

    assert result == {"type": "Completed", "text": child.ANSWER, "output": child.FORECAST}
    # the answer, the prompt asking for the result, the call, its accepted result
    assert roles(crash_db) == ["user", "assistant", "trigger", "assistant", "tool"]
    if killed == "prompted":
        assert before == ["user", "assistant", "trigger"]  # the reply and its prompt, together
        # the lost ask is asked again, once; the prompt is not repeated
        assert model_asks(tmp_path / "models.log") == ["after=UserMessage", *["after=prompt"] * 2]
    else:
        assert before == ["user", "assistant", "trigger", "assistant", "tool"]
        # the result was on disk: the recovery completes the turn without asking the model
        assert model_asks(tmp_path / "models.log") == ["after=UserMessage", "after=prompt"]
