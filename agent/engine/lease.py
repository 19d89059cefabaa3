"""One writer per session: a lease in the store, taken before writing, renewed while held.

Two processes on one store (the server and ``run-schedule`` beside it, two
replicas firing the same schedule) would otherwise both run a turn, or admit
turns over each other from stale copies. A process takes the session's lease
before it writes, keeps it while its turns run, and lets it go when they stop;
taking it from someone else means the copy in memory may be stale, so it is
read again. Every commit names its holder, so a process that stalled past its
lease cannot write over the one that took the session on.

A holder is a runtime, named ``host:pid:tag`` (the host part also names the
PID namespace and the boot); each time it takes a lease it writes it as
``host:pid:tag#n``, so a turn begun under an earlier take (before the lease was
lost and taken back) is fenced off too. A lease whose process is gone (a crash,
a kill) is taken at once rather than after it runs out: on one host and PID
namespace, which is where a SQLite file is shared, whether a process lives is
known for certain. Renewing never takes back a lease another holder had in
between, even one it let go: that process may have written the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent.core.records import LeaseTaken, SessionKey
from agent.errors import LeaseLostError, RuntimeClosedError
from agent.ports import SessionStore

__all__ = ["LEASE_SECONDS", "SessionLease", "drop_quietly", "is_gone", "new_holder", "retire"]

logger = logging.getLogger("agent")

LEASE_SECONDS = 30.0
"""How long a lease lasts unless renewed; renewed at a third of it while held."""

CLOSED = "this runtime is closed; start a new one to run turns"

WAIT_SECONDS = 0.25
"""How often a process waiting for a session held elsewhere asks again."""


def _machine() -> str:
    """This host and PID namespace: where a process id means the same process.

    Two containers on one host may share a host name and each run as pid 1; the
    namespace and the boot id tell them (and a reboot) apart.
    """
    parts = [socket.gethostname().replace(":", "_")]
    with contextlib.suppress(OSError):
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8])
    return "/".join(parts)


_HOST = _machine()
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
        return False  # another machine's (or container's) process: only its lease running out
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
    """This process's claim to be the only writer of one session.

    ``stale`` says that another process may have written the session since this
    one last read it (the lease changed hands, or was lost): the session must
    be read again before anything more is written from memory.
    """

    def __init__(
        self,
        store: SessionStore,
        key: SessionKey,
        holder: str,
        *,
        seconds: float = LEASE_SECONDS,
        closed: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._key = key
        self.holder = holder
        self._seconds = seconds
        self._closed = closed
        self._taking = asyncio.Lock()
        self._renewal: asyncio.Task[None] | None = None
        self._takes = 0
        self._orphans: set[asyncio.Task[None]] = set()
        self.token = holder
        """What this take of the lease is written as, and every commit under it names."""
        self.is_held = False
        self.stale = False
        self.until = 0.0
        """When the lease runs out unless renewed, as this process last wrote it."""

    async def take(self, *, wait: bool = True) -> bool:
        """Hold the lease, waiting while another live process does (unless ``wait`` is False).

        Two callers of one session share one take. Sets `stale` when the lease
        comes from another holder.

        Returns:
            Whether it is held: only False when ``wait`` is False and another
            live process holds it.

        Raises:
            RuntimeClosedError: The runtime closed while this waited.
        """
        async with self._taking:
            if self.is_held:
                return True
            self._takes += 1
            token = f"{self.holder}#{self._takes}"
            over: str | None = None
            told = False
            while True:
                try:
                    taken = await self._take_once(token, over)
                except Exception as exc:
                    if self._closed():  # its store closed under it, as a shutdown does
                        raise RuntimeClosedError(CLOSED) from exc
                    raise
                if taken.granted:
                    break
                if taken.holder.partition("#")[0] == self.holder or is_gone(taken.holder):
                    # ours from a take whose caller left before hearing back, or a dead one's
                    over = taken.holder
                    continue
                if not wait:
                    return False
                if not told:
                    logger.info(
                        "%s is busy in another process (%s); waiting for it",
                        self._key,
                        taken.holder.partition("#")[0],
                    )
                    told = True
                await asyncio.sleep(WAIT_SECONDS)
                if self._closed():  # a write asked before the close stops waiting for it
                    raise RuntimeClosedError(CLOSED)
            if taken.previous != self.token:
                # another holder had it since our last take, or a take of ours whose
                # caller left (it may have followed another): read the session again
                self.stale = True
            self.token = token
            self.is_held = True
            self._stop_renewing()
            self._renewal = asyncio.create_task(self._renew(token), name=f"lease {self._key}")
            return True

    async def _take_once(self, token: str, over: str | None) -> LeaseTaken:
        """One try at the store; a grant whose caller left meanwhile is let go, not kept."""
        now = time.time()
        trying = asyncio.ensure_future(
            self._store.take_lease(self._key, token, now=now, until=now + self._seconds, over=over)
        )
        try:
            taken = await asyncio.shield(trying)
            if taken.granted:
                self.until = now + self._seconds
            return taken
        except asyncio.CancelledError:
            trying.add_done_callback(lambda done: self._let_orphan_go(done, token))
            raise

    def _let_orphan_go(self, done: asyncio.Future[LeaseTaken], token: str) -> None:
        if done.cancelled() or done.exception() is not None or not done.result().granted:
            return
        task = asyncio.ensure_future(_quietly(self._store.drop_lease(self._key, token)))
        self._orphans.add(task)
        task.add_done_callback(self._orphans.discard)

    def is_fresh(self) -> bool:
        """Whether the lease is held and, by the clock, cannot have run out yet."""
        return self.is_held and time.time() < self.until

    async def confirm(self, token: str) -> None:
        """Make sure the lease taken as ``token`` is still this process's, renewing it now.

        For output that no commit fences (a reply streamed as the model writes it): a
        process that froze past its lease must not show what it can no longer commit.

        Raises:
            LeaseLostError: Another holder took the session on meanwhile.
        """
        if self.token == token and self.is_fresh():
            return
        until = time.time() + self._seconds
        if self.token != token or not await self._store.renew_lease(self._key, token, until=until):
            if self.token == token:
                self.lost()
            raise LeaseLostError(f"{self._key}: another process took this session on")
        self.until = max(self.until, until)

    async def drop(self) -> None:
        """Let the lease go so another process may write the session."""
        if not self.is_held:
            return
        self.is_held = False
        self._stop_renewing()
        await self._store.drop_lease(self._key, self.token)

    def lost(self) -> None:
        """Another holder took it: stop renewing, and read the session again before writing."""
        self.is_held = False
        self.stale = True
        self._stop_renewing()

    def forget(self) -> None:
        """Stop renewing without writing (the runtime is closing)."""
        self.is_held = False
        self._stop_renewing()

    def _stop_renewing(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None

    async def _renew(self, token: str) -> None:
        while True:
            await asyncio.sleep(self._seconds / 3)
            if self._closed():
                return  # the runtime lets its leases go as it closes
            until = time.time() + self._seconds
            try:
                kept = await self._store.renew_lease(self._key, token, until=until)
            except Exception:
                if self._closed():
                    return
                logger.warning("could not renew the lease of %s; trying again", self._key)
                continue
            if kept:
                self.until = max(self.until, until)
            else:
                # another took it (and maybe let it go): our next commit is refused
                logger.warning("%s was taken on by another process", self._key)
                if self.token == token:
                    self._renewal = None
                    self.is_held = False
                    self.stale = True
                return


async def _quietly(work: Awaitable[None]) -> None:
    with contextlib.suppress(Exception):
        await work


async def drop_quietly(lease: SessionLease) -> None:
    """Let a lease go at close; a store already closed leaves it to run out or be taken."""
    await _quietly(lease.drop())
