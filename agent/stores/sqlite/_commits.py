"""A `Commit`'s transaction: the checks, the writes, the archive, and a local tool's handle.

Each function runs on the connection thread, inside `transaction`. The rules
(the holder fence, the expected statuses, an archive with a reset pending) are
`agent.stores._rules`; this module reads the rows they ask about and writes
the commit in SQL. Taken transcript indexes and steps are refused by the
primary keys of ``messages`` and ``steps``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from agent._json import dumps
from agent.core.messages import MESSAGE_ADAPTER
from agent.core.records import Commit, SessionKey
from agent.core.transcript import Compaction
from agent.core.turns import STORED_APART, TURN_RECORD_ADAPTER
from agent.errors import StoreError
from agent.stores import _rules
from agent.stores._rules import Lease
from agent.stores.sqlite._retention import expire_archived
from agent.stores.sqlite._schema import SessionIds, address, span, status_in

__all__ = [
    "Rows",
    "TransactionHandle",
    "check_lease",
    "read_lease",
    "rows_of",
    "transaction",
    "work_and_write",
    "write",
]

T = TypeVar("T")

_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE")


_TRANSACTION_ACTIONS = frozenset({sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT})


class TransactionHandle:
    """The connection as a local tool sees it: statements only, inside our transaction.

    Two locks keep the tool from ending the step's transaction: a check of the
    statement's first word, and an SQLite authorizer that denies transaction
    statements while a tool runs (it also sees ``/* */ COMMIT`` and the like).
    The first is needed too: a statement the engine already prepared (its own
    ``COMMIT``) comes from the cache without asking the authorizer again.
    """

    __slots__ = ("_conn", "is_open")

    paramstyle: Final = "qmark"
    """Placeholders are ``?``, as sqlite3's are (PostgreSQL's handle takes ``%s``)."""

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


@dataclass(frozen=True, slots=True)
class Rows:
    """A commit serialised off the connection thread; the session's number comes later."""

    messages: list[tuple[Any, ...]]
    steps: list[tuple[Any, ...]]
    turns: list[tuple[Any, ...]]
    commit: Commit


def rows_of(commit: Commit) -> Rows:
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
        (
            t.turn_id,
            t.seq,
            t.status,
            TURN_RECORD_ADAPTER.dump_json(t, exclude=STORED_APART).decode(),
        )
        for t in commit.turns
    ]
    return Rows(messages, steps, turns, commit)


