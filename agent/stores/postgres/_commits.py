"""A `Commit`'s transaction on PostgreSQL: the fence, the writes, the archive, a tool's handle.

Every fenced write **locks** the session's lease row (``FOR UPDATE``) before it
checks the holder. Under READ COMMITTED a plain read of the row is a split
brain: a takeover committed after the read, and the stale writer's step lands
unseen by the new owner. The lock makes the takeover wait for the writer, or
the writer see the takeover. Then the session's own row is locked, so two
writers of one session (one holding no lease) still go one at a time, as
``BEGIN IMMEDIATE`` makes them on SQLite, but per session instead of per file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import psycopg

from agent._json import dumps
from agent.core.messages import MESSAGE_ADAPTER
from agent.core.records import Commit, SessionKey
from agent.core.transcript import Compaction
from agent.core.turns import STORED_APART, TURN_RECORD_ADAPTER
from agent.errors import StoreError
from agent.stores import _rules
from agent.stores._rules import Lease
from agent.stores.postgres._retention import expire_archived
from agent.stores.postgres._schema import Conn, SessionIds

__all__ = [
    "TransactionEndedError",
    "TransactionHandle",
    "lock_lease",
    "lock_session",
    "work_and_write",
    "write",
]

T = TypeVar("T")

_TRANSACTION_CONTROL: Final = frozenset(
    {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE", "PREPARE"}
)
_LEADING_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)


def _first_word(sql: str) -> str:
    rest = sql[_LEADING_COMMENTS.match(sql).end() :]  # type: ignore[union-attr]
    word = re.match(r"[A-Za-z]*", rest)
    return word.group(0).upper() if word else ""


class TransactionHandle:
    """The connection as a local tool sees it: statements only, inside our transaction.

    PostgreSQL has no authorizer to deny a ``COMMIT`` as SQLite's does, so two
    checks stand in: a statement whose first word (past comments) controls the
    transaction is refused, and every statement goes over the extended protocol,
    which runs one statement only (the server refuses ``SELECT 1; COMMIT``).
    After the tool, `work_and_write` checks that the transaction is still ours
    to commit.
    """

    __slots__ = ("_conn", "is_open")

    paramstyle: Final = "format"
    """Placeholders are ``%s``, as psycopg's are (SQLite's handle takes ``?``)."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self.is_open = True

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if not self.is_open:
            raise StoreError("this store handle belonged to a step that has ended")
        if _first_word(sql) in _TRANSACTION_CONTROL:
            raise StoreError("a tool cannot control the step's transaction")
        # binary results make psycopg use the extended protocol even with no
        # parameters; the simple one would run ``SELECT 1; COMMIT`` whole
        cursor = self._conn.execute(sql, tuple(parameters), prepare=False, binary=True)
        return cursor.fetchall() if cursor.description is not None else []


def lock_lease(conn: Conn, key: SessionKey) -> Lease | None:
    """Read the session's lease and lock its row until the transaction ends."""
    row = conn.execute(
        "SELECT holder, until FROM leases WHERE agent = %s AND session_id = %s FOR UPDATE",
        (key.agent, key.session_id),
    ).fetchone()
    return None if row is None else Lease(row[0], row[1])


def lock_session(conn: Conn, ids: SessionIds, key: SessionKey) -> int:
    """The session's number, its row made if needed and locked until the transaction ends."""
    sid = ids.find(conn, key)
    if sid is not None:
        conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (sid,))
        return sid
    return ids.ensure(conn, key)  # the upsert locks the row it makes or finds


