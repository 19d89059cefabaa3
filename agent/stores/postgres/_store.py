"""`PostgresStore`: the `SessionStore` methods, each one function run with a pooled connection.

The work is in `_commits` (a commit's transaction), `_writes`, `_reads` and
`_schema`; `_liveness` keeps this store's lease holders visibly alive to the
other replicas, and `_wakeups` tells every replica's event log when a session's
log grew.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

from agent._json import JsonValue, dumps, loads
from agent.core.feedback import Feedback
from agent.core.records import (
    Archive,
    Commit,
    InboxItem,
    LeaseTaken,
    LogBounds,
    SessionKey,
    SessionSummary,
    StoredSession,
)
from agent.core.turns import TurnRecord
from agent.errors import StoreError
from agent.stores import _rules
from agent.stores.postgres import _reads, _writes
from agent.stores.postgres._commits import work_and_write, write
from agent.stores.postgres._connection import Pool
from agent.stores.postgres._liveness import Liveness
from agent.stores.postgres._retention import crowded_sessions, expired_sessions
from agent.stores.postgres._schema import TABLES, Conn, SessionIds, migrate
from agent.stores.postgres._wakeups import (
    INBOX_CHANNEL,
    INBOX_LISTENER_NAME,
    NOTIFY_EVERY,
    Listener,
    Notifier,
)

__all__ = ["PostgresStore"]

T = TypeVar("T")

POOL_SIZE = 10
"""Connections (and threads) per store: how many transactions run at once."""


class PostgresStore:
    """Sessions in a PostgreSQL database, shared by every replica that opens it.

    Open it with `PostgresStore.open` and close it with `close` (or ``async with``).
    It is an `EventWakeups`: an event log on any replica learns of every append.
    """

    def __init__(self, pool: Pool, *, notify_every: float = NOTIFY_EVERY) -> None:
        self._pool = pool
        self._ids = SessionIds()
        self._liveness = Liveness(lambda: pool.connect(autocommit=True))
        self._notifier = Notifier(pool.connect_async, every=notify_every)
        self._listener = Listener(pool.connect_async)
        self._inbox_listener = Listener(
            pool.connect_async, channel=INBOX_CHANNEL, name=INBOX_LISTENER_NAME
        )
        self.where = pool.where
        """The database, as a URL without its password."""

    @classmethod
    async def open(
        cls, url: str, *, pool_size: int = POOL_SIZE, notify_every: float = NOTIFY_EVERY
    ) -> Self:
        """Connect to the database at ``url`` (migrating it as needed).

        Args:
            url: A ``postgresql://`` (or ``postgres://``) URL, as libpq reads it.
            pool_size: How many connections, hence transactions at once.
            notify_every: Seconds between two notices of log appends, at the least:
                what is appended meanwhile is announced together.

        Raises:
            StoreError: The server cannot be reached, or its schema is newer than this code.
        """
        pool = await Pool.open(url, pool_size)
        store = cls(pool, notify_every=notify_every)
        try:
            await store._run(migrate)
        except BaseException:
            await pool.close()
            raise
        return store

    async def close(self) -> None:
        """Finish the queued transactions, then close every connection.

        The notices of the last appends go out before the notifier closes; the
        liveness connection closes last: until then this store's leases are still
        its own.
        """
        try:
            await self._pool.close()
            await self._notifier.close()
        finally:
            await self._listener.close()
            await self._inbox_listener.close()
            await asyncio.to_thread(self._liveness.close)

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._pool.run(fn, *args)

    async def load(self, key: SessionKey) -> StoredSession:
        return await self._run(_reads.load, self._ids, key)

    async def load_steps(self, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
        return await self._run(_reads.load_steps, self._ids, key, turn_id)

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        await self._run(write, self._ids, key, commit)

    async def commit_with(
        self,
        key: SessionKey,
        work: Callable[[Any], T],
        record: Callable[[T | Exception], Commit],
    ) -> Commit:
        return await self._run(work_and_write, self._ids, key, work, record)

    async def unfinished_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return await self._run(_reads.turns_in, _rules.UNFINISHED)

    async def suspended_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return await self._run(_reads.turns_in, _rules.SUSPENDED)

    async def interrupted_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return await self._run(_reads.turns_in, _rules.INTERRUPTED)

    async def cancelled_suspensions(self) -> list[SessionKey]:
        return await self._run(_reads.cancelled_suspensions)

    async def pending_resets(self) -> list[SessionKey]:
        return await self._run(_reads.pending_resets)

    async def is_archived(self, key: SessionKey, turn_id: str) -> bool:
        return await self._run(_reads.is_archived, self._ids, key, turn_id)

    async def load_archive(self, key: SessionKey, generation: int) -> Archive | None:
        return await self._run(_reads.load_archive, self._ids, key, generation)

    async def take_lease(
        self, key: SessionKey, holder: str, *, now: float, until: float, over: str | None = None
    ) -> LeaseTaken:
        return await self._run(self._take_lease, key, holder, now, until, over)

    def _take_lease(
        self, conn: Conn, key: SessionKey, holder: str, now: float, until: float, over: str | None
    ) -> LeaseTaken:
        # alive before the lease is ours: no replica may find us gone while we hold it
        self._liveness.hold(holder)
        return _writes.take_lease(conn, key, holder, now, until, over, self._liveness.is_gone)

    async def renew_lease(self, key: SessionKey, holder: str, *, until: float) -> bool:
        return await self._run(self._renew_lease, key, holder, until)

    def _renew_lease(self, conn: Conn, key: SessionKey, holder: str, until: float) -> bool:
        self._liveness.hold(holder)  # takes the locks again if their connection dropped
        return _writes.keep_lease(conn, key, holder, until)

    async def drop_lease(self, key: SessionKey, holder: str) -> None:
        await self._run(_writes.keep_lease, key, holder, _rules.LET_GO)

    async def save_place_policy(self, source: str, place: str, policy: JsonValue | None) -> None:
        await self._run(_writes.save_place_policy, source, place, policy)

    async def place_policies(self, source: str) -> dict[str, JsonValue]:
        rows = await self._run(_reads.place_policies, source)
        return {place: loads(policy) for place, policy in rows}

    async def save_feedback(self, feedback: Feedback) -> None:
        await self._run(_writes.save_feedback, feedback)

    async def feedback_since(self, since: float, *, agent: str | None = None) -> list[Feedback]:
        return _rules.feedback_of(await self._run(_reads.feedback_since, since, agent))

    async def has_session(self, key: SessionKey) -> bool:
        return await self._run(_reads.has_session, self._ids, key)

    async def save_delivery(self, key: SessionKey, turn_id: str, state: JsonValue | None) -> None:
        text = None if state is None else dumps(state)
        await self._run(_writes.save_delivery, self._ids, key, turn_id, text)

    async def claim_delivery(self, key: SessionKey, turn_id: str, state: JsonValue) -> bool:
        return await self._run(_writes.claim_delivery, self._ids, key, turn_id, dumps(state))

    async def deliveries(self, agent: str) -> list[tuple[SessionKey, str, JsonValue]]:
        rows = await self._run(_reads.deliveries, agent)
        return [(SessionKey(agent, sid), turn_id, loads(state)) for sid, turn_id, state in rows]

    async def load_delivery(self, key: SessionKey, turn_id: str) -> JsonValue | None:
        return await self._run(_reads.load_delivery, self._ids, key, turn_id)

    async def append_events(
        self, key: SessionKey, bodies: Sequence[JsonValue], *, at: float
    ) -> list[int]:
        texts = [dumps(body) for body in bodies]
        positions = await self._run(_writes.append_events, self._ids, key, texts, at)
        if positions:
            # committed by now: a NOTIFY inside the transaction would serialise every commit
            self._notifier.note(key, positions[-1])
        return positions

    def subscribe_events(
        self, grew: Callable[[SessionKey, int], None], *, missed: Callable[[], None]
    ) -> None:
        self._listener.subscribe(grew, missed)

    def unsubscribe_events(self, grew: Callable[[SessionKey, int], None]) -> None:
        self._listener.unsubscribe(grew)

    def subscribe_inbox(
        self, posted: Callable[[SessionKey], None], *, missed: Callable[[], None]
    ) -> None:
        self._inbox_listener.subscribe(lambda key, _: posted(key), missed)

    async def read_events(
        self, key: SessionKey, *, after: int, limit: int
    ) -> list[tuple[int, JsonValue]]:
        rows = await self._run(_reads.read_events, self._ids, key, after, limit)
        return [(position, loads(body)) for position, body in rows]

    async def event_bounds(self, key: SessionKey) -> LogBounds:
        return await self._run(_reads.event_bounds, self._ids, key)

    async def expire_history(self, agent: str, *, ended_before: float, at: float) -> int:
        return await self._run(_writes.expire_history, agent, ended_before, at)

    async def expired_sessions(self, agent: str, *, ended_before: float) -> list[str]:
        return await self._run(expired_sessions, agent, ended_before)

    async def crowded_sessions(self, agent: str, *, more_than: int) -> list[str]:
        return await self._run(crowded_sessions, agent, more_than)

    async def prune_events(self, *, before: float) -> int:
        pruned = batch = await self._run(_writes.prune_events, before)
        while batch == _writes.PRUNE_BATCH:
            batch = await self._run(_writes.prune_events, before)
            pruned += batch
        return pruned

    async def list_sessions(self, agent: str, *, prefix: str = "") -> list[SessionSummary]:
        return _rules.summaries(await self._run(_reads.list_sessions, agent, prefix))

    async def post_inbox(
        self, key: SessionKey, kind: str, ref: str, body: JsonValue, *, at: float
    ) -> bool:
        return await self._run(_writes.post_inbox, key, kind, ref, dumps(body), at)

    async def read_inbox(self, key: SessionKey) -> list[InboxItem]:
        return _rules.inbox_items(await self._run(_reads.read_inbox, key))

    async def inbox_sessions(self) -> list[SessionKey]:
        return await self._run(_reads.inbox_sessions)

    async def dump_table(self, table: str) -> list[tuple[Any, ...]]:
        """Every row of one of our tables, for tests and diagnostics."""
        if table not in TABLES:
            raise StoreError(f"no table {table!r}")
        return await self._run(lambda conn: conn.execute(f"SELECT * FROM {table}").fetchall())
