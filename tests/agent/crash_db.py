"""The database a crash test's children share, on each store that outlives a process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psycopg

from tests.agent.helpers import read_only

__all__ = ["CrashDatabase"]


@dataclass(frozen=True)
class CrashDatabase:
    """Where the children keep their sessions, and how the test reads what they left."""

    kind: Literal["sqlite", "postgres"]
    where: str
    """What a child is given: a SQLite file's path, or a ``postgresql://`` URL."""

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of a query, read without disturbing what a killed child left."""
        if self.kind == "sqlite":
            return read_only(Path(self.where), sql)
        with psycopg.connect(self.where) as conn:
            return conn.execute(sql).fetchall()
