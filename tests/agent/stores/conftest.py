"""Every store the contract suite runs against, by name: adding a store is one line.

As dbos's suite does with ``using_sqlite()``, a test that holds for one store only
asks `store_kind` and skips the others, so the contract stays one file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from agent import MemoryStore, SQLiteStore
from agent.stores.postgres import PostgresStore
from tests.agent.stores.rows import Store


async def _memory(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore()


async def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return await SQLiteStore.open(tmp_path / "contract.db")


async def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    # a schema of the test's own on the run's server (tests/postgres_server.py)
    return await PostgresStore.open(request.getfixturevalue("postgres_url"))


STORES: dict[str, Callable[[pytest.FixtureRequest, Path], Awaitable[Store]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "postgres": _postgres,
}


@pytest.fixture(params=sorted(STORES))
def store_kind(request: pytest.FixtureRequest) -> str:
    """The name of the store this run of a test is given."""
    return str(request.param)


@pytest.fixture
async def store(
    store_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Store]:
    """A fresh, empty store of each kind."""
    opened = await STORES[store_kind](request, tmp_path)
    yield opened
    await opened.close()
