"""The SQLite session store (through aiosqlite): the embedded default.

Every transaction is one function run on aiosqlite's connection thread, so the
statements of two sessions can never interleave inside a transaction, and a
local tool can run inside the step's transaction on that same thread. This file
is the only one that imports aiosqlite.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import aiosqlite

from agent._json import dumps, loads
from agent.errors import StoreError
from agent.messages import MESSAGE_ADAPTER, MESSAGES_ADAPTER, JsonValue
from agent.ports import Commit, SessionKey, StoredSession
from agent.turns import TURN_RECORD_ADAPTER, TurnRecord

__all__ = ["SQLiteStore"]

T = TypeVar("T")
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

# Each entry moves the schema from version i to i + 1. Append, never edit.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        status TEXT NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (agent, session_id)
    ) WITHOUT ROWID;
    CREATE TABLE turns (
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        status TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (agent, session_id, turn_id)
    ) WITHOUT ROWID;
    CREATE INDEX turns_unfinished ON turns (status) WHERE status IN ('queued', 'running');
    CREATE TABLE messages (
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        role TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (agent, session_id, idx)
    ) WITHOUT ROWID;
    CREATE TABLE steps (
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        result TEXT NOT NULL,
        PRIMARY KEY (agent, session_id, turn_id, step_id)
    ) WITHOUT ROWID;
    """,
)

_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE")


class _TransactionHandle:
    """The connection as a local tool sees it: statements only, inside our transaction."""

    __slots__ = ("_conn", "is_open")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.is_open = True

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if not self.is_open:
            raise StoreError("this store handle belonged to a step that has ended")
        if sql.lstrip().upper().startswith(_TRANSACTION_CONTROL):
            raise StoreError("a tool cannot control the step's transaction")
        return self._conn.execute(sql, parameters).fetchall()


