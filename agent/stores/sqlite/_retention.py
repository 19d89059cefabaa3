"""History retention on SQLite: the payloads of turns that ended long ago are deleted.

An expired turn's record keeps its identity, status, timestamps and usage
(`agent.core.retention.expired_record`); its archived messages and steps go.
Turns expire only once they left the live tables (a compaction or a reset
moved them), so the sweep reads the archive alone.
"""

from __future__ import annotations

import sqlite3

from agent.stores._expiry import scrub_archived

__all__ = ["crowded_sessions", "expire_archived", "expired_sessions"]

_UNEXPIRED = "json_extract(record, '$.expired_at') IS NULL"
_ENDED_BEFORE = "json_extract(record, '$.ended_at') < ?"


def expire_archived(
    conn: sqlite3.Connection,
    where: str,
    args: tuple[object, ...],
    *,
    before: float | None,
    at: float,
) -> int:
    """Expire the archived turns ``where`` picks that ended before ``before``; how many.

    ``before`` None expires every one it picks (the turns a retention compaction just
    moved out, which may predate the timestamps).

    Runs inside the caller's transaction.
    """
    rows = conn.execute(
        "SELECT session, generation, turn_id, record FROM archived_turns"
        f" WHERE {where} AND {_UNEXPIRED}" + ("" if before is None else f" AND {_ENDED_BEFORE}"),
        args if before is None else (*args, before),
    ).fetchall()
    return scrub_archived(conn.execute, rows, at, "?")


def expired_sessions(conn: sqlite3.Connection, agent: str, before: float) -> list[str]:
    """The ids of the agent's sessions with a live turn or a summary older than ``before``."""
    rows = conn.execute(
        "SELECT s.session_id FROM sessions s WHERE s.agent = ? AND (s.summary_since < ?"
        " OR EXISTS (SELECT 1 FROM turns t WHERE t.session = s.id"
        " AND json_extract(t.record, '$.ended_at') < ?))"
        " ORDER BY s.session_id",
        (agent, before, before),
    )
    return [session_id for (session_id,) in rows]


def crowded_sessions(conn: sqlite3.Connection, agent: str, more_than: int) -> list[str]:
    """The ids of the agent's sessions holding more than ``more_than`` live turns."""
    rows = conn.execute(
        "SELECT s.session_id FROM sessions s JOIN turns t ON t.session = s.id"
        " WHERE s.agent = ? GROUP BY s.id HAVING count(*) > ? ORDER BY s.session_id",
        (agent, more_than),
    )
    return [session_id for (session_id,) in rows]
