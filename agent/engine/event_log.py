"""`EventLog`: a durable log of each session's events, and followers that never miss one.

A client that loses its connection in the middle of a turn asks again from the
last position it saw and gets everything after it exactly once: what the log
holds, then live events, with no gap and no repeat between the two. Every event
but the live deltas is logged; a delta is handed to the followers connected when
it happens, placed after the logged event it follows (its id is ``"17.9"``: the
delta numbered 9 in its turn's run, after position 17), so a reconnection resumes
deltas from then on.

An event reaches followers only once it is in the log: a position a client saw
is always one it can ask to continue from, in this process or another.

What another process logs reaches a follower here when the store says so (an
`EventWakeups` store: PostgreSQL's NOTIFY), or else at its next reread of the
log, every poll period. With such a store the reread is only a fallback, for a
notice that was lost, and comes far less often.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from agent.core.events import TURN_EVENT_ADAPTER, TurnEvent
from agent.core.records import SessionKey
from agent.ports import EventWakeups, SessionStore

__all__ = ["DEFAULT_RETENTION", "EventLog", "LogEntry", "LogGap"]

logger = logging.getLogger("agent")

LIVE_ONLY = frozenset({"message.delta", "reasoning.delta", "action.progress"})
DEFAULT_RETENTION = 7 * 86_400.0
"""How long logged events are kept, in seconds: a week."""
READ_PAGE = 500
CLOSE_GRACE = 3.0
"""Seconds a closing log waits for its last writes before it drops them."""
RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0, 4.0)
"""Seconds between tries of a log write the store refused; then the batch is dropped."""
FALLBACK_POLL_SECONDS = 15.0
"""With a store that wakes followers, how often one rereads the log anyway, at the least."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One event as a follower gets it, with where it stands in its session's log."""

    position: int
    """The log position of the event, or, for a live delta, of the logged event before it."""
    event: TurnEvent
    delta: int = 0
    """For a live delta: its number in its turn's run (``event.seq``); 0 for a logged event."""

    @property
    def id(self) -> str:
        """What a client sends back to continue after this entry: ``"17"`` or ``"17.9"``."""
        return f"{self.position}.{self.delta}" if self.delta else str(self.position)


@dataclass(frozen=True, slots=True)
class LogGap:
    """The follower's position is not in the log: it must reload the session.

    Its entries were pruned, or the database started afresh; every entry kept follows.
    """

    after: int
    first_kept: int


@dataclass(frozen=True, slots=True)
class _Wake:
    """Read the log: the store says it reaches ``last`` (None: it may have grown)."""

    last: int | None
    is_quiet: bool = False
    """Nothing else happened for a poll period: a keep-alive moment, if the read finds none."""


@dataclass(slots=True)
class _Tail:
    """The part of one session's log this process is writing, and who follows it."""

    pending: list[TurnEvent] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None
    followers: set[asyncio.Queue[LogEntry | _Wake]] = field(default_factory=set)
    last: int | None = None
    """The last position written by this process, once known."""


