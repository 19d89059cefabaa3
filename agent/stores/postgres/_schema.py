"""The database's layout: its migrations, run under a lock, and how sessions are numbered.

Bodies are ``text``, byte for byte what the SQLite store keeps (``jsonb`` would
parse and reorder them for nothing). Every row of a session carries its number,
not the (agent, session id) text. `leases` stays keyed by name, so a lease never
makes a session row and `has_session` keeps its meaning.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from agent.core.records import SessionKey
from agent.errors import StoreError

__all__ = ["BREAKING", "MIGRATIONS", "MIGRATION_LOCK", "TABLES", "SessionIds", "migrate"]

Conn = psycopg.Connection[tuple[Any, ...]]

MIGRATION_LOCK: Final = 0x6167656E74  # "agent": one advisory lock id for every replica
"""Replicas of old and new code starting side by side migrate one at a time, once."""

# Each entry moves the schema from version i to i + 1. Append, never edit: a rolling
# deploy runs old and new code on one database, so a change adds before it removes.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        agent text NOT NULL,
        session_id text NOT NULL,
        status text NOT NULL,
        generation integer NOT NULL DEFAULT 0,
        reset_through integer,
        last_event bigint NOT NULL DEFAULT 0,
        UNIQUE (agent, session_id)
    );
    CREATE INDEX sessions_resetting ON sessions (id) WHERE reset_through IS NOT NULL;
    CREATE TABLE turns (
        session bigint NOT NULL REFERENCES sessions (id),
        turn_id text NOT NULL,
        seq integer NOT NULL,
        status text NOT NULL,
        record text NOT NULL,
        cancel text,
        PRIMARY KEY (session, turn_id)
    );
    CREATE INDEX turns_unfinished ON turns (session, seq) WHERE status IN ('queued', 'running');
    CREATE INDEX turns_suspended ON turns (session) WHERE status = 'suspended';
    CREATE TABLE messages (
        session bigint NOT NULL REFERENCES sessions (id),
        idx integer NOT NULL,
        turn_id text NOT NULL,
        role text NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (session, idx)
    );
    CREATE TABLE steps (
        session bigint NOT NULL REFERENCES sessions (id),
        turn_id text NOT NULL,
        step_id text NOT NULL,
        result text NOT NULL,
        PRIMARY KEY (session, turn_id, step_id)
    );
    CREATE TABLE archived_messages (
        session bigint NOT NULL REFERENCES sessions (id),
        generation integer NOT NULL,
        idx integer NOT NULL,
        turn_id text NOT NULL,
        role text NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (session, generation, idx)
    );
    CREATE TABLE archived_steps (
        session bigint NOT NULL REFERENCES sessions (id),
        generation integer NOT NULL,
        turn_id text NOT NULL,
        step_id text NOT NULL,
        result text NOT NULL,
        PRIMARY KEY (session, generation, turn_id, step_id)
    );
    CREATE TABLE archived_turns (
        session bigint NOT NULL REFERENCES sessions (id),
        generation integer NOT NULL,
        turn_id text NOT NULL,
        seq integer NOT NULL,
        status text NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (session, generation, turn_id)
    );
    CREATE TABLE deliveries (
        session bigint NOT NULL REFERENCES sessions (id),
        turn_id text NOT NULL,
        state text NOT NULL,
        PRIMARY KEY (session, turn_id)
    );
    CREATE TABLE leases (
        agent text NOT NULL,
        session_id text NOT NULL,
        holder text NOT NULL,
        until double precision NOT NULL,
        PRIMARY KEY (agent, session_id)
    );
    CREATE TABLE place_policies (
        source text NOT NULL,
        place text NOT NULL,
        policy text NOT NULL,
        PRIMARY KEY (source, place)
    );
    CREATE TABLE events (
        session bigint NOT NULL REFERENCES sessions (id),
        position bigint NOT NULL,
        at double precision NOT NULL,
        body text NOT NULL,
        PRIMARY KEY (session, position)
    );
    CREATE INDEX events_at ON events (at);
    """,
    # work handed to a session's owner by a replica that does not hold it; keyed by name
    # as leases are, so posting makes no session; one item per kind and ref (a Slack
    # event redelivered to two replicas is one start)
    """
    CREATE TABLE inbox (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        agent text NOT NULL,
        session_id text NOT NULL,
        kind text NOT NULL,
        ref text NOT NULL,
        body text NOT NULL,
        at double precision NOT NULL,
        UNIQUE (agent, session_id, kind, ref)
    );
    """,
    # why a session is held (an operator's interrupt, a poison turn): its queued turns
    # wait until the hold is released
    """
    ALTER TABLE sessions ADD COLUMN hold text;
    """,
    # compaction moves a session's oldest turns into the archive of its generation: the
    # live messages start at ``base``, a summary stands for the rest, and new turns
    # number above ``compacted_through`` (old replicas run beside it until an agent
    # compacts: turn compaction on once every replica runs this code)
    """
    ALTER TABLE sessions ADD COLUMN base bigint NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN summary text;
    ALTER TABLE sessions ADD COLUMN compacted_through bigint NOT NULL DEFAULT 0;
    """,
    # when the oldest turn a summary speaks of ended: the summary expires with it
    """
    ALTER TABLE sessions ADD COLUMN summary_since double precision;
    """,
    # whether a turn id was archived is asked by id, not by generation
    """
    CREATE INDEX archived_turns_by_id ON archived_turns (session, turn_id);
    """,
    # what people said of a turn's reply: one row per person and turn, keyed by name as
    # leases are, so feedback makes no session; read back by when it was given
    """
    CREATE TABLE feedback (
        agent text NOT NULL,
        session_id text NOT NULL,
        turn_id text NOT NULL,
        given_by text NOT NULL,
        rating text NOT NULL,
        comment text,
        at double precision NOT NULL,
        PRIMARY KEY (agent, session_id, turn_id, given_by)
    );
    CREATE INDEX feedback_at ON feedback (at);
    """,
)

