"""A parked turn outlives the process that parked it: SIGKILL, then a new process finishes it.

The turn (run by ``hitl_crash_child.py`` on a SQLite file) is: a model reply
that calls the async tool ``post_announcement``; the tool asks ``U1`` to
approve with ``ctx.request_input`` and posts only on ``True``; a final reply.
Each test goes:

1. start a child in ``park`` phase and wait for its ``PARKED`` line: the turn
   parked and the child froze (event loop included);
2. SIGKILL it and read the SQLite file read-only: the park is all on disk
   (turn and session ``suspended``, the request in the turn's record, no
   answer stored);
3. finish the turn from a *new* process on the same file: answered by ``U1``
   (after a ``U2`` who is refused, in a process of its own), or, for a
   request with a time to live, expired by a fresh runtime's start-up;
4. check the transcript and steps, and the two logs the tool keeps: it was
   entered twice (once to park, once with the answer, in two processes), and
   the side effect after ``request_input`` ran once, or never when expired.
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

from tests.agent import hitl_crash_child as child
from tests.agent.helpers import read_only

CHILD = Path(__file__).with_name("hitl_crash_child.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 30.0
"""The longest any one wait may take; a test that works takes a second or two in all."""
TTL_SECONDS = 0.5
ANSWER_STEP = f"input:{child.TURN_ID}:{child.INPUT_ID}"
TOOL_STEP = f"tool:1:{child.CALL_ID}"


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

    def _read(self, until: str | None) -> str | None:
        """Take in stdout until a line starts with ``until`` (returned) or, if None, EOF."""
        assert self.proc.stdout is not None
        found = [line for line in self.lines if until is not None and line.startswith(until)]
        if found:
            return found[0]
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
                for raw in complete:
                    self.lines.append(raw.decode())
                if until is not None:
                    found = [line for line in self.lines if line.startswith(until)]
                    if found:
                        return found[0]
        if until is not None:
            pytest.fail(
                f"the {self.phase} child ended without printing {until!r}\n{self.explain()}"
            )
        return None

    def wait_for(self, prefix: str) -> str:
        """The first line starting with ``prefix``, without it; waits for it if need be."""
        line = self._read(until=prefix)
        assert line is not None
        return line.removeprefix(prefix)

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

    def result(self) -> dict[str, Any]:
        self.finish()
        [line] = self.printed("RESULT ")
        parsed: dict[str, Any] = json.loads(line)
        return parsed


Spawn = Callable[..., Child]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start children on ``tmp_path``; any still alive at teardown is SIGKILLed and reaped."""
    started: list[Child] = []
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def start(phase: str, *, ttl: float | None = None) -> Child:
        argv = [
            sys.executable,
            str(CHILD),
            str(tmp_path / "sessions.db"),
            str(tmp_path / "entries.log"),
            str(tmp_path / "effects.log"),
            phase,
            "none" if ttl is None else str(ttl),
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
                leftover.proc.kill()  # a frozen park child that a failed test never reached
            leftover.proc.wait(timeout=DEADLINE_SECONDS)
            assert leftover.proc.stdout is not None
            leftover.proc.stdout.close()


@dataclass(frozen=True)
class Stored:
    """What the SQLite file holds for the test's one session and turn."""

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


def _stored(db: Path) -> Stored:
    [(session_status,)] = read_only(db, "select status from sessions")
    [(turn_id, turn_status, record)] = read_only(db, "select turn_id, status, record from turns")
    assert turn_id == child.TURN_ID
    steps = {
        str(step): json.loads(result)
        for step, result in read_only(db, "select step_id, result from steps")
    }
    rows = read_only(db, "select idx, turn_id, body from messages order by idx")
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


def _park_and_kill(spawn: Spawn, db: Path, *, ttl: float | None) -> tuple[Child, dict[str, Any]]:
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
    assert parked.steps == {"model:1": {"message": 1}}
    assert not [step for step in parked.steps if step.startswith("input:")]
    assert parked.roles == ["user", "assistant"]
    # the tool was entered once, and stopped at the ask before its side effect
    assert _entry_pids(db.parent) == [parker.proc.pid]
    assert _log(db.parent / "effects.log") == []
    return parker, request


def test_parked_turn_survives_sigkill_and_completes_when_answered_from_a_new_process(
    spawn, tmp_path
):
    db = tmp_path / "sessions.db"
    parker, request = _park_and_kill(spawn, db, ttl=None)
    assert request["expires_at"] is None
    parked = _stored(db)

    # someone the request does not name is refused, from a process of its own
    intruder = spawn("wrong-user")
    intruder.finish()
    [refusal] = intruder.printed("REFUSED ")
    assert "for another person to answer" in json.loads(refusal)
    assert child.APPROVER not in json.loads(refusal)  # never says who could answer
    # and nothing was stored: every row as the killed process left it
    assert _stored(db) == parked
    assert intruder.printed("MODEL ") == []
    assert _entry_pids(tmp_path) == [parker.proc.pid]

    resumer = spawn("resume")
    assert resumer.result() == {"type": "Completed", "text": child.POSTED_TEXT}
    # the new process saw the very request the killed one parked on
    assert json.loads(resumer.wait_for("PENDING ")) == request
    # the committed model step was not asked again; only the one after the tool was
    assert resumer.printed("MODEL ") == ["model:3"]

    final = _stored(db)
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


def test_overdue_request_of_a_killed_process_expires_at_the_next_start(spawn, tmp_path):
    db = tmp_path / "sessions.db"
    before_park = time.time()
    parker, request = _park_and_kill(spawn, db, ttl=TTL_SECONDS)
    killed_at = time.time()
    # the deadline is the park's wall-clock time plus the ttl, stored with the request
    expires_at = request["expires_at"]
    assert before_park + TTL_SECONDS < expires_at < killed_at + TTL_SECONDS
    parked = _stored(db)

    # nobody runs while the deadline passes, so nobody answers: the file is as it was
    time.sleep(max(0.0, expires_at - time.time()) + 0.1)
    assert _stored(db) == parked

    # a fresh runtime finds the overdue request at start-up and answers it expired
    recoverer = spawn("recover", ttl=TTL_SECONDS)
    assert recoverer.result() == {"type": "Completed", "text": child.EXPIRED_TEXT}
    assert recoverer.printed("MODEL ") == ["model:3"]

    final = _stored(db)
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
