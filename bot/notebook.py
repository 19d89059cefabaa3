"""Notebooks kept by the local tools, in the store's own database and dialect.

A note is written through ``ctx.store`` inside the call's transaction, so it
commits exactly once, with the step. The SQL is the store's own: SQLite takes
``?`` and orders by its implicit rowid, PostgreSQL takes ``%s`` and orders by an
identity column (the handle's ``paramstyle`` tells which).
"""

from __future__ import annotations

from typing import Literal

from agent import StoreHandle, ToolContext

__all__ = ["Notebook"]


class Notebook:
    """The notes of a table, one book per key (a session's, a channel's)."""

    def __init__(self, table: Literal["notes", "channel_notes"], key: str) -> None:
        self._table = table
        self._key = key  # a column name of ours, never a person's text

    def _store(self, ctx: ToolContext) -> tuple[StoreHandle, str]:
        store = ctx.store
        if store.paramstyle == "qmark":
            store.execute(
                f"CREATE TABLE IF NOT EXISTS {self._table}"
                f" ({self._key} TEXT NOT NULL, note TEXT NOT NULL)"
            )
            return store, "?"
        store.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} (id bigint GENERATED ALWAYS AS IDENTITY,"
            f" {self._key} text NOT NULL, note text NOT NULL)"
        )
        return store, "%s"

    def add(self, ctx: ToolContext, book: str, note: str) -> int:
        """Keep ``note`` in ``book``; how many notes the book holds now."""
        store, mark = self._store(ctx)
        store.execute(
            f"INSERT INTO {self._table} ({self._key}, note) VALUES ({mark}, {mark})", [book, note]
        )
        [(count,)] = store.execute(
            f"SELECT count(*) FROM {self._table} WHERE {self._key} = {mark}", [book]
        )
        return int(count)

    def read(self, ctx: ToolContext, book: str) -> list[str]:
        """Every note of ``book``, oldest first."""
        store, mark = self._store(ctx)
        order = "rowid" if mark == "?" else "id"
        rows = store.execute(
            f"SELECT note FROM {self._table} WHERE {self._key} = {mark} ORDER BY {order}", [book]
        )
        return [str(note) for (note,) in rows]