def apply(conn: sqlite3.Connection, key: SessionKey, sid: int, rows: Rows) -> None:
    """Write a commit the holder fence let through; the session's keys refuse taken rows."""
    commit = rows.commit

    def status_of(turn_id: str) -> str | None:
        found = conn.execute(
            "SELECT status FROM turns WHERE session = ? AND turn_id = ?", (sid, turn_id)
        ).fetchone()
        return None if found is None else str(found[0])

    _rules.check_expected(key, commit.expect, status_of)
    if commit.inbox_done:
        deleted = {
            item
            for item in commit.inbox_done
            if conn.execute(
                "DELETE FROM inbox WHERE id = ? AND agent = ? AND session_id = ?",
                (item, key.agent, key.session_id),
            ).rowcount
        }
        _rules.check_inbox_done(key, commit.inbox_done, deleted.__contains__)
    if rows.messages:
        conn.executemany(
            "INSERT INTO messages (id, turn_id, role, body) VALUES (?, ?, ?, ?)",
            [(address(sid, index), *rest) for index, *rest in rows.messages],
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
    if commit.release_hold or commit.hold is not None:
        conn.execute("UPDATE sessions SET hold = ? WHERE id = ?", (commit.hold, sid))
    if commit.reset_through is not None:
        conn.execute(
            "UPDATE sessions SET reset_through = ? WHERE id = ?", (commit.reset_through, sid)
        )
    if commit.compact is not None:
        compact(conn, key, sid, commit.compact)
    if commit.archive:
        archive(conn, key, sid)


def compact(conn: sqlite3.Connection, key: SessionKey, sid: int, compaction: Compaction) -> None:
    """Move the turns and messages ``compaction`` covers into the current generation's archive."""
    (unended,) = conn.execute(
        "SELECT count(*) FROM turns WHERE session = ? AND seq <= ? AND "
        + status_in("status", _rules.STILL_IN_PLAY),
        (sid, compaction.through),
    ).fetchone()
    generation, before = conn.execute(
        "SELECT generation, compacted_through FROM sessions WHERE id = ?", (sid,)
    ).fetchone()
    _rules.check_compaction(key, compaction, unended, generation)
    low, high = address(sid, 0), address(sid, compaction.base) - 1
    _move_out(conn, sid, generation, low, high, "seq <= ?", (compaction.through,))
    if compaction.expire_at is not None:
        # the turns this compaction moved out; those archived before expire by their own age
        where = "session = ? AND generation = ? AND seq > ? AND seq <= ?"
        picked = (sid, generation, before, compaction.through)
        expire_archived(conn, where, picked, before=None, at=compaction.expire_at)
    conn.execute(
        "UPDATE sessions SET base = max(base, ?), summary = ?, summary_since = ?,"
        " compacted_through = max(compacted_through, ?) WHERE id = ?",
        (compaction.base, compaction.summary, compaction.since, compaction.through, sid),
    )


def _move_out(
    conn: sqlite3.Connection,
    sid: int,
    generation: int,
    low: int,
    high: int,
    turns_where: str,
    turns_args: tuple[Any, ...],
) -> None:
    """Move rows into the archive of ``generation``.

    They are the messages with rowids ``low`` to ``high``, and the turns
    ``turns_where`` picks, with their steps.
    """
    conn.execute(
        "INSERT INTO archived_messages (session, generation, idx, turn_id, role, body)"
        " SELECT ?, ?, idx, turn_id, role, body FROM messages WHERE id BETWEEN ? AND ?",
        (sid, generation, low, high),
    )
    conn.execute("DELETE FROM messages WHERE id BETWEEN ? AND ?", (low, high))
    moving = f"SELECT turn_id FROM turns WHERE session = ? AND {turns_where}"
    conn.execute(
        "INSERT INTO archived_steps (session, generation, turn_id, step_id, result)"
        f" SELECT session, ?, turn_id, step_id, result FROM steps"
        f" WHERE session = ? AND turn_id IN ({moving})",
        (generation, sid, sid, *turns_args),
    )
    conn.execute(
        f"DELETE FROM steps WHERE session = ? AND turn_id IN ({moving})", (sid, sid, *turns_args)
    )
    conn.execute(
        "INSERT INTO archived_turns (session, generation, turn_id, seq, status, record)"
        " SELECT session, ?, turn_id, seq, status, record FROM turns"
        f" WHERE session = ? AND {turns_where}",
        (generation, sid, *turns_args),
    )
    conn.execute(f"DELETE FROM turns WHERE session = ? AND {turns_where}", (sid, *turns_args))


def archive(conn: sqlite3.Connection, key: SessionKey, sid: int) -> None:
    """Move the live generation of session ``sid`` into the archive and open the next."""
    generation, through = conn.execute(
        "SELECT generation, reset_through FROM sessions WHERE id = ?", (sid,)
    ).fetchone()
    through = _rules.check_reset_pending(key, through)
    low, high = span(sid)
    _move_out(conn, sid, generation, low, high, "seq <= ?", (through,))
    conn.execute(
        "UPDATE sessions SET generation = ?, reset_through = NULL, status = 'new', base = 0,"
        " summary = NULL, summary_since = NULL, compacted_through = 0 WHERE id = ?",
        (generation + 1, sid),
    )


@contextmanager
def transaction(conn: sqlite3.Connection, ids: SessionIds) -> Iterator[None]:
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


def write(conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, rows: Rows) -> None:
    with transaction(conn, ids):
        check_lease(conn, key, rows.commit.holder)
        apply(conn, key, ids.ensure(conn, key), rows)


def check_lease(conn: sqlite3.Connection, key: SessionKey, writer: str | None) -> None:
    """The holder fence, read inside the transaction that then writes."""
    if writer is None:
        return  # a write that takes no lease into account reads none
    current = read_lease(conn, key)
    _rules.check_holder(key, writer, current.holder if current is not None else None)


def read_lease(conn: sqlite3.Connection, key: SessionKey) -> Lease | None:
    row = conn.execute(
        "SELECT holder, until FROM leases WHERE agent = ? AND session_id = ?",
        (key.agent, key.session_id),
    ).fetchone()
    return None if row is None else Lease(row[0], row[1])


def work_and_write(
    conn: sqlite3.Connection,
    ids: SessionIds,
    key: SessionKey,
    work: Callable[[Any], T],
    record: Callable[[T | Exception], Commit],
) -> Commit:
    handle = TransactionHandle(conn)
    with transaction(conn, ids):
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
        check_lease(conn, key, commit.holder)
        apply(conn, key, ids.ensure(conn, key), rows_of(commit))
    return commit
