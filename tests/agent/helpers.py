"""Small helpers shared by the engine tests."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from agent import AssistantMessage, ModelRequest, ToolMessage


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
