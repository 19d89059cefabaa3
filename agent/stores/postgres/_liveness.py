"""Which lease holders are alive: each holds an advisory lock on a connection of its store.

A lease's holder names a runtime (``host:pid:tag``). The store that takes a
lease for a holder first takes a session-level advisory lock named after it,
on one connection kept open for the purpose, and holds it until the store
closes. When the process dies, the server sees its socket close and lets the
lock go within milliseconds, so another replica, finding the lock free inside
its own take, knows the holder is gone and takes its sessions at once instead
of waiting out the lease. A replica that froze keeps its connection, hence its
lock: its sessions pass on only when its leases run out, and its commits are
refused by the fence when it wakes. Host power loss is seen once the server's
TCP keepalives give up, or when the lease runs out, whichever comes first.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from agent.stores.postgres._schema import Conn

__all__ = ["Liveness", "holder_of"]

logger = logging.getLogger("agent")

_LOCK_ID = "hashtextextended(%s, 0)"


def holder_of(token: str) -> str:
    """The runtime a lease token names: ``host:pid:tag#n`` without its take number."""
    return token.partition("#")[0]


class Liveness:
    """The advisory locks that say this store's holders are alive, on one connection."""

    def __init__(self, connect: Callable[[], psycopg.Connection[tuple[Any, ...]]]) -> None:
        self._connect = connect
        self._conn: Conn | None = None
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def hold(self, token: str) -> None:
        """Be alive as the holder of ``token`` from now until the store closes (a pool thread)."""
        holder = holder_of(token)
        with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed and holder in self._held:
                return
            if conn is None or conn.closed:
                if self._held:
                    # the connection dropped, and with it every lock: others may have taken
                    # our sessions meanwhile, which the fence of each commit refuses
                    logger.warning("the store's liveness connection dropped; taking it again")
                conn = self._conn = self._connect()
                for again in sorted(self._held):
                    conn.execute(f"SELECT pg_advisory_lock({_LOCK_ID})", (again,))
            conn.execute(f"SELECT pg_advisory_lock({_LOCK_ID})", (holder,))
            self._held.add(holder)

    @staticmethod
    def is_gone(conn: Conn, token: str) -> bool:
        """Whether the holder of ``token`` is certainly gone: nobody holds its lock.

        Run inside a transaction; the lock taken to find out is let go when it ends.
        """
        row = conn.execute(
            f"SELECT pg_try_advisory_xact_lock({_LOCK_ID})", (holder_of(token),)
        ).fetchone()
        return bool(row and row[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._held.clear()
