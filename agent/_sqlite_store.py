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
from agent.errors import StoreConflictError, StoreError
from agent.messages import MESSAGE_ADAPTER, MESSAGES_ADAPTER, JsonValue
from agent.ports import Commit, SessionKey, StoredSession
from agent.turns import TURN_RECORD_ADAPTER, TurnRecord

__all__ = ["SQLiteStore"]

T = TypeVar("T")
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

# Each entry moves the schema from version i to i + 1. Append, never edit.
MIGRATIONS: tuple[str, ...] = (
    # Sessions are numbered so that every other row and index entry carries a small
    # integer instead of the (agent, session id) text. A message's rowid is its
    # address, session number in the high 32 bits and transcript index in the low
    # ones: one B-tree per insert and no second index, and a ~1 KB message fits in
    # its leaf page, where a WITHOUT ROWID row that size would spill to an
    # overflow page on every insert. ``session`` and ``idx`` read it back.
    """
    CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        status TEXT NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0,
        UNIQUE (agent, session_id)
    );
    CREATE TABLE turns (
        session INTEGER NOT NULL REFERENCES sessions (id),
        turn_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        status TEXT NOT NULL,
        record TEXT NOT NULL,
        UNIQUE (session, turn_id)
    );
    CREATE INDEX turns_unfinished ON turns (status) WHERE status IN ('queued', 'running');
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        turn_id TEXT NOT NULL,
        role TEXT NOT NULL,
        body TEXT NOT NULL,
        session INTEGER GENERATED ALWAYS AS (id >> 32) VIRTUAL,
        idx INTEGER GENERATED ALWAYS AS (id & 4294967295) VIRTUAL
    );
    CREATE TABLE steps (
        session INTEGER NOT NULL REFERENCES sessions (id),
        turn_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        result TEXT NOT NULL,
        PRIMARY KEY (session, turn_id, step_id)
    ) WITHOUT ROWID;
    """,
    # parked turns are found at start-up, to expire the requests nobody answered
    """
    CREATE INDEX turns_suspended ON turns (status) WHERE status = 'suspended';
    """,
)

_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE")


_TRANSACTION_ACTIONS = frozenset({sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT})


class _TransactionHandle:
    """The connection as a local tool sees it: statements only, inside our transaction.

    Two locks keep the tool from ending the step's transaction: a check of the
    statement's first word, and an SQLite authorizer that denies transaction
    statements while a tool runs (it also sees ``/* */ COMMIT`` and the like).
    The first is needed too: a statement the engine already prepared (its own
    ``COMMIT``) comes from the cache without asking the authorizer again.
    """

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

    def authorize(self, action: int, *_: object) -> int:
        if self.is_open and action in _TRANSACTION_ACTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK


class SQLiteStore:
    """Sessions in one SQLite file, in WAL mode.

    Open it with `SQLiteStore.open` and close it with `close` (or ``async with``).
    """

    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self._db = db
        self._ids = _SessionIds()
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
        return await self._run(_load, self._ids, key)

    async def load_steps(self, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
        return await self._run(_load_steps, self._ids, key, turn_id)

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        await self._run(_write, self._ids, key, _rows(commit))

    async def commit_with(
        self,
        key: SessionKey,
        work: Callable[[Any], T],
        record: Callable[[T | Exception], Commit],
    ) -> Commit:
        return await self._run(_work_and_write, self._ids, key, work, record)

    async def unfinished_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return await self._run(_turns_in, "('queued', 'running')")

    async def suspended_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return await self._run(_turns_in, "('suspended')")

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
    list[tuple[Any, ...]], list[tuple[Any, ...]], tuple[Any, ...] | None, str | None, str | None
]


def _rows(commit: Commit) -> _Rows:
    """Serialise a commit's rows (off the connection thread; the session id comes later)."""
    messages = [
        (
            m.index,
            m.message.turn_id,
            m.message.role,
            MESSAGE_ADAPTER.dump_json(m.message).decode(),
        )
        for m in commit.messages
    ]
    steps = [(s.turn_id, s.step_id, dumps(s.result)) for s in commit.steps]
    turn = None
    if commit.turn is not None:
        t = commit.turn
        turn = (t.turn_id, t.seq, t.status, TURN_RECORD_ADAPTER.dump_json(t).decode())
    return messages, steps, turn, commit.status, commit.expect_status


class _SessionIds:
    """Numbers sessions; touched only on the connection thread, so it needs no lock."""

    def __init__(self) -> None:
        self._ids: dict[SessionKey, int] = {}

    def find(self, conn: sqlite3.Connection, key: SessionKey) -> int | None:
        found = self._ids.get(key)
        if found is None:
            row = conn.execute(
                "SELECT id FROM sessions WHERE agent = ? AND session_id = ?",
                (key.agent, key.session_id),
            ).fetchone()
            if row is not None:
                found = self._ids[key] = row[0]
        return found

    def ensure(self, conn: sqlite3.Connection, key: SessionKey) -> int:
        found = self.find(conn, key)
        if found is None:
            cursor = conn.execute(
                "INSERT INTO sessions (agent, session_id, status) VALUES (?, ?, 'new')",
                (key.agent, key.session_id),
            )
            assert cursor.lastrowid is not None
            found = self._ids[key] = cursor.lastrowid
        return found

    def forget(self) -> None:
        # a rolled-back transaction may have taken back an id we just handed out
        self._ids.clear()


