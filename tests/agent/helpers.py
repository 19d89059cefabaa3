"""Small helpers shared by the engine tests."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from agent import AssistantMessage, ModelRequest, SQLiteStore, StoreHandle, ToolMessage
from agent.stores.postgres import PostgresStore


def assistant_count(request: ModelRequest) -> int:
    """How many model replies this turn's session already committed."""
    return sum(1 for m in request.messages if isinstance(m, AssistantMessage))


def last_tool_results(request: ModelRequest) -> list[ToolMessage]:
    out: list[ToolMessage] = []
    for m in reversed(request.messages):
        if not isinstance(m, ToolMessage):
            break
        out.append(m)
    return list(reversed(out))


def read_only(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Query a database a killed process left, without checkpointing its WAL."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return conn.execute(sql).fetchall()


def mark(handle: StoreHandle) -> str:
    """The placeholder a store handle's SQL takes."""
    return "?" if handle.paramstyle == "qmark" else "%s"


async def select(store: SQLiteStore | PostgresStore, sql: str) -> list[tuple[Any, ...]]:
    """The rows of a query run on the store's own connection (a test's look inside)."""
    return await store._run(lambda conn: conn.execute(sql).fetchall())


async def has_table(store: SQLiteStore | PostgresStore, name: str) -> bool:
    """Whether the store's database holds a table ``name``."""
    if isinstance(store, SQLiteStore):
        query = f"SELECT name FROM sqlite_master WHERE name = '{name}'"
    else:
        query = f"SELECT 1 WHERE to_regclass('{name}') IS NOT NULL"
    return bool(await select(store, query))
