"""Every read of the SQLite store: one function each, run on the connection thread.

None of them creates a row: a session the store never wrote reads as empty.
Stored JSON is parsed where it always was, here for the session and its
archive, in `SQLiteStore` for the rest, so the connection thread does no more
work than before the split.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from agent._json import JsonValue, loads
from agent.core.messages import MESSAGES_ADAPTER
from agent.core.records import Archive, LogBounds, SessionKey, StoredSession
from agent.core.transcript import Transcript
from agent.core.turns import TURN_RECORD_ADAPTER, TurnRecord
from agent.stores._rules import FEEDBACK_COLUMNS
from agent.stores.sqlite._schema import (
    SessionIds,
    address,
    counts_as_a_session,
    low_of,
    span,
    status_in,
)

__all__ = [
    "cancelled_suspensions",
    "deliveries",
    "event_bounds",
    "feedback_since",
    "has_session",
    "inbox_sessions",
    "is_archived",
    "list_sessions",
    "load",
    "load_archive",
    "load_delivery",
    "load_steps",
    "pending_resets",
    "place_policies",
    "read_events",
    "read_inbox",
    "turns_in",
]


def load(conn: sqlite3.Connection, ids: SessionIds, key: SessionKey) -> StoredSession:
    sid = ids.find(conn, key)
    if sid is None:
        return StoredSession()
    (status, generation, reset_through, hold, base, summary, compacted_through, since) = (
        conn.execute(
            "SELECT status, generation, reset_through, hold, base, summary, compacted_through,"
            " summary_since FROM sessions WHERE id = ?",
            (sid,),
        ).fetchone()
    )
    bodies = conn.execute(
        "SELECT body FROM messages WHERE id BETWEEN ? AND ? ORDER BY id", span(sid)
    ).fetchall()
    records = conn.execute(
        "SELECT record, cancel FROM turns WHERE session = ? ORDER BY seq", (sid,)
    ).fetchall()
    transcript = Transcript(
        MESSAGES_ADAPTER.validate_json("[" + ",".join(b for (b,) in bodies) + "]"), base=base
    )
    turns = {}
    cancels = {}
    for body, cancel in records:
        record = TURN_RECORD_ADAPTER.validate_json(body)
        turns[record.turn_id] = record
        if cancel is not None:
            cancels[record.turn_id] = cancel
    retired = set()
    if generation:
        rows = conn.execute(
            "SELECT turn_id FROM archived_turns WHERE session = ? AND generation < ?",
            (sid, generation),
        )
        retired = {turn_id for (turn_id,) in rows}
    return StoredSession(
        status=status,
        transcript=transcript,
        turns=turns,
        cancels=cancels,
        generation=generation,
        reset_through=reset_through,
        retired=retired,
        hold=hold,
        summary=summary,
        compacted_through=compacted_through,
        summary_since=since,
    )


def load_archive(
    conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, generation: int
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


def load_steps(
    conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, turn_id: str
) -> dict[str, JsonValue]:
    sid = ids.find(conn, key)
    rows = conn.execute(
        "SELECT step_id, result FROM steps WHERE session = ? AND turn_id = ?", (sid, turn_id)
    ).fetchall()
    return {step_id: loads(result) for step_id, result in rows}


def turns_in(
    conn: sqlite3.Connection, statuses: frozenset[str]
) -> list[tuple[SessionKey, TurnRecord]]:
    # spelled as the partial indexes turns_unfinished and turns_suspended are, so
    # SQLite reads the index instead of every turn (a test checks the plan)
    rows = conn.execute(
        "SELECT s.agent, s.session_id, t.record FROM turns AS t JOIN sessions AS s"
        f" ON s.id = t.session WHERE {status_in('t.status', statuses)}"
        " ORDER BY s.agent, s.session_id, t.seq"
    ).fetchall()
    return [
        (SessionKey(agent, sid), TURN_RECORD_ADAPTER.validate_json(body))
        for agent, sid, body in rows
    ]


def cancelled_suspensions(conn: sqlite3.Connection) -> list[SessionKey]:
    rows = conn.execute(
        "SELECT DISTINCT s.agent, s.session_id FROM turns AS t JOIN sessions AS s"
        " ON s.id = t.session WHERE t.status = 'suspended' AND t.cancel IS NOT NULL"
    ).fetchall()
    return [SessionKey(agent, session_id) for agent, session_id in rows]


def pending_resets(conn: sqlite3.Connection) -> list[SessionKey]:
    rows = conn.execute(
        "SELECT agent, session_id FROM sessions WHERE reset_through IS NOT NULL"
    ).fetchall()
    return [SessionKey(agent, session_id) for agent, session_id in rows]


def place_policies(conn: sqlite3.Connection, source: str) -> list[tuple[str, str]]:
    return conn.execute(
        "SELECT place, policy FROM place_policies WHERE source = ?", (source,)
    ).fetchall()


def feedback_since(
    conn: sqlite3.Connection, since: float, agent: str | None
) -> list[tuple[Any, ...]]:
    # by the feedback_at index; an agent is one of few, filtered as read
    return conn.execute(
        f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE at >= ? AND (? IS NULL OR agent = ?)"
        " ORDER BY at DESC",
        (since, agent, agent),
    ).fetchall()


def has_session(conn: sqlite3.Connection, ids: SessionIds, key: SessionKey) -> bool:
    sid = ids.find(conn, key)
    if sid is None:
        return False
    [(exists,)] = conn.execute(f"SELECT {counts_as_a_session('?')}", (sid, sid))
    return bool(exists)


def deliveries(conn: sqlite3.Connection, agent: str) -> list[tuple[str, str, str]]:
    return conn.execute(
        "SELECT s.session_id, d.turn_id, d.state FROM deliveries AS d"
        " JOIN sessions AS s ON s.id = d.session WHERE s.agent = ?",
        (agent,),
    ).fetchall()


def load_delivery(
    conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, turn_id: str
) -> JsonValue | None:
    sid = ids.find(conn, key)
    row = None
    if sid is not None:
        row = conn.execute(
            "SELECT state FROM deliveries WHERE session = ? AND turn_id = ?", (sid, turn_id)
        ).fetchone()
    return loads(row[0]) if row else None


def read_events(
    conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, after: int, limit: int
) -> list[tuple[int, str]]:
    sid = ids.find(conn, key)
    if sid is None:
        return []
    rows = conn.execute(
        "SELECT id, body FROM events WHERE id > ? AND id < ? ORDER BY id LIMIT ?",
        (address(sid, after), address(sid + 1, 0), limit),
    ).fetchall()
    return [(low_of(row_id), body) for row_id, body in rows]


def event_bounds(conn: sqlite3.Connection, ids: SessionIds, key: SessionKey) -> LogBounds:
    sid = ids.find(conn, key)
    if sid is None:
        return LogBounds(first=1, last=0)
    [(last,)] = conn.execute("SELECT last_event FROM sessions WHERE id = ?", (sid,))
    [(first,)] = conn.execute(
        "SELECT min(id) FROM events WHERE id > ? AND id < ?",
        (address(sid, 0), address(sid + 1, 0)),
    )
    return LogBounds(first=last + 1 if first is None else low_of(first), last=last)


def list_sessions(conn: sqlite3.Connection, agent: str, prefix: str) -> list[tuple[Any, ...]]:
    """Each session's id, status, last event, newest event's time and first turn's record."""
    return conn.execute(
        "SELECT s.session_id, s.status, s.last_event,"
        " (SELECT max(at) FROM events WHERE id > (s.id << 32) AND id < ((s.id + 1) << 32)),"
        " (SELECT record FROM turns WHERE session = s.id ORDER BY seq LIMIT 1)"
        " FROM sessions AS s WHERE s.agent = ? AND substr(s.session_id, 1, ?) = ?"
        f" AND {counts_as_a_session('s.id')}",
        (agent, len(prefix), prefix),
    ).fetchall()


def read_inbox(conn: sqlite3.Connection, key: SessionKey) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, kind, ref, body, at FROM inbox WHERE agent = ? AND session_id = ? ORDER BY id",
        (key.agent, key.session_id),
    ).fetchall()


def inbox_sessions(conn: sqlite3.Connection) -> list[SessionKey]:
    rows = conn.execute("SELECT DISTINCT agent, session_id FROM inbox ORDER BY 1, 2").fetchall()
    return [SessionKey(agent, session_id) for agent, session_id in rows]


def is_archived(conn: sqlite3.Connection, ids: SessionIds, key: SessionKey, turn_id: str) -> bool:
    sid = ids.find(conn, key)
    if sid is None:
        return False
    row = conn.execute(
        "SELECT 1 FROM archived_turns WHERE session = ? AND turn_id = ? LIMIT 1", (sid, turn_id)
    ).fetchone()
    return row is not None