class SQLiteStore:
    """Sessions in one SQLite file, in WAL mode.

    Open it with `SQLiteStore.open` and close it with `close` (or ``async with``).
    """

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self._db = db
        self.path = path

    @classmethod
    async def open(cls, path: str | Path, *, synchronous: Synchronous = "FULL") -> SQLiteStore:
        """Open (creating and migrating as needed) the database at ``path``.

        Args:
            path: The database file; its folder is created if missing.
            synchronous: SQLite's durability level; ``FULL`` survives power loss.
        """
        path = str(path)
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            db = await aiosqlite.connect(path, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite database {path}: {exc}") from exc
        store = cls(db, path)
        try:
            await store._run(_configure, synchronous)
        except BaseException:
            await db.close()
            raise
        return store

    async def close(self) -> None:
        """Close the connection; queued transactions finish first."""
        await self._db.close()

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def thread_ident(self) -> int | None:
        """The id of the thread that runs every statement (for tests and diagnostics)."""
        return self._db._thread.ident

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # aiosqlite's own queue: one function at a time on the connection thread.
        try:
            result: T = await self._db._execute(fn, self._db._conn, *args)  # type: ignore[no-untyped-call]
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite: {exc}") from exc
        return result

    async def load(self, key: SessionKey) -> StoredSession:
        return await self._run(_load, key)

    async def load_steps(self, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
        return await self._run(_load_steps, key, turn_id)

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        rows = _rows(key, commit)
        await self._run(_write, rows)

    async def commit_with(
        self,
        key: SessionKey,
        work: Callable[[Any], T],
        record: Callable[[T | Exception], Commit],
    ) -> Commit:
        return await self._run(_work_and_write, key, work, record)

    async def unfinished_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return await self._run(_unfinished)

    async def dump_table(self, table: str) -> list[tuple[Any, ...]]:
        """Every row of one of our tables, for tests and diagnostics."""
        if table not in {"sessions", "turns", "messages", "steps"}:
            raise StoreError(f"no table {table!r}")
        return await self._run(lambda conn: conn.execute(f"SELECT * FROM {table}").fetchall())


def _configure(conn: sqlite3.Connection, synchronous: Synchronous) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    version = row[0] if row else 0
    if version > len(MIGRATIONS):
        raise StoreError(
            f"database schema version {version} is newer than this code knows "
            f"({len(MIGRATIONS)}); run a newer release"
        )
    for target, script in enumerate(MIGRATIONS[version:], start=version + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in filter(str.strip, script.split(";")):
                conn.execute(statement)
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (target,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


_Rows = tuple[
    list[tuple[Any, ...]], list[tuple[Any, ...]], tuple[Any, ...] | None, tuple[Any, ...] | None
]


def _rows(key: SessionKey, commit: Commit) -> _Rows:
    agent, sid = key.agent, key.session_id
    messages = [
        (
            agent,
            sid,
            m.index,
            m.message.turn_id,
            m.message.role,
            MESSAGE_ADAPTER.dump_json(m.message).decode(),
        )
        for m in commit.messages
    ]
    steps = [(agent, sid, s.turn_id, s.step_id, dumps(s.result)) for s in commit.steps]
    turn = None
    if commit.turn is not None:
        t = commit.turn
        turn = (agent, sid, t.turn_id, t.seq, t.status, TURN_RECORD_ADAPTER.dump_json(t).decode())
    status = (agent, sid, commit.status) if commit.status is not None else None
    return messages, steps, turn, status


def _apply(conn: sqlite3.Connection, rows: _Rows) -> None:
    messages, steps, turn, status = rows
    if messages:
        conn.executemany(
            "INSERT INTO messages (agent, session_id, idx, turn_id, role, body)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            messages,
        )
    if steps:
        conn.executemany(
            "INSERT INTO steps (agent, session_id, turn_id, step_id, result)"
            " VALUES (?, ?, ?, ?, ?)",
            steps,
        )
    if turn is not None:
        conn.execute(
            "INSERT INTO turns (agent, session_id, turn_id, seq, status, record)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (agent, session_id, turn_id)"
            " DO UPDATE SET status = excluded.status, record = excluded.record",
            turn,
        )
    if status is not None:
        conn.execute(
            "INSERT INTO sessions (agent, session_id, status) VALUES (?, ?, ?)"
            " ON CONFLICT (agent, session_id) DO UPDATE SET status = excluded.status",
            status,
        )


def _write(conn: sqlite3.Connection, rows: _Rows) -> None:
    conn.execute("BEGIN")
    try:
        _apply(conn, rows)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _work_and_write(
    conn: sqlite3.Connection,
    key: SessionKey,
    work: Callable[[Any], T],
    record: Callable[[T | Exception], Commit],
) -> Commit:
    handle = _TransactionHandle(conn)
    conn.execute("BEGIN")
    try:
        conn.execute("SAVEPOINT tool_call")
        outcome: T | Exception
        try:
            outcome = work(handle)
        except Exception as exc:
            # the tool's own writes go; the step still commits, with the error as its result
            conn.execute("ROLLBACK TO tool_call")
            outcome = exc
        finally:
            handle.is_open = False
        conn.execute("RELEASE tool_call")
        commit = record(outcome)
        _apply(conn, _rows(key, commit))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return commit


def _load(conn: sqlite3.Connection, key: SessionKey) -> StoredSession:
    args = (key.agent, key.session_id)
    row = conn.execute(
        "SELECT status FROM sessions WHERE agent = ? AND session_id = ?", args
    ).fetchone()
    bodies = conn.execute(
        "SELECT body FROM messages WHERE agent = ? AND session_id = ? ORDER BY idx", args
    ).fetchall()
    records = conn.execute(
        "SELECT record FROM turns WHERE agent = ? AND session_id = ? ORDER BY seq", args
    ).fetchall()
    transcript = MESSAGES_ADAPTER.validate_json("[" + ",".join(b for (b,) in bodies) + "]")
    turns = {}
    for (body,) in records:
        record = TURN_RECORD_ADAPTER.validate_json(body)
        turns[record.turn_id] = record
    return StoredSession(status=row[0] if row else "new", transcript=transcript, turns=turns)


def _load_steps(conn: sqlite3.Connection, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
    rows = conn.execute(
        "SELECT step_id, result FROM steps WHERE agent = ? AND session_id = ? AND turn_id = ?",
        (key.agent, key.session_id, turn_id),
    ).fetchall()
    return {step_id: loads(result) for step_id, result in rows}


def _unfinished(conn: sqlite3.Connection) -> list[tuple[SessionKey, TurnRecord]]:
    rows = conn.execute(
        "SELECT agent, session_id, record FROM turns WHERE status IN ('queued', 'running')"
        " ORDER BY agent, session_id, seq"
    ).fetchall()
    return [
        (SessionKey(agent, sid), TURN_RECORD_ADAPTER.validate_json(body))
        for agent, sid, body in rows
    ]
