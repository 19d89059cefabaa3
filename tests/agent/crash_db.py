"""The database a crash test's children share, on each store that outlives a process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psycopg

from agent import SQLiteStore
from agent.stores.postgres import PostgresStore
from tests.agent.child_store import open_child_store
from tests.agent.helpers import read_only

__all__ = ["CrashDatabase"]


@dataclass(frozen=True)
class CrashDatabase:
    """Where the children keep their sessions, and how the test reads what they left."""

    kind: Literal["sqlite", "postgres"]
    where: str
    """What a child is given: a SQLite file's path, or a ``postgresql://`` URL."""

    @property
    def url(self) -> str:
        """The same database as a ``DATABASE_URL``, for ``python -m bot``."""
        return f"sqlite:///{self.where}" if self.kind == "sqlite" else self.where

    async def open(self) -> SQLiteStore | PostgresStore:
        """The store on it, opened in the test's own process, as a child opens it."""
        return await open_child_store(self.where)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of a query, read without disturbing what a killed child left."""
        if self.kind == "sqlite":
            return read_only(Path(self.where), sql)
        with psycopg.connect(self.where) as conn:
            return conn.execute(sql).fetchall()
