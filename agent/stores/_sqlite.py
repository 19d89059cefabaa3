"""The SQLite session store (through aiosqlite): the embedded default.

Every transaction is one function run on aiosqlite's connection thread, so the
statements of two sessions can never interleave inside a transaction, and a
local tool can run inside the step's transaction on that same thread. This file
is the only one that imports aiosqlite.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

import aiosqlite

from agent._json import JsonValue, dumps, loads
from agent.core.messages import MESSAGE_ADAPTER, MESSAGES_ADAPTER
from agent.core.records import (
    Archive,
    Commit,
    LeaseTaken,
    LogBounds,
    SessionKey,
    SessionSummary,
    StoredSession,
)
from agent.core.turns import TURN_RECORD_ADAPTER, TurnRecord
from agent.errors import StoreError
from agent.stores import _rules
from agent.stores._rules import Lease

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
    # Cancel requests live in a column of their own, which the turn's own record
    # writes never touch, so a request cannot be lost under a step that commits
    # at the same moment. A reset moves a generation into the archive tables.
    """
    ALTER TABLE turns ADD COLUMN cancel TEXT;
    ALTER TABLE sessions ADD COLUMN reset_through INTEGER;
    CREATE INDEX sessions_resetting ON sessions (id) WHERE reset_through IS NOT NULL;
    CREATE TABLE archived_messages (
        session INTEGER NOT NULL REFERENCES sessions (id),
        generation INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        role TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session, generation, idx)
    ) WITHOUT ROWID;
    CREATE TABLE archived_steps (
        session INTEGER NOT NULL REFERENCES sessions (id),
        generation INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        result TEXT NOT NULL,
        PRIMARY KEY (session, generation, turn_id, step_id)
    ) WITHOUT ROWID;
    CREATE TABLE archived_turns (
        session INTEGER NOT NULL REFERENCES sessions (id),
        generation INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        status TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (session, generation, turn_id)
    ) WITHOUT ROWID;
    """,
    # what a channel keeps about showing a turn (its reply message, a request shown)
    """
    CREATE TABLE deliveries (
        session INTEGER NOT NULL REFERENCES sessions (id),
        turn_id TEXT NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (session, turn_id)
    ) WITHOUT ROWID;
    """,
    # which process writes a session now: two processes on one file take turns
    """
    CREATE TABLE leases (
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        holder TEXT NOT NULL,
        until REAL NOT NULL,
        PRIMARY KEY (agent, session_id)
    ) WITHOUT ROWID;
    """,
    # policies people set from a surface (a Slack channel's), beside the file's
    """
    CREATE TABLE place_policies (
        source TEXT NOT NULL,
        place TEXT NOT NULL,
        policy TEXT NOT NULL,
        PRIMARY KEY (source, place)
    ) WITHOUT ROWID;
    """,
    # the durable log of a session's events, for clients that reconnect; a row's id is
    # its address as a message's is (session number high, position low), and
    # ``last_event`` keeps positions rising when pruning empties a session's log
    """
    ALTER TABLE sessions ADD COLUMN last_event INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX events_at ON events (at);
    """,
)

_LOW = (1 << 32) - 1
"""The largest transcript index or log position a packed rowid holds."""


def _address(sid: int, low: int) -> int:
    """The rowid of a message or event: the session's number high, its index or position low."""
    return sid << 32 | low


def _low_of(rowid: int) -> int:
    """The transcript index or log position a packed rowid holds."""
    return rowid & _LOW


def _span(sid: int) -> tuple[int, int]:
    """The first and last rowid session ``sid``'s messages or events may have."""
    return _address(sid, 0), _address(sid, _LOW)


def _sql_list(statuses: frozenset[str]) -> str:
    """A status set as SQL text, ``('queued', 'running')``: sorted, as the partial indexes."""
    return "(" + ", ".join(f"'{status}'" for status in sorted(statuses)) + ")"


