"""History retention on PostgreSQL: the payloads of turns that ended long ago are deleted.

As on SQLite (`agent.stores.sqlite._retention`): an expired turn's record keeps
its identity, status, timestamps and usage; its archived messages and steps go.
"""

from __future__ import annotations

from typing import Any

from agent.stores._expiry import scrub_archived

__all__ = ["crowded_sessions", "expire_archived", "expired_sessions"]

_UNEXPIRED = "record::jsonb ->> 'expired_at' IS NULL"
_ENDED_BEFORE = "(record::jsonb ->> 'ended_at')::float8 < %s"


def expire_archived(
    conn: Any, where: str, args: tuple[object, ...], *, before: float | None, at: float
) -> int:
    """Expire the archived turns ``where`` picks that ended before ``before``; how many.

    ``before`` None expires every one it picks (the turns a retention compaction just
    moved out, which may predate the timestamps).

    Runs inside the caller's transaction; the rows it changes are locked, so two
    replicas sweeping at once expire each turn once.
    """
    rows = conn.execute(
        "SELECT session, generation, turn_id, record FROM archived_turns"
        f" WHERE {where} AND {_UNEXPIRED}"
        + ("" if before is None else f" AND {_ENDED_BEFORE}")
        + " FOR UPDATE SKIP LOCKED",
        args if before is None else (*args, before),
    ).fetchall()
    return scrub_archived(conn.execute, rows, at, "%s")


def expired_sessions(conn: Any, agent: str, before: float) -> list[str]:
    """The ids of the agent's sessions with a live turn or a summary older than ``before``."""
    rows = conn.execute(
        "SELECT s.session_id FROM sessions s WHERE s.agent = %s AND (s.summary_since < %s"
        " OR EXISTS (SELECT 1 FROM turns t WHERE t.session = s.id"
        " AND (t.record::jsonb ->> 'ended_at')::float8 < %s))"
        " ORDER BY s.session_id",
        (agent, before, before),
    ).fetchall()
    return [session_id for (session_id,) in rows]


def crowded_sessions(conn: Any, agent: str, more_than: int) -> list[str]:
    """The ids of the agent's sessions holding more than ``more_than`` live turns."""
    rows = conn.execute(
        "SELECT s.session_id FROM sessions s JOIN turns t ON t.session = s.id"
        " WHERE s.agent = %s GROUP BY s.id, s.session_id HAVING count(*) > %s"
        " ORDER BY s.session_id",
        (agent, more_than),
    ).fetchall()
    return [session_id for (session_id,) in rows]
