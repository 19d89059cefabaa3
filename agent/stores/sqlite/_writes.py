"""The writes beside a commit, each in a transaction of its own.

Leases, delivery states, the event log, place policies and feedback. Like a commit's,
each function runs on the connection thread, inside `transaction`; the lease
rules are `agent.stores._rules`.
"""

from __future__ import annotations

import sqlite3

from agent._json import JsonValue, dumps
from agent.core.feedback import Feedback
from agent.core.records import LeaseTaken, SessionKey
from agent.errors import StoreError
from agent.stores import _rules
from agent.stores.sqlite._commits import read_lease, transaction
from agent.stores.sqlite._retention import expire_archived
from agent.stores.sqlite._schema import LOW, SessionIds, address

__all__ = [
    "PRUNE_BATCH",
    "append_events",
    "claim_delivery",
    "keep_lease",
    "post_inbox",
    "prune_events",
    "save_delivery",
    "save_feedback",
    "save_place_policy",
    "take_lease",
]

PRUNE_BATCH = 2000
"""Log entries deleted per transaction: the turns of every session wait behind each one."""


def take_lease(
    conn: sqlite3.Connection,
    ids: SessionIds,
    key: SessionKey,
    holder: str,
    now: float,
    until: float,
    over: str | None,
) -> LeaseTaken:
    # IMMEDIATE (in _transaction): the lease read and the write see one holder
    with transaction(conn, ids):
        taken = _rules.take_lease(read_lease(conn, key), holder=holder, now=now, over=over)
        if taken.granted:
            conn.execute(
                "INSERT INTO leases (agent, session_id, holder, until) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (agent, session_id) DO UPDATE"
                " SET holder = excluded.holder, until = excluded.until",
                (key.agent, key.session_id, holder, until),
            )
        return taken


def keep_lease(
    conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, holder: str, until: float
) -> bool:
    """Move the lease's end to ``until`` if ``holder`` still holds it (renew, or let go)."""
    with transaction(conn, ids):
        if not _rules.is_held_by(read_lease(conn, key), holder):
            return False
        conn.execute(
            "UPDATE leases SET until = ? WHERE agent = ? AND session_id = ?",
            (until, key.agent, key.session_id),
        )
        return True


def save_delivery(
    conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, turn_id: str, state: str | None
) -> None:
    with transaction(conn, ids):
        sid = ids.ensure(conn, key)
        if state is None:
            conn.execute("DELETE FROM deliveries WHERE session = ? AND turn_id = ?", (sid, turn_id))
        else:
            conn.execute(
                "INSERT INTO deliveries (session, turn_id, state) VALUES (?, ?, ?)"
                " ON CONFLICT (session, turn_id) DO UPDATE SET state = excluded.state",
                (sid, turn_id, state),
            )


def append_events(
    conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, bodies: list[str], at: float
) -> list[int]:
    with transaction(conn, ids):
        sid = ids.ensure(conn, key)
        [(last,)] = conn.execute("SELECT last_event FROM sessions WHERE id = ?", (sid,))
        positions = list(range(last + 1, last + 1 + len(bodies)))
        if positions[-1:] and positions[-1] > LOW:
            raise StoreError(f"{key}: its event log is full")
        conn.executemany(
            "INSERT INTO events (id, at, body) VALUES (?, ?, ?)",
            [(address(sid, p), at, body) for p, body in zip(positions, bodies, strict=True)],
        )
        conn.execute("UPDATE sessions SET last_event = ? WHERE id = ?", (last + len(bodies), sid))
        return positions


def claim_delivery(
    conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, turn_id: str, state: str
) -> bool:
    with transaction(conn, ids):
        cursor = conn.execute(
            "INSERT INTO deliveries (session, turn_id, state) VALUES (?, ?, ?)"
            " ON CONFLICT (session, turn_id) DO NOTHING",
            (ids.ensure(conn, key), turn_id, state),
        )
        return cursor.rowcount == 1


def save_place_policy(
    conn: sqlite3.Connection, ids: SessionIds, source: str, place: str, policy: JsonValue | None
) -> None:
    with transaction(conn, ids):
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


def save_feedback(conn: sqlite3.Connection, ids: SessionIds, feedback: Feedback) -> None:
    key = feedback.key
    with transaction(conn, ids):
        conn.execute(
            "INSERT INTO feedback (agent, session_id, turn_id, given_by, rating, comment, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (agent, session_id, turn_id, given_by) DO UPDATE"
            " SET rating = excluded.rating, comment = excluded.comment, at = excluded.at",
            (
                key.agent,
                key.session_id,
                feedback.turn_id,
                feedback.by,
                feedback.rating,
                feedback.comment,
                feedback.at,
            ),
        )


def prune_events(conn: sqlite3.Connection, ids: SessionIds, before: float) -> int:
    """Delete up to `PRUNE_BATCH` entries logged before ``before``; return how many went."""
    with transaction(conn, ids):
        return conn.execute(
            "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE at < ? LIMIT ?)",
            (before, PRUNE_BATCH),
        ).rowcount


def post_inbox(
    conn: sqlite3.Connection,
    ids: SessionIds,
    key: SessionKey,
    kind: str,
    ref: str,
    body: str,
    at: float,
) -> bool:
    with transaction(conn, ids):
        return (
            conn.execute(
                "INSERT INTO inbox (agent, session_id, kind, ref, body, at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (agent, session_id, kind, ref) DO NOTHING",
                (key.agent, key.session_id, kind, ref, body, at),
            ).rowcount
            == 1
        )


def expire_history(
    conn: sqlite3.Connection, ids: SessionIds, agent: str, before: float, at: float
) -> int:
    """Expire the agent's archived turns that ended before ``before``; how many."""
    with transaction(conn, ids):
        where = "session IN (SELECT id FROM sessions WHERE agent = ?)"
        return expire_archived(conn, where, (agent,), before=before, at=at)