BREAKING: Final[frozenset[int]] = frozenset()
"""The migrations (numbered from 1) after which code that knows fewer cannot run on the
database. None so far: each change only adds, so old and new replicas run side by side.
A change that removes or renames must first ship code that no longer needs the old
shape, then the migration, listed here."""

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
        "place_policies",
        "events",
        "inbox",
        "feedback",
    }
)
"""Our tables, as `PostgresStore.dump_table` may read them."""


def migrate(conn: Conn) -> None:
    """Bring the schema up to date, each migration in one transaction, under one lock.

    A rolling deploy runs old and new code on one database: a schema newer than
    this code is used as it is, unless a migration since was one older code cannot
    run beside (`BREAKING`); the database keeps the oldest code that may.

    Raises:
        StoreError: The database was migrated by newer code this one cannot run beside.
    """
    with conn.transaction():
        # transactional DDL and a lock held to the end: a replica starting beside
        # this one waits here, then finds the work done
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version"
            " (version integer NOT NULL, oldest_code integer NOT NULL DEFAULT 0)"
        )
        row = conn.execute("SELECT version, oldest_code FROM schema_version").fetchone()
        version, oldest = row if row else (0, 0)
        known = len(MIGRATIONS)
        if oldest > known:
            raise StoreError(
                f"database schema version {version} needs code that knows at least "
                f"{oldest} migrations, and this code knows {known}; run a newer release"
            )
        if version >= known:
            return  # up to date, or newer and still fit for this code
        for script in MIGRATIONS[version:]:
            conn.execute(script.encode())
        oldest = max([oldest, *(n for n in BREAKING if n <= known)])
        conn.execute("DELETE FROM schema_version")
        conn.execute(
            "INSERT INTO schema_version (version, oldest_code) VALUES (%s, %s)", (known, oldest)
        )


class SessionIds:
    """Numbers sessions, remembering those whose row is committed.

    Read by every pool thread; a number is remembered only once the transaction
    that made it committed, so no thread ever uses one a rollback took back.
    """

    def __init__(self) -> None:
        self._ids: dict[SessionKey, int] = {}

    def find(self, conn: Conn, key: SessionKey) -> int | None:
        found = self._ids.get(key)
        if found is None:
            row = conn.execute(
                "SELECT id FROM sessions WHERE agent = %s AND session_id = %s",
                (key.agent, key.session_id),
            ).fetchone()
            if row is not None:
                found = row[0]
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    self._ids[key] = found
        return found

    def ensure(self, conn: Conn, key: SessionKey) -> int:
        """The session's number, making its row if it has none (inside a transaction)."""
        found = self.find(conn, key)
        if found is not None:
            return found
        row = conn.execute(
            "INSERT INTO sessions (agent, session_id, status) VALUES (%s, %s, 'new')"
            " ON CONFLICT (agent, session_id) DO UPDATE SET agent = excluded.agent"
            " RETURNING id",
            (key.agent, key.session_id),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def remember(self, key: SessionKey, sid: int) -> None:
        """Keep a number whose row is committed."""
        self._ids[key] = sid
