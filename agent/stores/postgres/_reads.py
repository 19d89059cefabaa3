"""Every read of the PostgreSQL store: one function each, run on a pool thread.

None of them makes a row. A read of several tables (a session, an archive)
runs in one REPEATABLE READ snapshot, so it never sees half of a commit that
another replica made between two of its statements.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agent._json import JsonValue, loads
from agent.core.messages import MESSAGES_ADAPTER
from agent.core.records import Archive, LogBounds, SessionKey, StoredSession
from agent.core.transcript import Transcript
from agent.core.turns import TURN_RECORD_ADAPTER, TurnRecord
from agent.stores._rules import FEEDBACK_COLUMNS
from agent.stores.postgres._schema import Conn, SessionIds

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


@contextmanager
def _snapshot(conn: Conn) -> Iterator[None]:
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _as_list(bodies: list[tuple[Any, ...]]) -> str:
    return "[" + ",".join(b for (b,) in bodies) + "]"


def load(conn: Conn, ids: SessionIds, key: SessionKey) -> StoredSession:
    sid = ids.find(conn, key)
    if sid is None:
        return StoredSession()
    with _snapshot(conn):
        (status, generation, reset_through, hold, base, summary, compacted_through, since) = (
            conn.execute(
                "SELECT status, generation, reset_through, hold, base, summary,"
                " compacted_through, summary_since FROM sessions WHERE id = %s",
                (sid,),
            ).fetchone()
            or ("new", 0, None, None, 0, None, 0, None)
        )
        bodies = conn.execute(
            "SELECT body FROM messages WHERE session = %s ORDER BY idx", (sid,)
        ).fetchall()
        records = conn.execute(
            "SELECT record, cancel FROM turns WHERE session = %s ORDER BY seq", (sid,)
        ).fetchall()
        retired: set[str] = set()
        if generation:
            rows = conn.execute(
                "SELECT turn_id FROM archived_turns WHERE session = %s AND generation < %s",
                (sid, generation),
            )
            retired = {turn_id for (turn_id,) in rows}
    turns = {}
    cancels = {}
    for body, cancel in records:
        record = TURN_RECORD_ADAPTER.validate_json(body)
        turns[record.turn_id] = record
        if cancel is not None:
            cancels[record.turn_id] = cancel
    return StoredSession(
        status=status,
        transcript=Transcript(MESSAGES_ADAPTER.validate_json(_as_list(bodies)), base=base),
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


def load_archive(conn: Conn, ids: SessionIds, key: SessionKey, generation: int) -> Archive | None:
    sid = ids.find(conn, key)
    if sid is None:
        return None
    where = "WHERE session = %s AND generation = %s"
    with _snapshot(conn):
        bodies = conn.execute(
            f"SELECT body FROM archived_messages {where} ORDER BY idx", (sid, generation)
        ).fetchall()
        records = conn.execute(
            f"SELECT record FROM archived_turns {where} ORDER BY seq", (sid, generation)
        ).fetchall()
        step_rows = conn.execute(
            f"SELECT turn_id, step_id, result FROM archived_steps {where}", (sid, generation)
        ).fetchall()
    if not bodies and not records:
        return None
    steps: dict[str, dict[str, JsonValue]] = {}
    for turn_id, step_id, result in step_rows:
        steps.setdefault(turn_id, {})[step_id] = loads(result)
    turns = {}
    for (body,) in records:
        record = TURN_RECORD_ADAPTER.validate_json(body)
        turns[record.turn_id] = record
    return Archive(
        generation=generation,
        transcript=MESSAGES_ADAPTER.validate_json(_as_list(bodies)),
        turns=turns,
        steps=steps,
    )


def load_steps(conn: Conn, ids: SessionIds, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
    sid = ids.find(conn, key)
    if sid is None:
        return {}
    rows = conn.execute(
        "SELECT step_id, result FROM steps WHERE session = %s AND turn_id = %s", (sid, turn_id)
    ).fetchall()
    return {step_id: loads(result) for step_id, result in rows}


def turns_in(conn: Conn, statuses: frozenset[str]) -> list[tuple[SessionKey, TurnRecord]]:
    rows = conn.execute(
        "SELECT s.agent, s.session_id, t.record FROM turns AS t JOIN sessions AS s"
        " ON s.id = t.session WHERE t.status = ANY(%s)"
        " ORDER BY s.agent, s.session_id, t.seq",
        (sorted(statuses),),
    ).fetchall()
    return [
        (SessionKey(agent, sid), TURN_RECORD_ADAPTER.validate_json(body))
        for agent, sid, body in rows
    ]


def cancelled_suspensions(conn: Conn) -> list[SessionKey]:
    rows = conn.execute(
        "SELECT DISTINCT s.agent, s.session_id FROM turns AS t JOIN sessions AS s"
        " ON s.id = t.session WHERE t.status = 'suspended' AND t.cancel IS NOT NULL"
    ).fetchall()
    return [SessionKey(agent, session_id) for agent, session_id in rows]


def pending_resets(conn: Conn) -> list[SessionKey]:
    rows = conn.execute(
        "SELECT agent, session_id FROM sessions WHERE reset_through IS NOT NULL"
    ).fetchall()
    return [SessionKey(agent, session_id) for agent, session_id in rows]


def place_policies(conn: Conn, source: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT place, policy FROM place_policies WHERE source = %s", (source,)
    ).fetchall()


def feedback_since(conn: Conn, since: float, agent: str | None) -> list[tuple[Any, ...]]:
    return conn.execute(
        f"SELECT {FEEDBACK_COLUMNS} FROM feedback"
        " WHERE at >= %s AND (%s::text IS NULL OR agent = %s) ORDER BY at DESC",
        (since, agent, agent),
    ).fetchall()


_COUNTS_AS_A_SESSION = "(EXISTS (SELECT 1 FROM turns WHERE session = s.id) OR s.generation > 0)"
"""SQL for `_rules.counts_as_a_session` about the session row ``s``."""


def has_session(conn: Conn, ids: SessionIds, key: SessionKey) -> bool:
    sid = ids.find(conn, key)
    if sid is None:
        return False
    row = conn.execute(
        f"SELECT {_COUNTS_AS_A_SESSION} FROM sessions AS s WHERE s.id = %s", (sid,)
    ).fetchone()
    return bool(row and row[0])


def deliveries(conn: Conn, agent: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT s.session_id, d.turn_id, d.state FROM deliveries AS d"
        " JOIN sessions AS s ON s.id = d.session WHERE s.agent = %s",
        (agent,),
    ).fetchall()


def load_delivery(conn: Conn, ids: SessionIds, key: SessionKey, turn_id: str) -> JsonValue | None:
    sid = ids.find(conn, key)
    row = None
    if sid is not None:
        row = conn.execute(
            "SELECT state FROM deliveries WHERE session = %s AND turn_id = %s", (sid, turn_id)
        ).fetchone()
    return loads(row[0]) if row else None


def read_events(
    conn: Conn, ids: SessionIds, key: SessionKey, after: int, limit: int
) -> list[tuple[Any, ...]]:
    sid = ids.find(conn, key)
    if sid is None:
        return []
    return conn.execute(
        "SELECT position, body FROM events WHERE session = %s AND position > %s"
        " ORDER BY position LIMIT %s",
        (sid, after, limit),
    ).fetchall()


def event_bounds(conn: Conn, ids: SessionIds, key: SessionKey) -> LogBounds:
    sid = ids.find(conn, key)
    if sid is None:
        return LogBounds(first=1, last=0)
    with _snapshot(conn):
        row = conn.execute(
            "SELECT last_event, (SELECT min(position) FROM events WHERE session = %s)"
            " FROM sessions WHERE id = %s",
            (sid, sid),
        ).fetchone()
    last, first = row if row is not None else (0, None)
    return LogBounds(first=last + 1 if first is None else first, last=last)


def list_sessions(conn: Conn, agent: str, prefix: str) -> list[tuple[Any, ...]]:
    """Each session's id, status, last event, newest event's time and first turn's record."""
    return conn.execute(
        "SELECT s.session_id, s.status, s.last_event,"
        " (SELECT max(at) FROM events WHERE session = s.id),"
        " (SELECT record FROM turns WHERE session = s.id ORDER BY seq LIMIT 1)"
        " FROM sessions AS s WHERE s.agent = %s AND left(s.session_id, %s) = %s"
        f" AND {_COUNTS_AS_A_SESSION}",
        (agent, len(prefix), prefix),
    ).fetchall()


def read_inbox(conn: Conn, key: SessionKey) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, kind, ref, body, at FROM inbox WHERE agent = %s AND session_id = %s"
        " ORDER BY id",
        (key.agent, key.session_id),
    ).fetchall()


def inbox_sessions(conn: Conn) -> list[SessionKey]:
    rows = conn.execute("SELECT DISTINCT agent, session_id FROM inbox ORDER BY 1, 2").fetchall()
    return [SessionKey(agent, session_id) for agent, session_id in rows]


def is_archived(conn: Conn, ids: SessionIds, key: SessionKey, turn_id: str) -> bool:
    sid = ids.find(conn, key)
    if sid is None:
        return False
    row = conn.execute(
        "SELECT 1 FROM archived_turns WHERE session = %s AND turn_id = %s LIMIT 1",
        (sid, turn_id),
    ).fetchone()
    return row is not None