def _admitted_a_turn(session: str) -> str:
    """SQL for `_rules.has_admitted_a_turn` about the session numbered ``session``.

    True when it holds a turn or a reset archived one; both lookups use the
    leading column of a key, so neither reads more than one entry.
    """
    return (
        f"(EXISTS (SELECT 1 FROM turns WHERE session = {session})"
        f" OR EXISTS (SELECT 1 FROM archived_turns WHERE session = {session}))"
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
    async def open(cls, path: str | Path, *, synchronous: Synchronous = "FULL") -> Self:
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
        except ValueError as exc:
            if self._db._connection is None:  # aiosqlite's word for a closed connection
                raise StoreError(f"the store at {self.path} is closed") from exc
            raise
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
        return await self._run(_turns_in, _rules.UNFINISHED)

    async def suspended_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return await self._run(_turns_in, _rules.SUSPENDED)

    async def cancelled_parks(self) -> list[SessionKey]:
        rows = await self._run(
            lambda conn: conn.execute(
                "SELECT DISTINCT s.agent, s.session_id FROM turns AS t JOIN sessions AS s"
                " ON s.id = t.session WHERE t.status = 'suspended' AND t.cancel IS NOT NULL"
            ).fetchall()
        )
        return [SessionKey(agent, session_id) for agent, session_id in rows]

    async def pending_resets(self) -> list[SessionKey]:
        rows = await self._run(
            lambda conn: conn.execute(
                "SELECT agent, session_id FROM sessions WHERE reset_through IS NOT NULL"
            ).fetchall()
        )
        return [SessionKey(agent, session_id) for agent, session_id in rows]

    async def load_archive(self, key: SessionKey, generation: int) -> Archive | None:
        return await self._run(_load_archive, self._ids, key, generation)

    async def take_lease(
        self, key: SessionKey, holder: str, *, now: float, until: float, over: str | None = None
    ) -> LeaseTaken:
        return await self._run(_take_lease, self._ids, key, holder, now, until, over)

    async def renew_lease(self, key: SessionKey, holder: str, *, until: float) -> bool:
        return await self._run(_keep_lease, self._ids, key, holder, until)

    async def drop_lease(self, key: SessionKey, holder: str) -> None:
        await self._run(_keep_lease, self._ids, key, holder, _rules.LET_GO)

    async def save_place_policy(self, source: str, place: str, policy: JsonValue | None) -> None:
        def save(conn: sqlite3.Connection) -> None:
            with _transaction(conn, self._ids):
                if policy is None:
                    conn.execute(
                        "DELETE FROM place_policies WHERE source = ? AND place = ?", (source, place)
                    )
                else:
                    conn.execute(
                        "INSERT INTO place_policies (source, place, policy) VALUES (?, ?, ?)"
                        " ON CONFLICT (source, place) DO UPDATE SET policy = excluded.policy",
                        (source, place, dumps(policy)),
                    )

        await self._run(save)

    async def place_policies(self, source: str) -> dict[str, JsonValue]:
        rows = await self._run(
            lambda conn: conn.execute(
                "SELECT place, policy FROM place_policies WHERE source = ?", (source,)
            ).fetchall()
        )
        return {place: loads(policy) for place, policy in rows}

    async def has_session(self, key: SessionKey) -> bool:
        def read(conn: sqlite3.Connection) -> bool:
            sid = self._ids.find(conn, key)
            if sid is None:
                return False
            [(admitted,)] = conn.execute(f"SELECT {_admitted_a_turn('?')}", (sid, sid))
            return bool(admitted)

        return await self._run(read)

    async def save_delivery(self, key: SessionKey, turn_id: str, state: JsonValue | None) -> None:
        text = None if state is None else dumps(state)
        await self._run(_save_delivery, self._ids, key, turn_id, text)

    async def claim_delivery(self, key: SessionKey, turn_id: str, state: JsonValue) -> bool:
        return await self._run(_claim_delivery, self._ids, key, turn_id, dumps(state))

    async def deliveries(self, agent: str) -> list[tuple[SessionKey, str, JsonValue]]:
        rows = await self._run(
            lambda conn: conn.execute(
                "SELECT s.session_id, d.turn_id, d.state FROM deliveries AS d"
                " JOIN sessions AS s ON s.id = d.session WHERE s.agent = ?",
                (agent,),
            ).fetchall()
        )
        return [(SessionKey(agent, sid), turn_id, loads(state)) for sid, turn_id, state in rows]

    async def load_delivery(self, key: SessionKey, turn_id: str) -> JsonValue | None:
        def read(conn: sqlite3.Connection) -> JsonValue | None:
            sid = self._ids.find(conn, key)
            row = None
            if sid is not None:
                row = conn.execute(
                    "SELECT state FROM deliveries WHERE session = ? AND turn_id = ?", (sid, turn_id)
                ).fetchone()
            return loads(row[0]) if row else None

        return await self._run(read)

    async def append_events(
        self, key: SessionKey, bodies: Sequence[JsonValue], *, at: float
    ) -> list[int]:
        texts = [dumps(body) for body in bodies]
        return await self._run(_append_events, self._ids, key, texts, at)

    async def read_events(
        self, key: SessionKey, *, after: int, limit: int
    ) -> list[tuple[int, JsonValue]]:
        def read(conn: sqlite3.Connection) -> list[tuple[int, str]]:
            sid = self._ids.find(conn, key)
            if sid is None:
                return []
            rows = conn.execute(
                "SELECT id, body FROM events WHERE id > ? AND id < ? ORDER BY id LIMIT ?",
                (_address(sid, after), _address(sid + 1, 0), limit),
            ).fetchall()
            return [(_low_of(row_id), body) for row_id, body in rows]

        return [(position, loads(body)) for position, body in await self._run(read)]

    async def event_bounds(self, key: SessionKey) -> LogBounds:
        def read(conn: sqlite3.Connection) -> LogBounds:
            sid = self._ids.find(conn, key)
            if sid is None:
                return LogBounds(first=1, last=0)
            [(last,)] = conn.execute("SELECT last_event FROM sessions WHERE id = ?", (sid,))
            [(first,)] = conn.execute(
                "SELECT min(id) FROM events WHERE id > ? AND id < ?",
                (_address(sid, 0), _address(sid + 1, 0)),
            )
            return LogBounds(first=last + 1 if first is None else _low_of(first), last=last)

        return await self._run(read)

    async def prune_events(self, *, before: float) -> int:
        def prune(conn: sqlite3.Connection) -> int:
            with _transaction(conn, self._ids):
                return conn.execute(
                    "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE at < ? LIMIT ?)",
                    (before, _PRUNE_BATCH),
                ).rowcount

        # in batches: the turns of every session wait behind each transaction
        pruned = batch = await self._run(prune)
        while batch == _PRUNE_BATCH:
            batch = await self._run(prune)
            pruned += batch
        return pruned

    async def list_sessions(self, agent: str, *, prefix: str = "") -> list[SessionSummary]:
        def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT s.session_id, s.status, s.last_event,"
                " (SELECT max(at) FROM events WHERE id > (s.id << 32) AND id < ((s.id + 1) << 32)),"
                " (SELECT record FROM turns WHERE session = s.id ORDER BY seq LIMIT 1)"
                " FROM sessions AS s WHERE s.agent = ? AND substr(s.session_id, 1, ?) = ?"
                f" AND {_admitted_a_turn('s.id')}",
                (agent, len(prefix), prefix),
            ).fetchall()

        found = [
            SessionSummary(
                session_id=session_id,
                status=status,
                title=_rules.title_of(
                    TURN_RECORD_ADAPTER.validate_json(record) if record else None
                ),
                last_event=last_event,
                updated_at=updated_at,
            )
            for session_id, status, last_event, updated_at, record in await self._run(read)
        ]
        return _rules.newest_first(found)

    async def dump_table(self, table: str) -> list[tuple[Any, ...]]:
        """Every row of one of our tables, for tests and diagnostics."""
        if table not in {
            "sessions",
            "turns",
            "messages",
            "steps",
            "archived_messages",
            "archived_steps",
            "archived_turns",
            "deliveries",
            "leases",
            "events",
        }:
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


