"""The PostgreSQL session store (through psycopg 3): several replicas on one database.

Every transaction is one plain function run with a connection of psycopg's
pool, on a thread of the store's own (`_connection`), so a local tool runs
inside its step's transaction synchronously, as on SQLite. Only this package
imports psycopg. The modules, by what they own:

``_schema``     the migrations (run under an advisory lock), session numbers
``_commits``    a commit's transaction: the locked fence, writes, archive, the tool's handle
``_writes``     leases, delivery states, the event log, place policies
``_reads``      every read
``_liveness``   the advisory locks that show which lease holders are alive
``_wakeups``    NOTIFY after each log append commits, and the one LISTEN that wakes followers
``_store``      `PostgresStore`, whose methods run those functions
"""

from __future__ import annotations

from agent.stores.postgres._store import PostgresStore

__all__ = ["PostgresStore"]
