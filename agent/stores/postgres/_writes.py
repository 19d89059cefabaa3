"""The writes beside a commit on PostgreSQL, each in a transaction of its own.

Leases, delivery states, the event log, place policies and feedback. A lease is read and
written with its row locked, so two replicas taking one session see one
holder; the rules are `agent.stores._rules`, as on every store.
"""

from __future__ import annotations

from collections.abc import Callable

from agent._json import JsonValue, dumps
from agent.core.feedback import Feedback
from agent.core.records import LeaseTaken, SessionKey
from agent.stores import _rules
from agent.stores.postgres._commits import lock_lease
from agent.stores.postgres._retention import expire_archived
from agent.stores.postgres._schema import Conn, SessionIds
from agent.stores.postgres._wakeups import INBOX_CHANNEL, encode

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
"""Log entries deleted per transaction, so a prune never holds many rows at once."""


def take_lease(
    conn: Conn,
    key: SessionKey,
    holder: str,
    now: float,
    until: float,
    over: str | None,
    is_gone: Callable[[Conn, str], bool],
) -> LeaseTaken:
    with conn.transaction():
        current = lock_lease(conn, key)
        if current is None:
            # the first take of a session: two replicas may race to make the row
            inserted = conn.execute(
                "INSERT INTO leases (agent, session_id, holder, until) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (agent, session_id) DO NOTHING RETURNING 1",
                (key.agent, key.session_id, holder, until),
            ).fetchone()
            if inserted is not None:
                return _rules.take_lease(None, holder=holder, now=now, over=over)
            current = lock_lease(conn, key)
            assert current is not None
        if over is None and current.holder != holder and is_gone(conn, current.holder):
            over = current.holder  # its replica's liveness lock is free: it is dead
        taken = _rules.take_lease(current, holder=holder, now=now, over=over)
        if taken.granted:
            conn.execute(
                "UPDATE leases SET holder = %s, until = %s WHERE agent = %s AND session_id = %s",
                (holder, until, key.agent, key.session_id),
            )
        return taken


def keep_lease(conn: Conn, key: SessionKey, holder: str, until: float) -> bool:
    """Move the lease's end to ``until`` if ``holder`` still holds it (renew, or let go)."""
    with conn.transaction():
        if not _rules.is_held_by(lock_lease(conn, key), holder):
            return False
        conn.execute(
            "UPDATE leases SET until = %s WHERE agent = %s AND session_id = %s",
            (until, key.agent, key.session_id),
        )
        return True


def save_delivery(
    conn: Conn, ids: SessionIds, key: SessionKey, turn_id: str, state: str | None
) -> None:
    with conn.transaction():
        sid = ids.ensure(conn, key)
        if state is None:
            conn.execute(
                "DELETE FROM deliveries WHERE session = %s AND turn_id = %s", (sid, turn_id)
            )
        else:
            conn.execute(
                "INSERT INTO deliveries (session, turn_id, state) VALUES (%s, %s, %s)"
                " ON CONFLICT (session, turn_id) DO UPDATE SET state = excluded.state",
                (sid, turn_id, state),
            )
    ids.remember(key, sid)


def claim_delivery(conn: Conn, ids: SessionIds, key: SessionKey, turn_id: str, state: str) -> bool:
    with conn.transaction():
        sid = ids.ensure(conn, key)
        claimed = conn.execute(
            "INSERT INTO deliveries (session, turn_id, state) VALUES (%s, %s, %s)"
            " ON CONFLICT (session, turn_id) DO NOTHING RETURNING 1",
            (sid, turn_id, state),
        ).fetchone()
    ids.remember(key, sid)
    return claimed is not None


def append_events(
    conn: Conn, ids: SessionIds, key: SessionKey, bodies: list[str], at: float
) -> list[int]:
    with conn.transaction():
        sid = ids.ensure(conn, key)
        # the row lock serialises appenders across replicas: positions have no gaps,
        # and a rollback gives its numbers back
        row = conn.execute(
            "UPDATE sessions SET last_event = last_event + %s WHERE id = %s RETURNING last_event",
            (len(bodies), sid),
        ).fetchone()
        assert row is not None
        last = int(row[0])
        positions = list(range(last - len(bodies) + 1, last + 1))
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO events (session, position, at, body) VALUES (%s, %s, %s, %s)",
                [(sid, p, at, body) for p, body in zip(positions, bodies, strict=True)],
            )
    ids.remember(key, sid)
    return positions


def save_place_policy(conn: Conn, source: str, place: str, policy: JsonValue | None) -> None:
    with conn.transaction():
        if policy is None:
            conn.execute(
                "DELETE FROM place_policies WHERE source = %s AND place = %s", (source, place)
            )
        else:
            conn.execute(
                "INSERT INTO place_policies (source, place, policy) VALUES (%s, %s, %s)"
                " ON CONFLICT (source, place) DO UPDATE SET policy = excluded.policy",
                (source, place, dumps(policy)),
            )


def save_feedback(conn: Conn, feedback: Feedback) -> None:
    key = feedback.key
    with conn.transaction():
        conn.execute(
            "INSERT INTO feedback (agent, session_id, turn_id, given_by, rating, comment, at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
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


def prune_events(conn: Conn, before: float) -> int:
    """Delete up to `PRUNE_BATCH` entries logged before ``before``; return how many went."""
    with conn.transaction():
        cursor = conn.execute(
            "DELETE FROM events WHERE ctid IN"
            " (SELECT ctid FROM events WHERE at < %s LIMIT %s FOR UPDATE SKIP LOCKED)",
            (before, PRUNE_BATCH),
        )
        return cursor.rowcount


def post_inbox(conn: Conn, key: SessionKey, kind: str, ref: str, body: str, at: float) -> bool:
    with conn.transaction():
        posted = conn.execute(
            "INSERT INTO inbox (agent, session_id, kind, ref, body, at)"
            " VALUES (%s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (agent, session_id, kind, ref) DO NOTHING RETURNING 1",
            (key.agent, key.session_id, kind, ref, body, at),
        ).fetchone()
        if posted is not None:
            # delivered at commit; a small transaction of its own, never a checkpoint's
            conn.execute("SELECT pg_notify(%s, %s)", (INBOX_CHANNEL, encode(key, 0)))
    return posted is not None


def expire_history(conn: Conn, agent: str, before: float, at: float) -> int:
    """Expire the agent's archived turns that ended before ``before``; how many."""
    with conn.transaction():
        where = "session IN (SELECT id FROM sessions WHERE agent = %s)"
        return expire_archived(conn, where, (agent,), before=before, at=at)