@dataclass(frozen=True, slots=True)
class _Rows:
    """A commit serialised off the connection thread; the session's number comes later."""

    messages: list[tuple[Any, ...]]
    steps: list[tuple[Any, ...]]
    turns: list[tuple[Any, ...]]
    commit: Commit


def _rows(commit: Commit) -> _Rows:
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
    turns = [
        (t.turn_id, t.seq, t.status, TURN_RECORD_ADAPTER.dump_json(t).decode())
        for t in commit.turns
    ]
    return _Rows(messages, steps, turns, commit)


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


def _apply(conn: sqlite3.Connection, key: SessionKey, sid: int, rows: _Rows) -> None:
    """Write a commit the holder fence let through; the session's keys refuse taken rows."""
    commit = rows.commit

    def status_of(turn_id: str) -> str | None:
        found = conn.execute(
            "SELECT status FROM turns WHERE session = ? AND turn_id = ?", (sid, turn_id)
        ).fetchone()
        return None if found is None else str(found[0])

    _rules.check_expected(key, commit.expect, status_of)
    if rows.messages:
        conn.executemany(
            "INSERT INTO messages (id, turn_id, role, body) VALUES (?, ?, ?, ?)",
            [(_address(sid, index), *rest) for index, *rest in rows.messages],
        )
    if rows.steps:
        conn.executemany(
            "INSERT INTO steps (session, turn_id, step_id, result) VALUES (?, ?, ?, ?)",
            [(sid, *st) for st in rows.steps],
        )
    if rows.turns:
        conn.executemany(
            "INSERT INTO turns (session, turn_id, seq, status, record) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (session, turn_id)"
            " DO UPDATE SET status = excluded.status, record = excluded.record",
            [(sid, *turn) for turn in rows.turns],
        )
    if commit.cancels:
        conn.executemany(
            "UPDATE turns SET cancel = ? WHERE session = ? AND turn_id = ? AND cancel IS NULL",
            [(reason, sid, turn_id) for turn_id, reason in commit.cancels],
        )
    if commit.status is not None:
        conn.execute("UPDATE sessions SET status = ? WHERE id = ?", (commit.status, sid))
    if commit.reset_through is not None:
        conn.execute(
            "UPDATE sessions SET reset_through = ? WHERE id = ?", (commit.reset_through, sid)
        )
    if commit.archive:
        _archive(conn, key, sid)