class EventLog:
    """Logs a runtime's events per session, and serves them to followers.

    Register it as the runtime's sink (``runtime.add_sink(log)``), or let the
    constructor do it. Use it as an async context manager, or call `close`, so the
    last events are written before the store closes.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        retention: float = DEFAULT_RETENTION,
        clock: Callable[[], float] = time.time,
        poll_seconds: float = 2.0,
        only: Callable[[SessionKey], bool] | None = None,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        fallback_poll_seconds: float = FALLBACK_POLL_SECONDS,
    ) -> None:
        """Log events into ``store``.

        Args:
            store: Where the log is kept (the runtime's store).
            retention: Seconds a logged event is kept; `prune` deletes older ones.
            clock: Wall-clock seconds; entries are stamped and pruned by it.
            poll_seconds: How long a follower waits with nothing happening before
                it gets a None (a keep-alive moment), and rereads the log, for
                events another process (on the same database) wrote.
            only: Which sessions to log (None: every one); the others' turns pay nothing.
            retry_delays: Seconds to wait before each new try of a write the store
                refused; when they run out, the batch is dropped (and logged as such).
            fallback_poll_seconds: With a store that wakes followers when another
                process logs (an `EventWakeups`), the reread waits at least this long
                since the follower's last read: it is only there for a lost notice.
        """
        if retention <= 0:
            raise ValueError("the event log's retention must be a positive number of seconds")
        self._store = store
        self._retention = retention
        self._clock = clock
        self._poll = poll_seconds
        self._tails: dict[SessionKey, _Tail] = {}
        self._closed = False
        self._only = only
        self._retry_delays = tuple(retry_delays)
        self._wakeups = store if isinstance(store, EventWakeups) else None
        self._fallback = fallback_poll_seconds
        self._following = 0
        """Followers in this process; the store wakes this log while there are any."""

    # -- writing --------------------------------------------------------------

    def emit(self, event: TurnEvent) -> None:
        """Queue ``event`` for its session's log (a delta only for the followers)."""
        if self._closed:
            return
        key = SessionKey(event.agent, event.session)
        if self._only is not None and not self._only(key):
            return
        tail = self._tail(key)
        tail.pending.append(event)
        if tail.writer is None:
            tail.writer = asyncio.get_running_loop().create_task(
                self._write(key, tail), name=f"event log of {key}"
            )

    async def _write(self, key: SessionKey, tail: _Tail) -> None:
        # one writer per session keeps positions in the order the events happened;
        # what comes while a batch is being written goes in the next batch
        failures = 0
        try:
            while tail.pending:
                batch = list(tail.pending)
                logged = [event for event in batch if event.type not in LIVE_ONLY]
                try:
                    if tail.last is None:
                        tail.last = (await self._store.event_bounds(key)).last
                    positions = []
                    if logged:  # deltas alone are only for the followers: nothing to write
                        positions = await self._store.append_events(
                            key,
                            [event.model_dump(mode="json") for event in logged],
                            at=self._clock(),
                        )
                except Exception:
                    failures += 1
                    if failures <= len(self._retry_delays):
                        # a busy database (another process writing) passes: try again
                        logger.warning("could not log events of %s; trying again", key)
                        await asyncio.sleep(self._retry_delays[failures - 1])
                        continue
                    # the turn goes on; a follower misses these, and a reload shows the turn
                    logger.exception("dropped %d event(s) of %s: the log refused", len(logged), key)
                    positions = None
                failures = 0
                del tail.pending[: len(batch)]
                if positions is not None:
                    self._publish(tail, batch, iter(positions))
        finally:
            tail.writer = None
            self._let_go_if_idle(key, tail)

    def _tail(self, key: SessionKey) -> _Tail:
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tails[key] = _Tail()
        return tail

    def _let_go_if_idle(self, key: SessionKey, tail: _Tail) -> None:
        # nobody writes or follows it: the next event or follower starts a new one
        idle = tail.writer is None and not tail.followers and not tail.pending
        if idle and self._tails.get(key) is tail:
            del self._tails[key]

    def _publish(self, tail: _Tail, batch: list[TurnEvent], positions: Iterator[int]) -> None:
        for event in batch:
            if event.type in LIVE_ONLY:
                # the event's own number in its turn's run: it keeps rising past a restart
                # of this log, and a run starts with a logged event, so ids are never reused
                entry = LogEntry(tail.last or 0, event, event.seq)
            else:
                tail.last = next(positions)
                entry = LogEntry(tail.last, event)
            for queue in tail.followers:
                queue.put_nowait(entry)

    async def settled_position(self, key: SessionKey) -> int:
        """The session's last logged position, once every event emitted so far is logged.

        Read with no other await after it, the session's state in memory is exactly
        what the events up to that position tell: a snapshot and a stream from that
        position show everything once.
        """
        while True:
            tail = self._tails.get(key)
            if tail is not None and tail.writer is not None:
                await asyncio.gather(tail.writer, return_exceptions=True)
                continue
            if tail is not None and tail.last is not None and not tail.pending:
                return tail.last
            position = (await self._store.event_bounds(key)).last
            tail = self._tails.get(key)
            if tail is None or (not tail.pending and tail.writer is None):
                return position  # nothing was emitted while the store was read

    def followers(self, key: SessionKey) -> int:
        """How many followers the session has in this process."""
        tail = self._tails.get(key)
        return len(tail.followers) if tail is not None else 0

    async def flush(self) -> None:
        """Wait until every event emitted so far is written."""
        while writers := [t.writer for t in self._tails.values() if t.writer is not None]:
            await asyncio.gather(*writers, return_exceptions=True)

    async def close(self, *, grace: float = CLOSE_GRACE) -> None:
        """Write what is pending (for ``grace`` seconds at most), then take no more events.

        A store that does not answer (its server is gone) costs a stopping process
        ``grace``, not the writers' whole round of tries: what is left is dropped and
        said so; the turns themselves are in the store already or resume anyway.
        """
        try:
            async with asyncio.timeout(grace):
                await self.flush()
        except TimeoutError:
            writers = [t.writer for t in self._tails.values() if t.writer is not None]
            left = sum(len(t.pending) for t in self._tails.values())
            logger.warning("stopping with %d event(s) not logged: the log did not answer", left)
            for writer in writers:
                writer.cancel()
            await asyncio.gather(*writers, return_exceptions=True)
        self._closed = True

    async def __aenter__(self) -> EventLog:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- reading --------------------------------------------------------------

    async def follow(
        self, key: SessionKey, *, after: int = 0
    ) -> AsyncIterator[LogEntry | LogGap | None]:
        """Every event of the session after position ``after``: logged, then live, forever.

        Yields a `LogGap` first when entries after ``after`` were pruned, and None
        whenever nothing happened for a poll period (a moment for a keep-alive).
        """
        queue: asyncio.Queue[LogEntry | _Wake] = asyncio.Queue()
        tail = self._tail(key)
        # listen before reading: what is logged meanwhile is in both, and skipped once
        tail.followers.add(queue)
        self._add_follower()
        try:
            bounds = await self._store.event_bounds(key)
            position = max(0, after)
            if position < bounds.first - 1 or position > bounds.last:
                # pruned, or a position this log never had (a database started afresh)
                yield LogGap(after=position, first_kept=bounds.first)
                position = bounds.first - 1
            async for entry in self._read_after(key, position):
                position = entry.position
                yield entry
            clock = asyncio.get_running_loop().time
            read_at = clock()
            while True:
                item = await self._next(queue, clock() - read_at)
                if item is None:
                    yield None
                    continue
                if isinstance(item, _Wake):
                    if item.last is not None and item.last <= position:
                        continue  # what this process logged, or a read already found
                    read_at, found = clock(), False
                    async for entry in self._read_after(key, position):
                        position, found = entry.position, True
                        yield entry
                    if item.is_quiet and not found:
                        yield None
                    continue
                entry = item
                if entry.delta:
                    if entry.position == position:  # an older one's text is logged already
                        yield entry
                    continue
                if entry.position <= position:
                    continue
                if entry.position > position + 1:
                    # another process logged the ones in between
                    async for missed in self._read_after(key, position, before=entry.position):
                        yield missed
                position = entry.position
                yield entry
        finally:
            tail.followers.discard(queue)
            self._remove_follower()
            self._let_go_if_idle(key, tail)

    async def _next(
        self, queue: asyncio.Queue[LogEntry | _Wake], since_read: float
    ) -> LogEntry | _Wake | None:
        """A follower's next entry or wake-up; at a quiet moment, a reread if due, or None."""
        try:
            # cheaper than wait_for, which makes a task of every get
            async with asyncio.timeout(self._poll):
                return await queue.get()
        except TimeoutError:
            if self._wakeups is not None and since_read + self._poll < self._fallback:
                return None  # the store wakes us when another process logs
            return _Wake(None, is_quiet=True)

    def _add_follower(self) -> None:
        self._following += 1
        if self._following == 1 and self._wakeups is not None:
            self._wakeups.subscribe_events(self._log_grew, missed=self._log_missed)

    def _remove_follower(self) -> None:
        self._following -= 1
        if self._following == 0 and self._wakeups is not None:
            self._wakeups.unsubscribe_events(self._log_grew)

    def _log_grew(self, key: SessionKey, last: int) -> None:
        # on the event loop, from the store: queue, never await
        tail = self._tails.get(key)
        if tail is not None:
            for queue in tail.followers:
                queue.put_nowait(_Wake(last))

    def _log_missed(self) -> None:
        for tail in self._tails.values():
            for queue in tail.followers:
                queue.put_nowait(_Wake(None))

    async def _read_after(
        self, key: SessionKey, position: int, *, before: int | None = None
    ) -> AsyncIterator[LogEntry]:
        while True:
            rows = await self._store.read_events(key, after=position, limit=READ_PAGE)
            for row_position, body in rows:
                if before is not None and row_position >= before:
                    return
                position = row_position
                yield LogEntry(row_position, TURN_EVENT_ADAPTER.validate_python(body))
            if len(rows) < READ_PAGE:
                return

    # -- retention ------------------------------------------------------------

    async def prune(self) -> int:
        """Delete entries older than the retention; return how many went."""
        pruned = await self._store.prune_events(before=self._clock() - self._retention)
        if pruned:
            logger.info("pruned %d logged event(s) older than the retention", pruned)
        return pruned

    async def prune_every(self, seconds: float) -> None:
        """Prune now and then every ``seconds``, until cancelled; failures are logged."""
        while True:
            try:
                await self.prune()
            except Exception:
                logger.exception("could not prune the event log")
            await asyncio.sleep(seconds)