def _apply(conn: Conn, key: SessionKey, sid: int, commit: Commit) -> None:
    def status_of(turn_id: str) -> str | None:
        found = conn.execute(
            "SELECT status FROM turns WHERE session = %s AND turn_id = %s", (sid, turn_id)
        ).fetchone()
        return None if found is None else str(found[0])

    _rules.check_expected(key, commit.expect, status_of)
    if commit.inbox_done:
        rows = conn.execute(
            "DELETE FROM inbox WHERE id = ANY(%s) AND agent = %s AND session_id = %s RETURNING id",
            (list(commit.inbox_done), key.agent, key.session_id),
        ).fetchall()
        deleted = {row[0] for row in rows}
        _rules.check_inbox_done(key, commit.inbox_done, deleted.__contains__)
    with conn.cursor() as cursor:
        if commit.messages:
            cursor.executemany(
                "INSERT INTO messages (session, idx, turn_id, role, body)"
                " VALUES (%s, %s, %s, %s, %s)",
                [
                    (
                        sid,
                        m.index,
                        m.message.turn_id,
                        m.message.role,
                        MESSAGE_ADAPTER.dump_json(m.message).decode(),
                    )
                    for m in commit.messages
                ],
            )
        if commit.steps:
            cursor.executemany(
                "INSERT INTO steps (session, turn_id, step_id, result) VALUES (%s, %s, %s, %s)",
                [(sid, s.turn_id, s.step_id, dumps(s.result)) for s in commit.steps],
            )
        if commit.turns:
            cursor.executemany(
                "INSERT INTO turns (session, turn_id, seq, status, record)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session, turn_id)"
                " DO UPDATE SET status = excluded.status, record = excluded.record",
                [
                    (
                        sid,
                        t.turn_id,
                        t.seq,
                        t.status,
                        TURN_RECORD_ADAPTER.dump_json(t, exclude=STORED_APART).decode(),
                    )
                    for t in commit.turns
                ],
            )
        if commit.cancels:
            cursor.executemany(
                "UPDATE turns SET cancel = %s"
                " WHERE session = %s AND turn_id = %s AND cancel IS NULL",
                [(reason, sid, turn_id) for turn_id, reason in commit.cancels],
            )
    if commit.status is not None:
        conn.execute("UPDATE sessions SET status = %s WHERE id = %s", (commit.status, sid))
    if commit.release_hold or commit.hold is not None:
        conn.execute("UPDATE sessions SET hold = %s WHERE id = %s", (commit.hold, sid))
    if commit.reset_through is not None:
        conn.execute(
            "UPDATE sessions SET reset_through = %s WHERE id = %s", (commit.reset_through, sid)
        )
    if commit.compact is not None:
        _compact(conn, key, sid, commit.compact)
    if commit.archive:
        _archive(conn, key, sid)


def _compact(conn: Conn, key: SessionKey, sid: int, compaction: Compaction) -> None:
    """Move the turns and messages ``compaction`` covers into the current generation's archive."""
    unended = conn.execute(
        "SELECT count(*) FROM turns WHERE session = %s AND seq <= %s AND status = ANY(%s)",
        (sid, compaction.through, sorted(_rules.STILL_IN_PLAY)),
    ).fetchone()
    generation, before = conn.execute(
        "SELECT generation, compacted_through FROM sessions WHERE id = %s", (sid,)
    ).fetchone() or (0, 0)
    _rules.check_compaction(key, compaction, unended[0] if unended else 0, generation)
    _move_out(conn, sid, generation, compaction.base, compaction.through)
    if compaction.expire_at is not None:
        # the turns this compaction moved out; those archived before expire by their own age
        where = "session = %s AND generation = %s AND seq > %s AND seq <= %s"
        picked = (sid, generation, before, compaction.through)
        expire_archived(conn, where, picked, before=None, at=compaction.expire_at)
    conn.execute(
        "UPDATE sessions SET base = greatest(base, %s), summary = %s, summary_since = %s,"
        " compacted_through = greatest(compacted_through, %s) WHERE id = %s",
        (compaction.base, compaction.summary, compaction.since, compaction.through, sid),
    )


def _archive(conn: Conn, key: SessionKey, sid: int) -> None:
    """Move the live generation of session ``sid`` into the archive and open the next."""
    generation, through = conn.execute(
        "SELECT generation, reset_through FROM sessions WHERE id = %s", (sid,)
    ).fetchone() or (0, None)
    through = _rules.check_reset_pending(key, through)
    _move_out(conn, sid, generation, EVERY_INDEX, through)
    conn.execute(
        "UPDATE sessions SET generation = %s, reset_through = NULL, status = 'new', base = 0,"
        " summary = NULL, summary_since = NULL, compacted_through = 0 WHERE id = %s",
        (generation + 1, sid),
    )


