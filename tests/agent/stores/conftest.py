"""Every store the contract suite runs against, by name: adding a store is one line.

As dbos's suite does with ``using_sqlite()``, a test that holds for one store only
asks `store_kind` and skips the others, so the contract stays one file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from agent import MemoryStore, SQLiteStore
from tests.agent.stores.rows import Store


async def _memory(tmp_path: Path) -> Store:
    return MemoryStore()


async def _sqlite(tmp_path: Path) -> Store:
    return await SQLiteStore.open(tmp_path / "contract.db")


STORES: dict[str, Callable[[Path], Awaitable[Store]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
}


@pytest.fixture(params=sorted(STORES))
def store_kind(request: pytest.FixtureRequest) -> str:
    """The name of the store this run of a test is given."""
    return str(request.param)


@pytest.fixture
async def store(store_kind: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of each kind."""
    opened = await STORES[store_kind](tmp_path)
    yield opened
    await opened.close()
