"""What the SQLite store relies on in aiosqlite, which it reaches past the public API for.

`agent.stores.sqlite._connection.Connection` is the one place that uses
aiosqlite's private ``_execute``, ``_conn``, ``_connection`` and ``_thread``.
These tests pin each of them on the installed aiosqlite, so an upgrade that
moves one fails here first, with its name, rather than somewhere in a turn.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from importlib.metadata import version
from pathlib import Path

import aiosqlite
import pytest

from agent import SQLiteStore, StoreError
from agent.stores.sqlite._connection import Connection


@pytest.fixture
async def connection(tmp_path: Path):
    opened = await Connection.open(str(tmp_path / "c.db"))
    yield opened
    await opened.close()


def test_the_installed_aiosqlite_is_the_pinned_one():
    # pyproject.toml pins aiosqlite>=0.22,<0.23: these private names are 0.22's
    assert version("aiosqlite").startswith("0.22.")


async def test_aiosqlite_has_the_private_names_we_use(tmp_path: Path):
    db = await aiosqlite.connect(str(tmp_path / "raw.db"), isolation_level=None)
    try:
        assert callable(db._execute)
        assert isinstance(db._conn, sqlite3.Connection)
        assert db._connection is db._conn
        assert isinstance(db._thread, threading.Thread)
        assert db._thread.is_alive()
    finally:
        await db.close()
    assert db._connection is None
    with pytest.raises(ValueError, match="no active connection"):
        db._conn  # noqa: B018


async def test_every_call_runs_on_the_one_thread_whose_ident_is_reported(connection):
    def where(conn: sqlite3.Connection) -> tuple[int, bool]:
        return threading.get_ident(), isinstance(conn, sqlite3.Connection)

    seen = await asyncio.gather(*(connection.run(where) for _ in range(5)))

    assert {ident for ident, _ in seen} == {connection.thread_ident}
    assert connection.thread_ident != threading.get_ident()
    assert all(is_connection for _, is_connection in seen)


async def test_calls_run_one_at_a_time_in_the_order_they_were_queued(connection):
    order: list[int] = []

    def note(conn: sqlite3.Connection, n: int) -> int:
        order.append(n)
        return n

    results = await asyncio.gather(*(connection.run(note, n) for n in range(20)))

    assert results == order == list(range(20))


async def test_the_store_reports_the_thread_its_statements_run_on(tmp_path: Path):
    store = await SQLiteStore.open(tmp_path / "s.db")
    try:
        ident = await store._run(lambda conn: threading.get_ident())
        assert ident == store.thread_ident
    finally:
        await store.close()


async def test_sqlite_errors_become_store_errors_and_a_value_error_of_ours_stays(connection):
    with pytest.raises(StoreError, match=r"^SQLite: no such table: nowhere"):
        await connection.run(lambda conn: conn.execute("SELECT * FROM nowhere"))

    def wrong(conn: sqlite3.Connection) -> None:
        raise ValueError("the work's own")

    with pytest.raises(ValueError, match="the work's own"):
        await connection.run(wrong)
    assert not connection.is_closed


async def test_a_closed_connection_is_detected(tmp_path: Path):
    closing = await Connection.open(str(tmp_path / "c.db"))
    assert not closing.is_closed
    await closing.close()

    assert closing.is_closed
    with pytest.raises(StoreError, match=r"the store at .*c\.db is closed"):
        await closing.run(lambda conn: None)
