"""The durable event log: positions, catch-up after a reconnection, retention, other writers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import cast

from agent import (
    Agent,
    AgentRuntime,
    EventLog,
    LogEntry,
    LogGap,
    MemoryStore,
    SQLiteStore,
    StoreError,
    ToolContext,
    tool,
)
from agent.core.records import SessionKey
from agent.testing import ScriptedModel, call, reply

KEY = SessionKey("a", "s1")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_the_store_numbers_each_sessions_log_and_never_reuses_a_position(store):
    other = SessionKey("a", "s2")
    assert await store.event_bounds(KEY) == await store.event_bounds(other)
    assert (await store.event_bounds(KEY)).last == 0

    assert await store.append_events(KEY, [{"n": 1}, {"n": 2}], at=10.0) == [1, 2]
    assert await store.append_events(other, [{"n": 1}], at=10.0) == [1]
    assert await store.append_events(KEY, [{"n": 3}], at=20.0) == [3]
    assert await store.read_events(KEY, after=1, limit=10) == [(2, {"n": 2}), (3, {"n": 3})]
    assert await store.read_events(KEY, after=0, limit=1) == [(1, {"n": 1})]

    assert await store.prune_events(before=15.0) == 3  # both sessions' old entries
    bounds = await store.event_bounds(KEY)
    assert (bounds.first, bounds.last) == (3, 3)
    assert await store.prune_events(before=25.0) == 1
    bounds = await store.event_bounds(KEY)
    assert (bounds.first, bounds.last) == (4, 3)  # nothing kept, and the count goes on
    assert await store.append_events(KEY, [{"n": 4}], at=30.0) == [4]


async def test_sessions_are_listed_by_prefix_newest_first_with_their_first_words(store):
    model = ScriptedModel(lambda request: reply("ok"))
    clock = Clock()
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        log = EventLog(store, clock=clock)
        runtime.add_sink(log)
        await runtime.session("a", "http:one").turn("first words")
        await log.flush()
        clock.now += 5
        await runtime.session("a", "http:two").turn("second")
        await runtime.session("a", "http:two").turn("later")
        await runtime.session("a", "slack:T:C:1").turn("not mine")
        await runtime.session("a", "http_x").turn("nor this")
        await log.close()

    listed = await store.list_sessions("a", prefix="http:")
    assert [(s.session_id, s.title, s.status) for s in listed] == [
        ("http:two", "second", "idle"),
        ("http:one", "first words", "idle"),
    ]
    assert listed[0].updated_at == clock.now
    assert listed[0].last_event == 2 * 3  # started, completed (a message and the turn)
    assert await store.list_sessions("b") == []


async def test_every_event_but_the_deltas_is_logged_in_order_and_followers_get_deltas_in_place(
    store,
):
    @tool
    def note(text: str, ctx: ToolContext) -> str:
        """Keep a note."""
        return text

    def script(request):
        if len(request.messages) == 1:
            return reply("Noting.", call("note", {"text": "x"}))
        return reply("All done here.")

    agent = Agent(name="a", model=ScriptedModel(script, chunk=4), tools=[note])
    async with AgentRuntime(store, agent) as runtime, EventLog(store) as log:
        runtime.add_sink(log)
        followed: list[LogEntry] = []

        async def follow() -> None:
            async for entry in log.follow(KEY):
                assert isinstance(entry, LogEntry)
                followed.append(entry)
                if entry.event.type == "turn.completed":
                    return

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0)  # it listens before the turn starts
        await runtime.session("a", "s1").turn("hi")
        await asyncio.wait_for(follower, 5)

    logged = [(p, body["type"]) for p, body in await store.read_events(KEY, after=0, limit=99)]
    assert logged == [
        (1, "turn.started"),
        (2, "message.completed"),
        (3, "action.requested"),
        (4, "action.completed"),
        (5, "message.completed"),
        (6, "turn.completed"),
    ]
    assert [(e.position, e.event.type) for e in followed if not e.delta] == logged
    deltas = [e for e in followed if e.delta]
    # each reply's deltas come before the message they make up, after the event before it
    # a delta's id is the logged position before it and its number in the turn's run
    assert [e.id for e in deltas] == ["1.2", "1.3", "4.7", "4.8", "4.9", "4.10"]
    assert "".join(e.event.text for e in deltas if e.position == 4) == "All done here."
    ids = [e.id for e in followed]
    assert ids.index("1.3") < ids.index("2")
    assert ids.index("4.10") < ids.index("5")


async def test_a_reconnection_with_the_last_id_seen_misses_nothing_and_repeats_nothing(store):
    gate = asyncio.Event()

    @tool
    async def slow(ctx: ToolContext) -> str:
        """Wait for the gate."""
        await gate.wait()
        return "through"

    def script(request):
        if len(request.messages) == 1:
            return reply("Working.", call("slow"))
        return reply("Finished.")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[slow])
    async with AgentRuntime(store, agent) as runtime, EventLog(store) as log:
        runtime.add_sink(log)
        session = runtime.session("a", "s1")
        first: list[LogEntry] = []
        running = asyncio.Event()

        async def first_connection() -> None:
            async for entry in log.follow(KEY):
                if isinstance(entry, LogEntry):
                    first.append(entry)
                    if entry.event.type == "action.requested":
                        running.set()
                        return  # the connection drops while the tool runs

        connection = asyncio.create_task(first_connection())
        await asyncio.sleep(0)
        turn_id = await session.start("go")
        await asyncio.wait_for(running.wait(), 5)
        await connection
        last_seen = first[-1].id
        gate.set()  # the turn goes on while nobody is connected
        await session.result(turn_id)
        await log.flush()

        second: list[LogEntry] = []
        async for entry in log.follow(KEY, after=int(last_seen.split(".")[0])):
            assert isinstance(entry, LogEntry)
            second.append(entry)
            if entry.event.type == "turn.completed":
                break

    logged = [p for p, _ in await store.read_events(KEY, after=0, limit=99)]
    seen = [e.position for e in first + second if not e.delta]
    assert seen == logged  # every logged event once, in order, across both connections
    assert [e.event.type for e in second] == [
        "action.completed",
        "message.completed",
        "turn.completed",
    ]


async def test_a_follower_from_before_the_retention_is_told_of_the_gap(store):
    clock = Clock()
    model = ScriptedModel(lambda request: reply("ok"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        log = EventLog(store, clock=clock, retention=3600)
        runtime.add_sink(log)
        await runtime.session("a", "s1").turn("old")
        await log.flush()
        clock.now += 7200
        await runtime.session("a", "s1").turn("new")
        await log.flush()
        assert await log.prune() == 3  # the old turn's events: started, message, completed
        assert await log.prune() == 0

        entries = []
        async for entry in log.follow(KEY, after=1):
            entries.append(entry)
            if isinstance(entry, LogEntry) and entry.event.type == "turn.completed":
                break
        await log.close()

    assert entries[0] == LogGap(after=1, first_kept=4)
    assert [e.position for e in entries[1:]] == [4, 5, 6]


async def test_events_another_process_logs_reach_a_follower_here(tmp_path):
    path = tmp_path / "s.db"
    here, there = await SQLiteStore.open(path), await SQLiteStore.open(path)
    try:
        log = EventLog(here, poll_seconds=0.02)
        model = ScriptedModel(lambda request: reply("from elsewhere"))
        entries: list[LogEntry] = []

        async def follow() -> None:
            async for entry in log.follow(KEY):
                if isinstance(entry, LogEntry):
                    entries.append(entry)
                    if entry.event.type == "turn.completed":
                        return

        follower = asyncio.create_task(follow())
        async with AgentRuntime(there, Agent(name="a", model=model)) as elsewhere:
            other_log = EventLog(there)
            elsewhere.add_sink(other_log)
            await elsewhere.session("a", "s1").turn("hi")
            await other_log.close()
        await asyncio.wait_for(follower, 5)
    finally:
        await here.close()
        await there.close()
    assert [e.event.type for e in entries] == [
        "turn.started",
        "message.completed",
        "turn.completed",
    ]
    assert [e.position for e in entries] == [1, 2, 3]


async def test_a_log_write_the_store_refuses_is_tried_again_and_reaches_the_followers():
    class Refusing(MemoryStore):
        refusals = 2

        async def append_events(self, key, bodies, *, at):
            if self.refusals:
                self.refusals -= 1
                raise StoreError("SQLite: database is locked")
            return await super().append_events(key, bodies, at=at)

    store = Refusing()
    model = ScriptedModel(lambda r: reply("ok"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        log = EventLog(store, retry_delays=[0.01, 0.01, 0.01])
        runtime.add_sink(log)
        seen: list[str] = []

        async def follow() -> None:
            async for entry in log.follow(KEY):
                if isinstance(entry, LogEntry) and not entry.delta:
                    seen.append(entry.event.type)
                    if entry.event.type == "turn.completed":
                        return

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0)
        await runtime.session("a", "s1").turn("hi")
        await asyncio.wait_for(follower, 5)
        await log.close()
    assert seen == ["turn.started", "message.completed", "turn.completed"]


async def test_a_store_that_keeps_refusing_the_log_loses_no_turn(caplog):
    class FailingLog(MemoryStore):
        async def append_events(self, key, bodies, *, at):
            raise OSError("disk full")

    store = FailingLog()
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(lambda r: reply("ok")))
    ) as rt:
        log = EventLog(store, retry_delays=[0.01])
        rt.add_sink(log)
        done = await rt.session("a", "s1").turn("hi")
        await log.close()
    assert done.text == "ok"
    assert "dropped" in caplog.text


async def test_a_follower_from_a_position_the_log_never_had_is_told_and_gets_it_all(store):
    model = ScriptedModel(lambda request: reply("ok"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        log = EventLog(store)
        runtime.add_sink(log)
        await runtime.session("a", "s1").turn("hi")
        await log.flush()
        entries = []
        async for entry in log.follow(KEY, after=50):  # a client from before a fresh database
            entries.append(entry)
            if isinstance(entry, LogEntry) and entry.event.type == "turn.completed":
                break
        await log.close()
    assert entries[0] == LogGap(after=50, first_kept=1)
    assert [e.position for e in entries[1:]] == [1, 2, 3]


async def test_a_settled_position_matches_the_state_read_right_after_it(store):
    gate = asyncio.Event()

    @tool
    async def wait(ctx: ToolContext) -> str:
        """Wait."""
        await gate.wait()
        return "done"

    model = ScriptedModel(lambda r: reply("ok") if len(r.messages) > 1 else reply("", call("wait")))
    async with AgentRuntime(store, Agent(name="a", model=model, tools=[wait])) as runtime:
        log = EventLog(store)
        runtime.add_sink(log)
        session = runtime.session("a", "s1")
        turn_id = await session.start("go")
        while not gate.is_set():
            position = await log.settled_position(KEY)
            transcript = await session.transcript()  # in memory: no other task runs meanwhile
            # Reading the log is I/O: the turn may log more while it is read, so what the
            # state is compared with is the log up to the settled position.
            logged = [b for _, b in await store.read_events(KEY, after=0, limit=99)]
            assert len(logged) >= position
            settled = logged[:position]
            if any(b["type"] == "action.requested" for b in settled):
                gate.set()
            else:
                assert len(transcript) <= 2
            await asyncio.sleep(0)
        await session.result(turn_id)
        assert await log.settled_position(KEY) == 5  # started, action x2, message, completed
        await log.close()


async def test_events_logged_while_a_follower_reads_the_log_reach_it_once(tmp_path):
    class SlowReads(SQLiteStore):
        """Holds the first read of the log until a turn has logged and sent more."""

        reading = asyncio.Event()
        go_on = asyncio.Event()

        async def read_events(self, key, *, after, limit):
            if not self.reading.is_set():
                self.reading.set()
                await self.go_on.wait()
            return await super().read_events(key, after=after, limit=limit)

    store = await SlowReads.open(tmp_path / "s.db")
    model = ScriptedModel(lambda request: reply("hello there"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        log = EventLog(store)
        runtime.add_sink(log)
        await runtime.session("a", "s1").turn("first")  # positions 1-3
        await log.flush()
        entries: list[LogEntry] = []

        async def follow() -> None:
            async for entry in log.follow(KEY):
                if isinstance(entry, LogEntry):
                    entries.append(entry)
                    if entry.position == 9:
                        return

        follower = asyncio.create_task(follow())
        await store.reading.wait()  # it listens; 4-6 are logged and sent before it reads
        await runtime.session("a", "s1").turn("second")
        await log.flush()
        store.go_on.set()
        await runtime.session("a", "s1").turn("third")  # 7-9, live
        await asyncio.wait_for(follower, 5)
        await log.close()
    await store.close()

    assert [e.position for e in entries if not e.delta] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    # the second turn's deltas came before the messages it read: only the third's are live
    assert {e.position for e in entries if e.delta} == {7}


async def test_deltas_alone_write_nothing_and_their_ids_are_never_reused(store):
    written: list[int] = []
    release, streamed = asyncio.Event(), asyncio.Event()

    class Held(ScriptedModel):
        async def stream(self, request):
            pieces = 0
            async for event in super().stream(request):
                pieces += 1
                if pieces == 3:
                    streamed.set()
                    await release.wait()  # mid-reply, with nobody following
                yield event

    original = store.append_events

    async def counting(key, bodies, *, at):
        written.append(len(bodies))
        return await original(key, bodies, at=at)

    store.append_events = counting  # the store's own method, counted: not the engine's
    model = Held(lambda request: reply("one two three four five six"), chunk=4)
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        log = EventLog(store)
        runtime.add_sink(log)
        first: list[LogEntry] = []

        async def follow_until_streamed() -> None:
            async for entry in log.follow(KEY):
                if isinstance(entry, LogEntry):
                    first.append(entry)
                    if entry.delta == 3:
                        return

        follower = asyncio.create_task(follow_until_streamed())
        await asyncio.sleep(0)
        turn_id = await runtime.session("a", "s1").start("go")
        await streamed.wait()
        await asyncio.wait_for(follower, 5)  # the client leaves mid-reply
        await log.flush()
        second: list[LogEntry] = []

        async def follow_again() -> None:
            async for entry in log.follow(KEY, after=first[-1].position):
                if isinstance(entry, LogEntry):
                    second.append(entry)
                    if entry.event.type == "turn.completed":
                        return

        again = asyncio.create_task(follow_again())
        await asyncio.sleep(0.01)
        release.set()
        await runtime.session("a", "s1").result(turn_id)
        await asyncio.wait_for(again, 5)
        await log.close()

    assert 0 not in written  # a batch of deltas alone went to nobody's disk
    first_ids = {e.id for e in first if e.delta}
    second_ids = [e.id for e in second if e.delta]
    assert second_ids
    assert not first_ids & set(second_ids)  # a reconnected client skips none as seen


def following(log: EventLog) -> AsyncGenerator[LogEntry | LogGap | None, None]:
    """``log.follow(KEY)``, stepped through by hand and closed by the test."""
    return cast("AsyncGenerator[LogEntry | LogGap | None, None]", log.follow(KEY))


class WakingStore(MemoryStore):
    """A store that, like PostgreSQL's, says when a log grew: here, when the test says so."""

    def __init__(self) -> None:
        super().__init__()
        self.subscribers: dict = {}

    def subscribe_events(self, grew, *, missed) -> None:
        self.subscribers[grew] = missed

    def unsubscribe_events(self, grew) -> None:
        self.subscribers.pop(grew, None)

    async def append_elsewhere(self, n: int) -> int:
        """Log an event as another process would: nobody here is told."""
        started = {"type": "turn.started", "trigger": "inbound"}
        body = {**started, "agent": "a", "session": "s1", "turn_id": f"t{n}", "seq": 1}
        (position,) = await self.append_events(KEY, [body], at=1.0)
        return position


