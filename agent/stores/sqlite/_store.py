"""`SQLiteStore`: the `SessionStore` methods, each a call of one function on the connection thread.

The work is in `_commits` (a commit's transaction), `_writes` (the other
writes), `_reads` and `_schema`; this class queues it on the `Connection` and
turns stored JSON into values where it always did.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
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
from agent.stores.sqlite import _reads, _writes
from agent.stores.sqlite._commits import rows_of, work_and_write, write
from agent.stores.sqlite._connection import Connection
from agent.stores.sqlite._retention import crowded_sessions, expired_sessions
from agent.stores.sqlite._schema import TABLES, SessionIds, Synchronous, configure

__all__ = ["SQLiteStore"]

T = TypeVar("T")


class SQLiteStore:
    """Sessions in one SQLite file, in WAL mode.

    Open it with `SQLiteStore.open` and close it with `close` (or ``async with``).
    """

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._ids = SessionIds()
        self.path = connection.path

    @classmethod
    async def open(cls, path: str | Path, *, synchronous: Synchronous = "FULL") -> Self:
        """Open (creating and migrating as needed) the database at ``path``.

        Args:
            path: The database file; its folder is created if missing.
            synchronous: SQLite's durability level; ``FULL`` survives power loss.
        """
        path = str(path)
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        connection = await Connection.open(path)
        store = cls(connection)
        try:
            await store._run(configure, synchronous)
        except BaseException:
            await connection.close()
            raise
        return store

    async def close(self) -> None:
        """Close the connection; queued transactions finish first."""
        await self._connection.close()

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def thread_ident(self) -> int | None:
        """The id of the thread that runs every statement (for tests and diagnostics)."""
        return self._connection.thread_ident

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # one function at a time on the connection thread; tests queue their own too
        return await self._connection.run(fn, *args)

    async def load(self, key: SessionKey) -> StoredSession:
        return await self._run(_reads.load, self._ids, key)

    async def load_steps(self, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
        return await self._run(_reads.load_steps, self._ids, key, turn_id)

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        await self._run(write, self._ids, key, rows_of(commit))

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
        # an operator's query (python -m bot turns --held): a scan, no index to keep
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
        return await self._run(_writes.take_lease, self._ids, key, holder, now, until, over)

    async def renew_lease(self, key: SessionKey, holder: str, *, until: float) -> bool:
        return await self._run(_writes.keep_lease, self._ids, key, holder, until)

    async def drop_lease(self, key: SessionKey, holder: str) -> None:
        await self._run(_writes.keep_lease, self._ids, key, holder, _rules.LET_GO)

    async def save_place_policy(self, source: str, place: str, policy: JsonValue | None) -> None:
        await self._run(_writes.save_place_policy, self._ids, source, place, policy)

    async def place_policies(self, source: str) -> dict[str, JsonValue]:
        rows = await self._run(_reads.place_policies, source)
        return {place: loads(policy) for place, policy in rows}

    async def save_feedback(self, feedback: Feedback) -> None:
        await self._run(_writes.save_feedback, self._ids, feedback)

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
        return await self._run(_writes.append_events, self._ids, key, texts, at)

    async def read_events(
        self, key: SessionKey, *, after: int, limit: int
    ) -> list[tuple[int, JsonValue]]:
        rows = await self._run(_reads.read_events, self._ids, key, after, limit)
        return [(position, loads(body)) for position, body in rows]

    async def event_bounds(self, key: SessionKey) -> LogBounds:
        return await self._run(_reads.event_bounds, self._ids, key)

    async def expire_history(self, agent: str, *, ended_before: float, at: float) -> int:
        return await self._run(_writes.expire_history, self._ids, agent, ended_before, at)

    async def expired_sessions(self, agent: str, *, ended_before: float) -> list[str]:
        return await self._run(expired_sessions, agent, ended_before)

    async def crowded_sessions(self, agent: str, *, more_than: int) -> list[str]:
        return await self._run(crowded_sessions, agent, more_than)

    async def prune_events(self, *, before: float) -> int:
        # in batches: the turns of every session wait behind each transaction
        pruned = batch = await self._run(_writes.prune_events, self._ids, before)
        while batch == _writes.PRUNE_BATCH:
            batch = await self._run(_writes.prune_events, self._ids, before)
            pruned += batch
        return pruned

    async def list_sessions(self, agent: str, *, prefix: str = "") -> list[SessionSummary]:
        return _rules.summaries(await self._run(_reads.list_sessions, agent, prefix))

    async def post_inbox(
        self, key: SessionKey, kind: str, ref: str, body: JsonValue, *, at: float
    ) -> bool:
        return await self._run(_writes.post_inbox, self._ids, key, kind, ref, dumps(body), at)

    async def read_inbox(self, key: SessionKey) -> list[InboxItem]:
        return _rules.inbox_items(await self._run(_reads.read_inbox, key))

    async def inbox_sessions(self) -> list[SessionKey]:
        return await self._run(_reads.inbox_sessions)

    async def dump_table(self, table: str) -> list[tuple[Any, ...]]:
        """Every row of one of our tables, for tests and diagnostics."""
        if table not in TABLES:
            raise StoreError(f"no table {table!r}")
        return await self._run(lambda conn: conn.execute(f"SELECT * FROM {table}").fetchall())

    async def set_trace_callback(self, callback: Callable[[str], object] | None) -> None:
        """Have SQLite hand ``callback`` each statement it runs (None stops it), for tests."""

        def trace(conn: sqlite3.Connection) -> None:
            conn.set_trace_callback(callback)

        await self._run(trace)
