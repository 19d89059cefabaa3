"""Opening a session store from a ``DATABASE_URL``."""

from __future__ import annotations

from urllib.parse import urlsplit

from agent.errors import ConfigError
from agent.stores._memory import MemoryStore
from agent.stores.sqlite import SQLiteStore

__all__ = ["database_path", "open_store"]


def database_path(url: str) -> str | None:
    """The file a ``DATABASE_URL`` names, or ``None`` for ``memory://``.

    ``sqlite:///data/bot.db`` is relative to the working folder and
    ``sqlite:////var/lib/bot.db`` is absolute, as in SQLAlchemy.

    Raises:
        ConfigError: The URL is not one we can open, with what was expected.
    """
    if url in ("memory://", "memory:"):
        return None
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or not url.startswith("sqlite:///"):
        # the scheme alone: a server URL may carry a password
        got = f"a {parts.scheme}:// URL" if parts.scheme else "no URL scheme"
        raise ConfigError(
            f"DATABASE_URL must look like sqlite:///path/to/file.db (or memory://), got {got}"
        )
    path = url[len("sqlite:///") :]
    if not path or path.endswith("/"):
        raise ConfigError(f"DATABASE_URL names no file: {url!r}")
    return path


async def open_store(url: str) -> SQLiteStore | MemoryStore:
    """Open the store a ``DATABASE_URL`` names; close it when done."""
    path = database_path(url)
    if path is None:
        return MemoryStore()
    return await SQLiteStore.open(path)
