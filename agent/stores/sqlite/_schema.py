"""The file's layout: its migrations, how rowids pack a session and an index, numbering.

Every SQL text that spells the layout's tricks lives with it: a message's or an
event's rowid is its address (see the first migration), and the status sets of
`agent.stores._rules` are spelled here exactly as the partial indexes are, so
that SQLite reads the index.
"""

from __future__ import annotations

import sqlite3
from typing import Final, Literal

from agent.core.records import SessionKey
from agent.errors import StoreError

__all__ = [
    "LOW",
    "MIGRATIONS",
    "TABLES",
    "SessionIds",
    "Synchronous",
    "address",
    "configure",
    "counts_as_a_session",
    "low_of",
    "span",
    "status_in",
]

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
    # suspended turns are found at start-up, to expire the requests nobody answered
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
    # work handed to a session's owner by a process that does not hold it; keyed by name
    # as leases are, so posting makes no session; one item per kind and ref (a Slack
    # event redelivered to two processes is one start)
    """
    CREATE TABLE inbox (
        id INTEGER PRIMARY KEY,
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        ref TEXT NOT NULL,
        body TEXT NOT NULL,
        at REAL NOT NULL,
        UNIQUE (agent, session_id, kind, ref)
    );
    """,
    # why a session is held (an operator's interrupt, a poison turn): its queued turns
    # wait until the hold is released
    """
    ALTER TABLE sessions ADD COLUMN hold TEXT;
    """,
    # compaction moves a session's oldest turns into the archive of its generation: the
    # live messages start at ``base``, a summary stands for the rest, and new turns
    # number above ``compacted_through``
    """
    ALTER TABLE sessions ADD COLUMN base INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN summary TEXT;
    ALTER TABLE sessions ADD COLUMN compacted_through INTEGER NOT NULL DEFAULT 0;
    """,
    # when the oldest turn a summary speaks of ended: the summary expires with it
    """
    ALTER TABLE sessions ADD COLUMN summary_since REAL;
    """,
    # whether a turn id was archived is asked by id, not by generation
    """
    CREATE INDEX archived_turns_by_id ON archived_turns (session, turn_id);
    """,
    # what people said of a turn's reply: one row per person and turn, keyed by name as
    # leases are, so feedback makes no session; read back by when it was given
    """
    CREATE TABLE feedback (
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        given_by TEXT NOT NULL,
        rating TEXT NOT NULL,
        comment TEXT,
        at REAL NOT NULL,
        PRIMARY KEY (agent, session_id, turn_id, given_by)
    ) WITHOUT ROWID;
    CREATE INDEX feedback_at ON feedback (at);
    """,
)

TABLES: Final = frozenset(
    {
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
        "inbox",
        "feedback",
    }
)
"""Our tables, as `SQLiteStore.dump_table` may read them."""


def configure(conn: sqlite3.Connection, synchronous: Synchronous) -> None:
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


LOW = (1 << 32) - 1
"""The largest transcript index or log position a packed rowid holds."""


def address(sid: int, low: int) -> int:
    """The rowid of a message or event: the session's number high, its index or position low."""
    return sid << 32 | low


def low_of(rowid: int) -> int:
    """The transcript index or log position a packed rowid holds."""
    return rowid & LOW


def span(sid: int) -> tuple[int, int]:
    """The first and last rowid session ``sid``'s messages or events may have."""
    return address(sid, 0), address(sid, LOW)


def status_in(column: str, statuses: frozenset[str]) -> str:
    """SQL that ``column`` holds one of ``statuses``, spelled as the partial indexes are.

    SQLite uses a partial index only for a query whose WHERE repeats the index's
    own term: ``status IN ('queued', 'running')`` (sorted) for turns_unfinished,
    and ``status = 'suspended'`` for turns_suspended, where ``IN ('suspended')``
    would scan every turn.
    """
    if len(statuses) == 1:
        [status] = statuses
        return f"{column} = '{status}'"
    return f"{column} IN (" + ", ".join(f"'{status}'" for status in sorted(statuses)) + ")"


def counts_as_a_session(session: str) -> str:
    """SQL for `_rules.counts_as_a_session` about the session numbered ``session``.

    True when it holds a turn or was reset; both lookups use the leading column
    of a key, so neither reads more than one entry.
    """
    return (
        f"(EXISTS (SELECT 1 FROM turns WHERE session = {session})"
        f" OR (SELECT generation FROM sessions WHERE id = {session}) > 0)"
    )


class SessionIds:
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
