from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent import MemoryStore, SQLiteStore


@pytest.fixture(params=["sqlite", "memory"])
async def store(
    request: pytest.FixtureRequest, tmp_path
) -> AsyncIterator[SQLiteStore | MemoryStore]:
    """Both stores, for every rule that holds on both."""
    if request.param == "sqlite":
        s = await SQLiteStore.open(tmp_path / "sessions.db")
        yield s
        await s.close()
    else:
        yield MemoryStore()


@pytest.fixture
async def sqlite_store(tmp_path) -> AsyncIterator[SQLiteStore]:
    s = await SQLiteStore.open(tmp_path / "sessions.db")
    yield s
    await s.close()
