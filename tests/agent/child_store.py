"""How a crash test's child opens its store: a SQLite file's path, or a database URL."""

from __future__ import annotations

from agent import MemoryStore, SQLiteStore, open_store
from agent.stores.postgres import PostgresStore


async def open_child_store(where: str) -> SQLiteStore | PostgresStore:
    """The store at ``where``: a ``postgresql://`` URL, else a SQLite file's path."""
    if "://" not in where:
        return await SQLiteStore.open(where)
    store = await open_store(where)
    assert not isinstance(store, MemoryStore), "a crash test needs a store that outlives it"
    return store
