"""The connection thread, aiosqlite's, and the one class that touches aiosqlite's insides.

All the store needs of aiosqlite is its thread: one per connection, running the
calls queued to it one at a time, in order. A transaction is then one function
run there, so two sessions' statements never interleave inside it, and a local
tool can run inside a step's transaction on that same thread.

aiosqlite has no public way to run a function of ours on that thread, so
`Connection` uses four of its private names, here and nowhere else. They are
those of aiosqlite 0.22 (``pyproject.toml`` pins ``>=0.22,<0.23``; in 0.20 and
0.21 ``Connection`` was itself the thread and had no ``_thread``), and
``tests/agent/stores/test_sqlite_connection.py`` pins what each one does:

* ``_execute(fn, *args)`` queues ``fn(*args)`` on the thread and awaits its result;
* ``_conn`` is the `sqlite3.Connection`, and raises `ValueError` once closed;
* ``_connection`` is the same, or None once closed;
* ``_thread`` is the `threading.Thread` every call runs on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Self, TypeVar

import aiosqlite

from agent.errors import StoreError

__all__ = ["Connection"]

T = TypeVar("T")


class Connection:
    """One SQLite connection and the thread that runs every statement on it."""

    __slots__ = ("_db", "path")

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self._db = db
        self.path = path

    @classmethod
    async def open(cls, path: str) -> Self:
        """Connect to the database at ``path``, in autocommit: we write BEGIN ourselves.

        Raises:
            StoreError: SQLite cannot open the file.
        """
        try:
            db = await aiosqlite.connect(path, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite database {path}: {exc}") from exc
        return cls(db, path)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` on the connection thread, after every call queued before it.

        Raises:
            StoreError: SQLite raised (the message starts ``SQLite:``), or the
                connection is closed.
        """
        try:
            result: T = await self._db._execute(fn, self._db._conn, *args)  # type: ignore[no-untyped-call]
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite: {exc}") from exc
        except ValueError as exc:
            # aiosqlite says "closed" with a ValueError; one from ``fn`` itself passes
            if self.is_closed:
                raise StoreError(f"the store at {self.path} is closed") from exc
            raise
        return result

    @property
    def is_closed(self) -> bool:
        """Whether `close` ran (aiosqlite drops its sqlite3 connection then)."""
        return self._db._connection is None

    @property
    def thread_ident(self) -> int | None:
        """The id of the thread that runs every statement (None before it started)."""
        return self._db._thread.ident

    async def close(self) -> None:
        """Close the connection once the calls queued before have run."""
        await self._db.close()
