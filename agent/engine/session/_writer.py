"""`Writer`: one write at a time in a session, under its lease, never lost to a cancelled caller.

Every admission (a start, cancel, reset, resume or expiry) writes inside
`locked_and_leased`: the session's admit lock, then its lease in the store, whose
token fences the writes made inside. `commit_shielded` then writes and waits for
the write even when the caller is cancelled meanwhile, so that the copy in
memory never falls behind what the store holds.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agent.core.records import Commit
from agent.engine.lease import drop_quietly
from agent.engine.session._inbox import TAKING
from agent.engine.session._state import SessionState
from agent.engine.session._worker import Worker
from agent.errors import LeaseLostError

__all__ = ["Writer"]


class Writer:
    """Admits one write at a time in a session, and writes it shielded from cancellation."""

    def __init__(self, shared: SessionState, worker: Worker) -> None:
        self._shared = shared
        self._worker = worker

    @asynccontextmanager
    async def locked_and_leased(self, *, wait: bool = True) -> AsyncIterator[bool]:
        """Admit one write: take this session's admit lock, then its lease in the store.

        The writes made inside are fenced by the lease token taken here. The lease
        is let go at the end if no turn runs here by then.

        Yields:
            Whether this process holds the lease. With ``wait`` it waits for another
            live process to let the lease go, so it does; with ``wait`` False it does
            not wait, and False means another live process holds the lease.
        """
        async with self._shared.admit_lock:
            self._shared.write_token = None
            try:
                held = await self._worker.take_lease_and_catch_up(wait=wait)
                if held:
                    self._shared.write_token = self._shared.lease.token
                yield held
            except LeaseLostError:
                if (
                    self._shared.write_token is not None
                    and self._shared.write_token == self._shared.lease.token
                ):
                    # The store refused a write made under the token taken here: another
                    # process took the lease meanwhile.
                    self._shared.lease.lost()
                raise
            finally:
                self._shared.write_token = None
                if self._shared.worker_task is None and self._shared.lease.is_held:
                    await drop_quietly(self._shared.lease)

    @asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        """Take only this session's admit lock, for start-up recovery.

        Recovery only queues turns; the worker takes the lease when it runs them. A
        lease still held at the end is let go if no turn runs here by then.
        """
        async with self._shared.admit_lock:
            try:
                yield
            finally:
                if self._shared.worker_task is None and self._shared.lease.is_held:
                    await drop_quietly(self._shared.lease)

    async def commit_shielded(self, commit: Commit) -> bool:
        """Write ``commit`` and wait for it even if the caller is cancelled meanwhile.

        The write goes on, on the store's thread, whatever the caller does. A caller
        that stopped waiting would never mirror it into the copy in memory (which a
        running turn uses), and that copy would fall behind the store; so the caller
        waits the write out, and is told afterwards that it was cancelled.

        Returns:
            Whether the caller was cancelled while it waited (re-raise after applying).

        Raises:
            StoreError: The write failed and nothing of it landed.
        """
        # The write is fenced by the lease token this admission took (outside one, the
        # current token). If the lease was lost and taken again since, the write was
        # planned on a copy that may be stale, and the store refuses it.
        commit = dataclasses.replace(
            commit, holder=self._shared.write_token or self._shared.lease.token
        )
        taking = TAKING.get()
        if taking is not None and not taking.done:
            # the owner carrying out an inbox item: the item goes in this commit, once
            commit = dataclasses.replace(commit, inbox_done=(*commit.inbox_done, taking.id))
        writing = asyncio.ensure_future(self._shared.host.store.commit(self._shared.key, commit))
        caller_left = False
        while not writing.done():
            try:
                await asyncio.shield(writing)
            except asyncio.CancelledError:
                caller_left = True
            except Exception:
                break
        writing.result()  # a write that failed raises its error here
        if taking is not None and taking.id in commit.inbox_done:
            taking.done = True
        return caller_left
