"""A child process of a crash test, and what it has printed so far, read with a deadline.

The crash tests run a turn in a child script (``*_child.py``), SIGKILL it at
some point and start another on the same files. `start_children` starts them
with the repo root on ``PYTHONPATH``, each one's stderr in a file of its own,
and SIGKILLs and reaps any still alive when it exits; `ChildProcess` reads a
child's stdout line by line, never waiting past `DEADLINE_SECONDS`.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 30.0
"""The longest any one wait may take; a test that works takes a second or two in all."""


@dataclass
class ChildProcess:
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


C = TypeVar("C", bound=ChildProcess)


@contextmanager
def start_children(
    kind: type[C], script: Path, cwd: Path
) -> Iterator[Callable[[str, Sequence[str | Path]], C]]:
    """Yield ``start(phase, args)``, which runs ``script`` with ``args`` in ``cwd``.

    Each child's stderr goes to ``cwd/<phase>-<n>.err``. On exit, any child
    still alive (one that a failed test never reached) is SIGKILLed and reaped.
    """
    started: list[C] = []
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def start(phase: str, args: Sequence[str | Path]) -> C:
        stderr = cwd / f"{phase}-{len(started)}.err"
        with stderr.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(script), *map(str, args)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                cwd=cwd,
            )
        started.append(kind(phase=phase, proc=proc, stderr=stderr))
        return started[-1]

    try:
        yield start
    finally:
        for leftover in started:
            if leftover.proc.poll() is None:
                leftover.proc.kill()
            leftover.proc.wait(timeout=DEADLINE_SECONDS)
            assert leftover.proc.stdout is not None
            leftover.proc.stdout.close()
