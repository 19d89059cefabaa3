"""Waking the event log's followers on every replica: a NOTIFY after each commit, one LISTEN.

Once an `append_events` transaction has committed, the store hands the session's
newest position to its `Notifier`. It coalesces: at most one
``SELECT pg_notify('agent_events', p) FROM unnest(%s::text[]) AS p`` per
`NOTIFY_EVERY` seconds, carrying each session's newest position, on a connection
of its own with ``synchronous_commit`` off, so a notice costs no fsync. Never
inside the append's own transaction: a NOTIFY takes a database-wide lock that is
held across the commit's WAL flush, which serialises every committer (measured:
one commit per fsync, where 2.6-2.8 share one otherwise).

One channel serves every session; the session is in the payload. The store's
one `Listener` connection (``LISTEN agent_events``) hands each notice to its
subscribers. A notice sent while that connection is down is lost, so after each
connect the subscribers are told they may have missed some.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from agent.core.records import SessionKey

__all__ = [
    "CHANNEL",
    "INBOX_CHANNEL",
    "INBOX_LISTENER_NAME",
    "NOTIFY_EVERY",
    "Listener",
    "Notifier",
    "decode",
    "encode",
]

logger = logging.getLogger("agent")

AsyncConn = psycopg.AsyncConnection[tuple[Any, ...]]
Connect = Callable[..., Awaitable[AsyncConn]]
Grew = Callable[[SessionKey, int], None]
Missed = Callable[[], None]

CHANNEL = "agent_events"
NOTIFY_EVERY = 0.015
"""Seconds between two notification round trips of one store, at the least."""
ANY_SESSION = "*"
"""The payload for a session whose name is too long to send: every follower reads."""
MAX_PAYLOAD = 7900
"""Characters of a payload, at most: the server refuses 8000 bytes (ours are ASCII)."""
SEND_SECONDS = 5.0
LISTENER_NAME = "agent-events-listener"
"""The listening connection's ``application_name``, as ``pg_stat_activity`` shows it."""
INBOX_CHANNEL = "agent_inbox"
"""Where a replica that handed work to a session's owner wakes the other replicas; the
payload is `encode`'s, with position 0."""
INBOX_LISTENER_NAME = "agent-inbox-listener"
CHECK_EVERY = 30.0
"""Seconds of quiet after which the listener asks its connection whether it still works."""
CHECK_SECONDS = 10.0
RECONNECT_DELAYS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
"""Seconds before each new try to listen again; the last one repeats."""


def encode(key: SessionKey, last: int) -> str:
    """The payload that says ``key``'s log reaches ``last``."""
    payload = json.dumps([key.agent, key.session_id, last], separators=(",", ":"))
    return payload if len(payload) <= MAX_PAYLOAD else ANY_SESSION


def decode(payload: str) -> tuple[SessionKey, int] | None:
    """The session and position a payload names; None for any session (or one not ours)."""
    try:
        agent, session_id, last = json.loads(payload)
    except (ValueError, TypeError):
        return None
    if not (isinstance(agent, str) and isinstance(session_id, str) and isinstance(last, int)):
        return None
    return SessionKey(agent, session_id), last