def _archive(conn: sqlite3.Connection, key: SessionKey, sid: int) -> None:
    """Move the live generation of session ``sid`` into the archive and open the next."""
    generation, through = conn.execute(
        "SELECT generation, reset_through FROM sessions WHERE id = ?", (sid,)
    ).fetchone()
    through = _rules.check_reset_pending(key, through)
    low, high = _span(sid)
    conn.execute(
        "INSERT INTO archived_messages (session, generation, idx, turn_id, role, body)"
        " SELECT ?, ?, idx, turn_id, role, body FROM messages WHERE id BETWEEN ? AND ?",
        (sid, generation, low, high),
    )
    conn.execute("DELETE FROM messages WHERE id BETWEEN ? AND ?", (low, high))
    retiring = "SELECT turn_id FROM turns WHERE session = ? AND seq <= ?"
    conn.execute(
        "INSERT INTO archived_steps (session, generation, turn_id, step_id, result)"
        f" SELECT session, ?, turn_id, step_id, result FROM steps"
        f" WHERE session = ? AND turn_id IN ({retiring})",
        (generation, sid, sid, through),
    )
    conn.execute(
        f"DELETE FROM steps WHERE session = ? AND turn_id IN ({retiring})", (sid, sid, through)
    )
    conn.execute(
        "INSERT INTO archived_turns (session, generation, turn_id, seq, status, record)"
        " SELECT session, ?, turn_id, seq, status, record FROM turns"
        " WHERE session = ? AND seq <= ?",
        (generation, sid, through),
    )
    conn.execute("DELETE FROM turns WHERE session = ? AND seq <= ?", (sid, through))
    conn.execute(
        "UPDATE sessions SET generation = ?, reset_through = NULL, status = 'new' WHERE id = ?",
        (generation + 1, sid),
    )


