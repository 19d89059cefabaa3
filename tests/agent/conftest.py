from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent import MemoryStore, SQLiteStore
from agent.stores.postgres import PostgresStore


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def store(
    request: pytest.FixtureRequest, tmp_path
) -> AsyncIterator[SQLiteStore | MemoryStore | PostgresStore]:
    """Every store, for every rule that holds on all of them."""
    if request.param == "sqlite":
        s = await SQLiteStore.open(tmp_path / "sessions.db")
        yield s
        await s.close()
    elif request.param == "postgres":
        p = await PostgresStore.open(request.getfixturevalue("postgres_url"))
        yield p
        await p.close()
    else:
        yield MemoryStore()


@pytest.fixture
async def sqlite_store(tmp_path) -> AsyncIterator[SQLiteStore]:
    s = await SQLiteStore.open(tmp_path / "sessions.db")
    yield s
    await s.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def tx_store(
    request: pytest.FixtureRequest, tmp_path
) -> AsyncIterator[SQLiteStore | PostgresStore]:
    """Every store that lends a local tool its transaction."""
    if request.param == "sqlite":
        s: SQLiteStore | PostgresStore = await SQLiteStore.open(tmp_path / "sessions.db")
    else:
        s = await PostgresStore.open(request.getfixturevalue("postgres_url"))
    yield s
    await s.close()