class Notifier:
    """Sends this store's notices, coalesced, off the commit path."""

    def __init__(self, connect: Connect, *, every: float = NOTIFY_EVERY) -> None:
        self._connect = connect
        self._every = every
        self._pending: dict[SessionKey, int] = {}
        self._sender: asyncio.Task[None] | None = None
        self._conn: AsyncConn | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The server process of the notifying connection, while it is open."""
        return self._conn.info.backend_pid if self._conn is not None else None

    def note(self, key: SessionKey, last: int) -> None:
        """Announce that ``key``'s log reaches ``last``; call it once that is committed."""
        if self._closed:
            return  # the other replicas find these entries by their poll
        self._pending[key] = max(last, self._pending.get(key, 0))
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(
                self._send_pending(), name="agent-pg notifier"
            )

    async def _send_pending(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, {}
                await self._send([encode(key, last) for key, last in batch.items()])
                if not self._closed:
                    # what comes meanwhile waits, and goes out in one statement
                    await asyncio.sleep(self._every)
        finally:
            self._sender = None

    async def _send(self, payloads: list[str]) -> None:
        for attempt in range(2):  # a connection the server dropped is replaced once
            try:
                async with asyncio.timeout(SEND_SECONDS):
                    conn = await self._connection()
                    await conn.execute(
                        f"SELECT pg_notify('{CHANNEL}', p) FROM unnest(%s::text[]) AS p",
                        (payloads,),
                    )
                return
            except Exception as exc:  # a notice lost must never stop the next ones
                await self._drop()
                if attempt:
                    # followers on other replicas see these entries at their next poll
                    logger.warning("could not notify %d log append(s): %s", len(payloads), exc)

    async def _connection(self) -> AsyncConn:
        if self._conn is None or self._conn.closed:
            conn = await self._connect()
            try:
                # the notice's own commit waits for no fsync: losing one in a crash is harmless
                await conn.execute("SET synchronous_commit TO off")
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        """Send what is pending, then close the connection; later notes are dropped."""
        self._closed = True
        if self._sender is not None:
            await asyncio.wait([self._sender])
        await self._drop()


class Listener:
    """The store's one listening connection, and whom it wakes."""

    def __init__(
        self, connect: Connect, *, channel: str = CHANNEL, name: str = LISTENER_NAME
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._name = name
        self._subscribers: dict[Grew, Missed] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.pid: int | None = None
        """The server process of the listening connection, while it listens."""
        self.listening = asyncio.Event()
        """Set while the connection listens (and its subscribers were told to read)."""

    def subscribe(self, grew: Grew, missed: Missed) -> None:
        """Wake ``grew`` on each notice and ``missed`` after each connect; listen if not yet."""
        if self._closed:
            return
        self._subscribers[grew] = missed
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._listen(), name="agent-pg listener"
            )

    def unsubscribe(self, grew: Grew) -> None:
        """Stop waking ``grew``; the connection stays until the store closes."""
        self._subscribers.pop(grew, None)

    async def _listen(self) -> None:
        failures = 0
        while True:
            try:
                async with contextlib.AsyncExitStack() as stack:
                    conn = await self._connect(application_name=self._name)
                    stack.push_async_callback(conn.close)
                    await conn.execute(f"LISTEN {self._channel}")
                    if failures:
                        logger.info("the event log's listener listens again")
                    failures = 0
                    await self._receive(conn)
            except Exception as exc:  # a dropped connection, mostly: followers poll meanwhile
                failures += 1
                if failures == 1:
                    logger.warning(
                        "the event log's listener stopped listening: %s; trying again", exc
                    )
            finally:
                self.listening.clear()
                self.pid = None
            await asyncio.sleep(RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS)) - 1])

    async def _receive(self, conn: AsyncConn) -> None:
        self.pid = conn.info.backend_pid
        # whatever was sent while nobody here listened is lost: every follower reads
        self._wake_all()
        self.listening.set()
        while True:
            async with contextlib.aclosing(conn.notifies(timeout=CHECK_EVERY)) as notices:
                async for notice in notices:
                    self._dispatch(notice.payload)
            # quiet for a while: a connection that died without a word shows here
            async with asyncio.timeout(CHECK_SECONDS):
                await conn.execute("SELECT 1")

    def _dispatch(self, payload: str) -> None:
        named = decode(payload)
        if named is None:
            self._wake_all()
            return
        for grew in list(self._subscribers):
            try:
                grew(*named)
            except Exception:
                logger.exception("a follower's wake-up failed")

    def _wake_all(self) -> None:
        for missed in list(self._subscribers.values()):
            try:
                missed()
            except Exception:
                logger.exception("a follower's wake-up failed")

    async def close(self) -> None:
        """Stop listening and close the connection; nobody is woken after."""
        self._closed = True
        self._subscribers.clear()
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            logger.error("the event log's listener failed", exc_info=task.exception())
