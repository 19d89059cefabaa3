"""Opening a session store from a ``DATABASE_URL``."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agent.errors import ConfigError
from agent.stores._memory import MemoryStore
from agent.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from agent.stores.postgres import PostgresStore

__all__ = ["database_path", "describe_database", "open_store"]

_SERVER_SCHEMES = ("postgresql", "postgres")
"""``postgres://`` is what Heroku, Render and Railway hand out; libpq reads both."""


def _is_server(url: str) -> bool:
    return urlsplit(url).scheme in _SERVER_SCHEMES


def database_path(url: str) -> str | None:
    """The SQLite file a ``DATABASE_URL`` names; ``None`` for ``memory://`` or a server.

    ``sqlite:///data/bot.db`` is relative to the working folder and
    ``sqlite:////var/lib/bot.db`` is absolute, as in SQLAlchemy.
    ``postgresql://user:password@host:5432/db`` (or ``postgres://``) is a PostgreSQL
    server, for replicas on one database.

    Raises:
        ConfigError: The URL is not one we can open, with what was expected.
    """
    if url in ("memory://", "memory:"):
        return None
    parts = urlsplit(url)
    if parts.scheme in _SERVER_SCHEMES:
        return None
    if parts.scheme != "sqlite" or parts.netloc or not url.startswith("sqlite:///"):
        # the scheme alone: a server URL may carry a password
        got = f"a {parts.scheme}:// URL" if parts.scheme else "no URL scheme"
        raise ConfigError(
            "DATABASE_URL must look like sqlite:///path/to/file.db, "
            f"postgresql://user:password@host/db or memory://, got {got}"
        )
    path = url[len("sqlite:///") :]
    if not path or path.endswith("/"):
        raise ConfigError(f"DATABASE_URL names no file: {url!r}")
    return path


def describe_database(url: str) -> str:
    """Where a ``DATABASE_URL`` keeps sessions, fit to print: never a password."""
    if _is_server(url):
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{user}{parts.hostname or ''}{port}{parts.path}"
    return database_path(url) or "memory"


async def open_store(url: str) -> SQLiteStore | MemoryStore | PostgresStore:
    """Open the store a ``DATABASE_URL`` names; close it when done."""
    if _is_server(url):
        # psycopg is imported only by a process that uses it
        from agent.stores.postgres import PostgresStore

        return await PostgresStore.open(url)
    path = database_path(url)
    if path is None:
        return MemoryStore()
    return await SQLiteStore.open(path)
