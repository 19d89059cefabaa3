"""One writer per session: a lease in the store, taken before writing, renewed while held.

Two processes on one store (the server and ``run-schedule`` beside it, two
replicas firing the same schedule) would otherwise both run a turn, or admit
turns over each other from stale copies. A process takes the session's lease
before it writes, keeps it while its turns run, and lets it go when they stop;
taking it from someone else means the copy in memory may be stale, so it is
read again. Every commit names its holder, so a process that stalled past its
lease cannot write over the one that took the session on.

A holder is a runtime, named ``host:pid:tag``; each time it takes a lease it
writes it as ``host:pid:tag#n``, so a turn begun under an earlier take (before
the lease was lost and taken back) is fenced off too. A lease whose process is
gone (a crash, a kill) is taken at once rather than after it runs out: on one
host, which is where a SQLite file is shared, whether a process lives is known
for certain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid

from agent.ports import SessionKey, SessionStore

__all__ = ["LEASE_SECONDS", "SessionLease", "drop_quietly", "is_gone", "new_holder", "retire"]

logger = logging.getLogger("agent")

LEASE_SECONDS = 30.0
"""How long a lease lasts unless renewed; renewed at a third of it while held."""

WAIT_SECONDS = 0.25
"""How often a process waiting for a session held elsewhere asks again."""

_HOST = socket.gethostname()
_live_here: set[str] = set()
"""Holders of this process whose runtime is open."""


def new_holder() -> str:
    """A fresh holder name for a runtime of this process."""
    holder = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    _live_here.add(holder)
    return holder


def retire(holder: str) -> None:
    """Mark a runtime of this process closed: its leases are free to take."""
    _live_here.discard(holder)


def is_gone(holder: str) -> bool:
    """Whether ``holder`` certainly stopped: its process exited, or its runtime closed."""
    holder = holder.partition("#")[0]
    host, _, rest = holder.partition(":")
    pid_text, _, _ = rest.partition(":")
    if host != _HOST or not pid_text.isdigit():
        return False  # another machine's process: only its lease running out tells
    pid = int(pid_text)
    if pid == os.getpid():
        return holder not in _live_here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


class SessionLease:
    """This process's claim to be the only writer of one session."""

    def __init__(
        self, store: SessionStore, key: SessionKey, holder: str, *, seconds: float = LEASE_SECONDS
    ) -> None:
        self._store = store
        self._key = key
        self.holder = holder
        self._seconds = seconds
        self._renewal: asyncio.Task[None] | None = None
        self._takes = 0
        self.token = holder
        """What this take of the lease is written as, and every commit under it names."""
        self.is_held = False

    async def take(self, *, wait: bool = True) -> bool | None:
        """Hold the lease, waiting while another live process does (unless ``wait`` is False).

        Returns:
            Whether another holder had it since this one last did (the session may
            have changed on disk), or None when it is held elsewhere and ``wait``
            is False.
        """
        if self.is_held:
            return False
        over: str | None = None
        told = False
        self._takes += 1
        token = f"{self.holder}#{self._takes}"
        while True:
            now = time.time()
            taken = await self._store.take_lease(
                self._key, token, now=now, until=now + self._seconds, over=over
            )
            if taken.granted:
                break
            if taken.holder.partition("#")[0] == self.holder or is_gone(taken.holder):
                # ours from a take whose caller left before hearing back, or a dead one's
                over = taken.holder
                continue
            if not wait:
                return None
            if not told:
                logger.info(
                    "%s is busy in another process (%s); waiting for it",
                    self._key,
                    taken.holder.partition("#")[0],
                )
                told = True
            await asyncio.sleep(WAIT_SECONDS)
        self.token = token
        self.is_held = True
        self._renewal = asyncio.create_task(self._renew(), name=f"lease {self._key}")
        previous = taken.previous.partition("#")[0] if taken.previous else None
        return previous != self.holder

    async def drop(self) -> None:
        """Let the lease go so another process may write the session."""
        if not self.is_held:
            return
        self.is_held = False
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        await self._store.drop_lease(self._key, self.token)

    def forget(self) -> None:
        """Stop renewing without writing (the runtime is closing, or the lease was lost)."""
        self.is_held = False
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._seconds / 3)
            now = time.time()
            try:
                taken = await self._store.take_lease(
                    self._key, self.token, now=now, until=now + self._seconds
                )
            except Exception:
                logger.warning("could not renew the lease of %s; trying again", self._key)
                continue
            if not taken.granted:
                # our next commit is refused by the store: nothing more is written here
                logger.warning("%s was taken on by %s", self._key, taken.holder)
                self.is_held = False
                self._renewal = None
                return


async def drop_quietly(lease: SessionLease) -> None:
    """Let a lease go at close; a store already closed leaves it to run out or be taken."""
    with contextlib.suppress(Exception):
        await lease.drop()
