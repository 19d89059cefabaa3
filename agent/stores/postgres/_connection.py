"""The connection pool and the threads that use it: every transaction is one plain function.

Like the SQLite store's single connection thread, but many: a store call borrows
a connection from psycopg's pool and runs one function with it on a thread of
our own executor, sized to the pool (`asyncio.to_thread`'s shared executor has
six threads on two cores, which would cap concurrent transactions at six). A
local tool's statements then run inside the step's transaction on that thread,
synchronously, as they do on SQLite. Connections are in autocommit, so the
functions open each transaction themselves with ``conn.transaction()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

import psycopg
import psycopg_pool

from agent.errors import StoreError

__all__ = ["Pool", "redacted"]

T = TypeVar("T")

CONNECTION_WAIT = 30.0
"""Seconds a transaction waits for a pooled connection (all busy, or the server away)."""
CLOSE_GRACE = 3.0
"""Seconds a closing store gives the calls under way before it refuses the rest."""

logger = logging.getLogger("agent")


def redacted(url: str) -> str:
    """The URL with any password taken out, for messages and logs."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "a PostgreSQL URL"
    host = info.get("host", "localhost")
    port = info.get("port", "5432")
    user = f"{info['user']}@" if info.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{info.get('dbname', '')}"


class Pool:
    """Connections to one database, and the threads that run a function with one each."""

    def __init__(self, url: str, size: int) -> None:
        self.url = url
        self.where = redacted(url)
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=size,
            kwargs={"autocommit": True},
            # a connection the server dropped (a restart, a failover) is replaced, not lent
            check=psycopg_pool.ConnectionPool.check_connection,
            open=False,
            name="agent-store",
        )
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="agent-pg")
        self._is_closed = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @classmethod
    async def open(cls, url: str, size: int) -> Self:
        """Connect to the database at ``url``.

        Raises:
            StoreError: The server cannot be reached, with the URL's password left out.
        """
        pool = cls(url, size)
        try:
            # one plain connection first: a server that refuses says why at once,
            # where the pool would retry until its timeout
            await pool.call(pool._probe)
            await pool.call(lambda: pool._pool.open(wait=True, timeout=15.0))
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            await pool.close()
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"cannot connect to PostgreSQL at {pool.where}: {reason}") from exc
        return pool

    def _probe(self) -> None:
        with psycopg.connect(self.url, **self._connect_timeout()) as conn:
            conn.execute("SELECT 1")

    def _connect_timeout(self) -> dict[str, Any]:
        given = psycopg.conninfo.conninfo_to_dict(self.url)
        # libpq waits forever for a host that never answers unless told, psycopg's
        # async connect 130 s
        return {} if "connect_timeout" in given else {"connect_timeout": 10}

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on one of the pool's threads."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` on a pool thread, with a connection borrowed for the call.

        Raises:
            StoreError: PostgreSQL raised (the message starts ``PostgreSQL:``), or
                the store is closed.
        """
        if self._is_closed:
            raise StoreError(f"the store at {self.where} is closed")
        self._in_flight += 1
        self._idle.clear()
        try:
            return await self.call(self._with_connection, fn, args)
        except RuntimeError as exc:
            if self._is_closed:  # the executor refuses work once shut down
                raise StoreError(f"the store at {self.where} is closed") from exc
            raise
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    def _with_connection(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            with self._pool.connection(timeout=CONNECTION_WAIT) as conn:
                return fn(conn, *args)
        except psycopg_pool.PoolClosed as exc:
            raise StoreError(f"the store at {self.where} is closed") from exc
        except psycopg_pool.PoolTimeout as exc:
            # its message lists every failed try; the first line says it
            reason = str(exc).splitlines()[0] if str(exc) else "timed out"
            raise StoreError(f"no connection to PostgreSQL at {self.where}: {reason}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL: {exc}") from exc

    def connect(self, **kwargs: Any) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection of its own, outside the pool (the liveness connection)."""
        return psycopg.connect(self.url, **kwargs)

    async def connect_async(self, **kwargs: Any) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        """An autocommit connection of its own on the event loop (the notifier, the listener)."""
        return await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, **self._connect_timeout(), **kwargs
        )

    async def close(self) -> None:
        """Finish the calls under way, then close every connection.

        A call still waiting for a connection after `CLOSE_GRACE` (the server is
        gone, say) fails then, rather than hold a deploy's stop until its wait ends.
        """
        if self._is_closed:
            return
        self._is_closed = True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_GRACE):
                await self._idle.wait()
        await asyncio.get_running_loop().run_in_executor(None, self._shut)

    def _shut(self) -> None:
        self._pool.close(timeout=CLOSE_GRACE)  # those still waiting are refused now
        self._threads.shutdown(wait=True)
