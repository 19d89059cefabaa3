"""What the crash tests' child scripts log: lines that outlive a SIGKILL."""

from __future__ import annotations

import os


def append_line(path: str, line: str) -> None:
    """Append ``line`` to ``path``, fsynced, so it outlives a SIGKILL right after it."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