async def test_with_a_store_that_wakes_followers_a_quiet_follower_reads_only_when_woken():
    store = WakingStore()
    log = EventLog(store, poll_seconds=0.01, fallback_poll_seconds=3600)
    got: list[LogEntry | LogGap | None] = []
    follower = following(log)
    assert await anext(follower) is None  # a quiet moment: the empty log is not read again
    assert len(store.subscribers) == 1
    [(grew, missed)] = store.subscribers.items()

    await store.append_elsewhere(1)
    for _ in range(3):
        got.append(await anext(follower))
    assert got == [None, None, None]  # keep-alive moments still come every poll period

    grew(KEY, 1)
    entry = await anext(follower)
    assert isinstance(entry, LogEntry)
    assert entry.position == 1
    grew(KEY, 1)  # seen already: no read, nothing twice
    assert await anext(follower) is None

    await store.append_elsewhere(2)
    missed()  # notices may have been lost: every follower reads
    entry = await anext(follower)
    assert isinstance(entry, LogEntry)
    assert entry.position == 2
    await follower.aclose()
    assert store.subscribers == {}  # the last follower left


async def test_with_a_store_that_wakes_followers_a_lost_notice_is_found_by_the_slow_poll():
    store = WakingStore()
    log = EventLog(store, poll_seconds=0.01, fallback_poll_seconds=0.05)
    follower = following(log)
    assert await anext(follower) is None
    await store.append_elsewhere(1)  # and its notice never comes
    async with asyncio.timeout(5):
        while (entry := await anext(follower)) is None:
            pass
    assert isinstance(entry, LogEntry)
    assert entry.position == 1
    await follower.aclose()