@contextmanager
def _transaction(conn: sqlite3.Connection, ids: _SessionIds) -> Iterator[None]:
    """One write transaction: committed when the block ends, rolled back if it raises."""
    # IMMEDIATE takes the write lock first: a transaction that read (an expected
    # status) could not take it later if another process wrote in between
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # SQLite may have rolled back already (disk full, I/O)
            conn.execute("ROLLBACK")
        ids.forget()
        raise


def _write(conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, rows: _Rows) -> None:
    with _transaction(conn, ids):
        _check_lease(conn, key, rows.commit.holder)
        _apply(conn, key, ids.ensure(conn, key), rows)


def _check_lease(conn: sqlite3.Connection, key: SessionKey, writer: str | None) -> None:
    """The holder fence, read inside the transaction that then writes."""
    if writer is None:
        return  # a write that takes no lease into account reads none
    current = _lease(conn, key)
    _rules.check_holder(key, writer, current.holder if current is not None else None)


def _lease(conn: sqlite3.Connection, key: SessionKey) -> Lease | None:
    row = conn.execute(
        "SELECT holder, until FROM leases WHERE agent = ? AND session_id = ?",
        (key.agent, key.session_id),
    ).fetchone()
    return None if row is None else Lease(row[0], row[1])


def _take_lease(
    conn: sqlite3.Connection,
    ids: _SessionIds,
    key: SessionKey,
    holder: str,
    now: float,
    until: float,
    over: str | None,
) -> LeaseTaken:
    # IMMEDIATE (in _transaction): the lease read and the write see one holder
    with _transaction(conn, ids):
        taken = _rules.take_lease(_lease(conn, key), holder=holder, now=now, over=over)
        if taken.granted:
            conn.execute(
                "INSERT INTO leases (agent, session_id, holder, until) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (agent, session_id) DO UPDATE"
                " SET holder = excluded.holder, until = excluded.until",
                (key.agent, key.session_id, holder, until),
            )
        return taken


def _keep_lease(
    conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, holder: str, until: float
) -> bool:
    """Move the lease's end to ``until`` if ``holder`` still holds it (renew, or let go)."""
    with _transaction(conn, ids):
        if not _rules.is_held_by(_lease(conn, key), holder):
            return False
        conn.execute(
            "UPDATE leases SET until = ? WHERE agent = ? AND session_id = ?",
            (until, key.agent, key.session_id),
        )
        return True


def _save_delivery(
    conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, turn_id: str, state: str | None
) -> None:
    with _transaction(conn, ids):
        sid = ids.ensure(conn, key)
        if state is None:
            conn.execute("DELETE FROM deliveries WHERE session = ? AND turn_id = ?", (sid, turn_id))
        else:
            conn.execute(
                "INSERT INTO deliveries (session, turn_id, state) VALUES (?, ?, ?)"
                " ON CONFLICT (session, turn_id) DO UPDATE SET state = excluded.state",
                (sid, turn_id, state),
            )


_PRUNE_BATCH = 2000


def _append_events(
    conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, bodies: list[str], at: float
) -> list[int]:
    with _transaction(conn, ids):
        sid = ids.ensure(conn, key)
        [(last,)] = conn.execute("SELECT last_event FROM sessions WHERE id = ?", (sid,))
        positions = list(range(last + 1, last + 1 + len(bodies)))
        if positions[-1:] and positions[-1] > _LOW:
            raise StoreError(f"{key}: its event log is full")
        conn.executemany(
            "INSERT INTO events (id, at, body) VALUES (?, ?, ?)",
            [(_address(sid, p), at, body) for p, body in zip(positions, bodies, strict=True)],
        )
        conn.execute("UPDATE sessions SET last_event = ? WHERE id = ?", (last + len(bodies), sid))
        return positions


def _claim_delivery(
    conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, turn_id: str, state: str
) -> bool:
    with _transaction(conn, ids):
        cursor = conn.execute(
            "INSERT INTO deliveries (session, turn_id, state) VALUES (?, ?, ?)"
            " ON CONFLICT (session, turn_id) DO NOTHING",
            (ids.ensure(conn, key), turn_id, state),
        )
        return cursor.rowcount == 1