def _apply(conn: sqlite3.Connection, sid: int, rows: _Rows) -> None:
    messages, steps, turn, status, expect = rows
    if expect is not None:
        assert turn is not None
        found = conn.execute(
            "SELECT status FROM turns WHERE session = ? AND turn_id = ?", (sid, turn[0])
        ).fetchone()
        if found is None or found[0] != expect:
            raise StoreConflictError(f"turn {turn[0]} is no longer {expect}")
    if messages:
        conn.executemany(
            "INSERT INTO messages (id, turn_id, role, body) VALUES (?, ?, ?, ?)",
            [(sid << 32 | index, *rest) for index, *rest in messages],
        )
    if steps:
        conn.executemany(
            "INSERT INTO steps (session, turn_id, step_id, result) VALUES (?, ?, ?, ?)",
            [(sid, *st) for st in steps],
        )
    if turn is not None:
        conn.execute(
            "INSERT INTO turns (session, turn_id, seq, status, record) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (session, turn_id)"
            " DO UPDATE SET status = excluded.status, record = excluded.record",
            (sid, *turn),
        )
    if status is not None:
        conn.execute("UPDATE sessions SET status = ? WHERE id = ?", (status, sid))


def _write(conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, rows: _Rows) -> None:
    # IMMEDIATE takes the write lock first: a transaction that read (an expected
    # status) could not take it later if another process wrote in between
    conn.execute("BEGIN IMMEDIATE")
    try:
        _apply(conn, ids.ensure(conn, key), rows)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # SQLite may have rolled back already (disk full, I/O)
            conn.execute("ROLLBACK")
        ids.forget()
        raise


def _work_and_write(
    conn: sqlite3.Connection,
    ids: _SessionIds,
    key: SessionKey,
    work: Callable[[Any], T],
    record: Callable[[T | Exception], Commit],
) -> Commit:
    handle = _TransactionHandle(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("SAVEPOINT tool_call")
        outcome: T | Exception
        failed = False
        conn.set_authorizer(handle.authorize)
        try:
            outcome = work(handle)
        except Exception as exc:
            outcome, failed = exc, True
        finally:
            handle.is_open = False
            conn.set_authorizer(None)
        if failed:
            # the tool's own writes go; the step still commits, with the error as its result
            conn.execute("ROLLBACK TO tool_call")
        conn.execute("RELEASE tool_call")
        commit = record(outcome)
        _apply(conn, ids.ensure(conn, key), _rows(commit))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        ids.forget()
        raise
    return commit


def _load(conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey) -> StoredSession:
    sid = ids.find(conn, key)
    if sid is None:
        return StoredSession()
    [status] = conn.execute("SELECT status FROM sessions WHERE id = ?", (sid,)).fetchone()
    bodies = conn.execute(
        "SELECT body FROM messages WHERE id BETWEEN ? AND ? ORDER BY id",
        (sid << 32, sid << 32 | 0xFFFFFFFF),
    ).fetchall()
    records = conn.execute(
        "SELECT record FROM turns WHERE session = ? ORDER BY seq", (sid,)
    ).fetchall()
    transcript = MESSAGES_ADAPTER.validate_json("[" + ",".join(b for (b,) in bodies) + "]")
    turns = {}
    for (body,) in records:
        record = TURN_RECORD_ADAPTER.validate_json(body)
        turns[record.turn_id] = record
    return StoredSession(status=status, transcript=transcript, turns=turns)


def _load_steps(
    conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, turn_id: str
) -> dict[str, JsonValue]:
    sid = ids.find(conn, key)
    rows = conn.execute(
        "SELECT step_id, result FROM steps WHERE session = ? AND turn_id = ?", (sid, turn_id)
    ).fetchall()
    return {step_id: loads(result) for step_id, result in rows}


def _turns_in(conn: sqlite3.Connection, statuses: str) -> list[tuple[SessionKey, TurnRecord]]:
    # ``statuses`` is one of two literals above, spelled as the partial indexes are
    rows = conn.execute(
        "SELECT s.agent, s.session_id, t.record FROM turns AS t JOIN sessions AS s"
        f" ON s.id = t.session WHERE t.status IN {statuses}"
        " ORDER BY s.agent, s.session_id, t.seq"
    ).fetchall()
    return [
        (SessionKey(agent, sid), TURN_RECORD_ADAPTER.validate_json(body))
        for agent, sid, body in rows
    ]
