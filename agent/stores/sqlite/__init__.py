"""The SQLite session store (through aiosqlite): the embedded default.

Every transaction is one function run on the connection thread (`_connection`),
so the statements of two sessions never interleave inside a transaction, and a
local tool runs inside its step's transaction on that same thread. Only
``_connection`` imports aiosqlite. The other modules, by what they own:

``_schema``     the migrations, how rowids pack a session and an index, numbering
``_commits``    a commit's transaction: checks, writes, archive, the tool's handle
``_writes``     leases, delivery states, the event log, place policies
``_reads``      every read
``_store``      `SQLiteStore`, whose methods queue those functions on the thread
"""

from __future__ import annotations

from agent.stores.sqlite._store import SQLiteStore

__all__ = ["SQLiteStore"]
