"""A cancel request outlives the process that stored it: SIGKILL, then a new process obeys it.

The turn (run by ``cancel_crash_child.py`` on a SQLite file) is one model reply
asking for a batch of two async tools, ``first`` then ``second``, and a final
reply once both have results. The main test goes:

1. start a child that runs the turn until ``first`` is entered and blocks, then
   calls ``session.cancel`` itself and prints ``CANCEL_STORED`` once it returned;
2. SIGKILL it there (the tool still running, so the turn never reached a
   boundary to stop at) and read the file read-only: the turn is still
   ``running``, its ``cancel`` column says ``requested``, no tool result exists;
3. start a fresh child on the same file: its runtime's start-up recovers the
   turn, which must end ``cancelled`` at its first boundary, closing both calls
   with ``{"cancelled": true}``, without asking the model or entering a tool.

Without the stored request the next start would replay the turn to
completion: a second model call, ``first`` entered from two pids, ``second``
run, which is what the assertions on the logs rule out.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.agent import cancel_crash_child as child
from tests.agent.helpers import read_only

CHILD = Path(__file__).with_name("cancel_crash_child.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 30.0
"""The longest any one wait may take; a test that works takes a second or two in all."""
CALLS = [("first", child.FIRST_CALL), ("second", child.SECOND_CALL)]
BATCH_STEPS = {f"tool:1:{call_id}" for _, call_id in CALLS}
CANCELLED_CALL = {"cancelled": True}


@dataclass
class Child:
    """One child process and what it has printed so far."""

    phase: str
    proc: subprocess.Popen[bytes]
    stderr: Path
    lines: list[str] = field(default_factory=list)
    buffer: bytes = b""
    is_at_eof: bool = False

    def explain(self) -> str:
        return f"{self.phase} child printed {self.lines}\nstderr:\n{self.stderr.read_text()}"

    def _read(self, until: str | None) -> None:
        """Take in stdout until a line starts with ``until`` or, if None, EOF."""
        assert self.proc.stdout is not None
        if until is not None and self.printed(until):
            return
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + DEADLINE_SECONDS
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while not self.is_at_eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"timed out after {DEADLINE_SECONDS}s\n{self.explain()}")
                if not selector.select(timeout=left):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.is_at_eof = True
                    if self.buffer:
                        self.lines.append(self.buffer.decode())
                    break
                self.buffer += chunk
                *complete, self.buffer = self.buffer.split(b"\n")
                self.lines.extend(raw.decode() for raw in complete)
                if until is not None and self.printed(until):
                    return
        if until is not None:
            pytest.fail(
                f"the {self.phase} child ended without printing {until!r}\n{self.explain()}"
            )

    def wait_for(self, prefix: str) -> str:
        """The first line starting with ``prefix``, without it; waits for it if need be."""
        self._read(until=prefix)
        return self.printed(prefix)[0]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=DEADLINE_SECONDS) == -signal.SIGKILL, self.explain()
        self._read(until=None)

    def finish(self) -> None:
        """Read to the end and check the child exited cleanly."""
        self._read(until=None)
        code = self.proc.wait(timeout=DEADLINE_SECONDS)
        assert code == 0, f"exit code {code}\n{self.explain()}"

    def printed(self, prefix: str) -> list[str]:
        return [line.removeprefix(prefix) for line in self.lines if line.startswith(prefix)]

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
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start children on ``tmp_path``; any still alive at teardown is SIGKILLed and reaped."""
    started: list[Child] = []
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def start(phase: str) -> Child:
        argv = [
            sys.executable,
            str(CHILD),
            str(tmp_path / "sessions.db"),
            str(tmp_path / "calls.log"),
            phase,
        ]
        stderr = tmp_path / f"{phase}-{len(started)}.err"
        with stderr.open("wb") as err:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                cwd=tmp_path,
            )
        started.append(Child(phase=phase, proc=proc, stderr=stderr))
        return started[-1]

    try:
        yield start
    finally:
        for leftover in started:
            if leftover.proc.poll() is None:
                leftover.proc.kill()  # a lingering child that a failed test never reached
            leftover.proc.wait(timeout=DEADLINE_SECONDS)
            assert leftover.proc.stdout is not None
            leftover.proc.stdout.close()


@dataclass(frozen=True)
class Turn:
    status: str
    cancel: str | None
    record: dict[str, Any]


@dataclass(frozen=True)
class Stored:
    """What the SQLite file holds for the test's one session."""

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


def _stored(db: Path) -> Stored:
    [(session_status,)] = read_only(db, "select status from sessions")
    turns = {
        str(turn_id): Turn(status=str(status), cancel=cancel, record=json.loads(record))
        for turn_id, status, cancel, record in read_only(
            db, "select turn_id, status, cancel, record from turns order by seq"
        )
    }
    steps: dict[str, dict[str, Any]] = {}
    for turn_id, step, result in read_only(db, "select turn_id, step_id, result from steps"):
        assert turn_id == child.TURN_ID  # the queued turn of the second test never steps
        steps[str(step)] = json.loads(result)
    rows = read_only(db, "select idx, body from messages order by idx")
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


def _cancel_while_first_runs_then_kill(spawn: Spawn, db: Path, phase: str) -> Child:
    """Run the turn into ``first``, have the child cancel it, SIGKILL it; check the file."""
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
    assert killed.steps == {"model:1": {"message": 1}}
    assert killed.roles() == ["user", "assistant"]
    assert killed.tool_messages == []
    [_, batch] = killed.messages
    assert [(c["name"], c["id"]) for c in batch["content"] if c["kind"] == "tool_call"] == CALLS
    # this process asked the model once and entered ``first`` only
    assert _model_asks(db.parent) == [(canceller.proc.pid, child.TURN_ID, "model:1")]
    assert _tool_entries(db.parent) == [("first", canceller.proc.pid)]
    return canceller


def test_a_cancel_stored_before_a_sigkill_ends_the_turn_cancelled_at_the_next_start(
    spawn, tmp_path
):
    db = tmp_path / "sessions.db"
    canceller = _cancel_while_first_runs_then_kill(spawn, db, "cancel-running")
    # the request is on disk, in its own column: all the next process has to go on
    assert _stored(db).turns[child.TURN_ID].cancel == "requested"

    recoverer = spawn("recover")
    assert recoverer.results() == {
        child.TURN_ID: {"type": "Cancelled", "reason": "requested"},
    }
    # stopped at its first boundary: no tool started, no model streamed, here
    assert recoverer.events()[-1] == "turn.cancelled"
    assert [e for e in recoverer.events() if e.startswith(("action.", "message."))] == []

    final = _stored(db)
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
        "model:1": {"message": 1},
        f"tool:1:{child.FIRST_CALL}": {"message": 2, "is_error": True},
        f"tool:1:{child.SECOND_CALL}": {"message": 3, "is_error": True},
    }

    # across both processes: one model ask, one entry into ``first``, none into ``second``
    assert _model_asks(tmp_path) == [(canceller.proc.pid, child.TURN_ID, "model:1")]
    assert _tool_entries(tmp_path) == [("first", canceller.proc.pid)]


def test_a_queued_turn_cancelled_before_a_sigkill_is_not_run_by_the_next_start(spawn, tmp_path):
    db = tmp_path / "sessions.db"
    canceller = spawn("cancel-queued")
    canceller.wait_for("IN_FIRST")
    assert json.loads(canceller.wait_for("CANCEL_STORED ")) is True
    canceller.kill()

    killed = _stored(db)
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
    final = _stored(db)
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