EVERY_INDEX: Final = 2**31 - 1
"""Above every transcript index the messages table holds (an ``integer``)."""


def _move_out(conn: Conn, sid: int, generation: int, below: int, through: int) -> None:
    """Move rows into the archive of ``generation``.

    They are the messages below index ``below``, and the turns up to ``through``
    with their steps.
    """
    conn.execute(
        "WITH moved AS (DELETE FROM messages WHERE session = %s AND idx < %s RETURNING *)"
        " INSERT INTO archived_messages (session, generation, idx, turn_id, role, body)"
        " SELECT session, %s, idx, turn_id, role, body FROM moved",
        (sid, below, generation),
    )
    moving = "SELECT turn_id FROM turns WHERE session = %s AND seq <= %s"
    conn.execute(
        f"WITH moved AS (DELETE FROM steps WHERE session = %s AND turn_id IN ({moving})"
        " RETURNING *)"
        " INSERT INTO archived_steps (session, generation, turn_id, step_id, result)"
        " SELECT session, %s, turn_id, step_id, result FROM moved",
        (sid, sid, through, generation),
    )
    conn.execute(
        "WITH moved AS (DELETE FROM turns WHERE session = %s AND seq <= %s RETURNING *)"
        " INSERT INTO archived_turns (session, generation, turn_id, seq, status, record)"
        " SELECT session, %s, turn_id, seq, status, record FROM moved",
        (sid, through, generation),
    )


def _fence(conn: Conn, key: SessionKey, writer: str | None, lease: Lease | None) -> None:
    if writer is not None:
        _rules.check_holder(key, writer, lease.holder if lease is not None else None)


def write(conn: Conn, ids: SessionIds, key: SessionKey, commit: Commit) -> None:
    with conn.transaction():
        lease = lock_lease(conn, key) if commit.holder is not None else None
        _fence(conn, key, commit.holder, lease)
        sid = lock_session(conn, ids, key)
        _apply(conn, key, sid, commit)
    ids.remember(key, sid)


def work_and_write(
    conn: Conn,
    ids: SessionIds,
    key: SessionKey,
    work: Callable[[Any], T],
    record: Callable[[T | Exception], Commit],
) -> Commit:
    handle = TransactionHandle(conn)
    with conn.transaction():
        # locked before the tool runs: a takeover waits for the step, or the step sees it
        lease = lock_lease(conn, key)
        sid = lock_session(conn, ids, key)
        outcome: T | Exception
        try:
            with conn.transaction(savepoint_name="tool_call"):
                try:
                    outcome = work(handle)
                finally:
                    handle.is_open = False
                _check_still_ours(conn)
        except TransactionEndedError:
            raise
        except psycopg.Error as exc:
            # a statement of the tool failed; its writes went with the savepoint
            outcome = StoreError(f"PostgreSQL: {exc}")
        except Exception as exc:
            outcome = exc  # the tool raised; its writes went with the savepoint
        commit = record(outcome)
        _fence(conn, key, commit.holder, lease)
        _apply(conn, key, sid, commit)
    ids.remember(key, sid)
    return commit


class TransactionEndedError(StoreError):
    """A tool ended the step's transaction: its writes may have committed without the step."""


def _check_still_ours(conn: Conn) -> None:
    status = conn.info.transaction_status
    if status == psycopg.pq.TransactionStatus.INERROR:
        # a statement failed and the tool went on: roll its writes back with the savepoint
        raise StoreError("a statement of the tool failed, and the transaction with it")
    if status != psycopg.pq.TransactionStatus.INTRANS:
        raise TransactionEndedError(
            "a tool ended the step's transaction (its writes may have committed"
            " without the checkpoint); the step is not recorded"
        )