def _work_and_write(
    conn: sqlite3.Connection,
    ids: _SessionIds,
    key: SessionKey,
    work: Callable[[Any], T],
    record: Callable[[T | Exception], Commit],
) -> Commit:
    handle = _TransactionHandle(conn)
    with _transaction(conn, ids):
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
        _check_lease(conn, key, commit.holder)
        _apply(conn, key, ids.ensure(conn, key), _rows(commit))
    return commit


def _load(conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey) -> StoredSession:
    sid = ids.find(conn, key)
    if sid is None:
        return StoredSession()
    status, generation, reset_through = conn.execute(
        "SELECT status, generation, reset_through FROM sessions WHERE id = ?", (sid,)
    ).fetchone()
    bodies = conn.execute(
        "SELECT body FROM messages WHERE id BETWEEN ? AND ? ORDER BY id", _span(sid)
    ).fetchall()
    records = conn.execute(
        "SELECT record, cancel FROM turns WHERE session = ? ORDER BY seq", (sid,)
    ).fetchall()
    transcript = MESSAGES_ADAPTER.validate_json("[" + ",".join(b for (b,) in bodies) + "]")
    turns = {}
    cancels = {}
    for body, cancel in records:
        record = TURN_RECORD_ADAPTER.validate_json(body)
        turns[record.turn_id] = record
        if cancel is not None:
            cancels[record.turn_id] = cancel
    retired = set()
    if generation:
        rows = conn.execute("SELECT turn_id FROM archived_turns WHERE session = ?", (sid,))
        retired = {turn_id for (turn_id,) in rows}
    return StoredSession(
        status=status,
        transcript=transcript,
        turns=turns,
        cancels=cancels,
        generation=generation,
        reset_through=reset_through,
        retired=retired,
    )


def _load_archive(
    conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, generation: int
) -> Archive | None:
    sid = ids.find(conn, key)
    if sid is None:
        return None
    where = "WHERE session = ? AND generation = ?"
    bodies = conn.execute(
        f"SELECT body FROM archived_messages {where} ORDER BY idx", (sid, generation)
    ).fetchall()
    records = conn.execute(
        f"SELECT record FROM archived_turns {where} ORDER BY seq", (sid, generation)
    ).fetchall()
    if not bodies and not records:
        return None
    steps: dict[str, dict[str, JsonValue]] = {}
    for turn_id, step_id, result in conn.execute(
        f"SELECT turn_id, step_id, result FROM archived_steps {where}", (sid, generation)
    ):
        steps.setdefault(turn_id, {})[step_id] = loads(result)
    turns = {}
    for (body,) in records:
        record = TURN_RECORD_ADAPTER.validate_json(body)
        turns[record.turn_id] = record
    return Archive(
        generation=generation,
        transcript=MESSAGES_ADAPTER.validate_json("[" + ",".join(b for (b,) in bodies) + "]"),
        turns=turns,
        steps=steps,
    )


def _load_steps(
    conn: sqlite3.Connection, ids: _SessionIds, key: SessionKey, turn_id: str
) -> dict[str, JsonValue]:
    sid = ids.find(conn, key)
    rows = conn.execute(
        "SELECT step_id, result FROM steps WHERE session = ? AND turn_id = ?", (sid, turn_id)
    ).fetchall()
    return {step_id: loads(result) for step_id, result in rows}


def _turns_in(
    conn: sqlite3.Connection, statuses: frozenset[str]
) -> list[tuple[SessionKey, TurnRecord]]:
    # spelled as the partial indexes turns_unfinished and turns_suspended are, so
    # SQLite reads the index instead of every turn (a test checks the plan)
    rows = conn.execute(
        "SELECT s.agent, s.session_id, t.record FROM turns AS t JOIN sessions AS s"
        f" ON s.id = t.session WHERE t.status IN {_sql_list(statuses)}"
        " ORDER BY s.agent, s.session_id, t.seq"
    ).fetchall()
    return [
        (SessionKey(agent, sid), TURN_RECORD_ADAPTER.validate_json(body))
        for agent, sid, body in rows
    ]
