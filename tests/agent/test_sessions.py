"""Rule 14: AgentSession's start / observe / result / turn, ordering and concurrency."""

from __future__ import annotations

import asyncio

import pytest

from agent import (
    Agent,
    AgentRuntime,
    Completed,
    ConfigError,
    MemoryStore,
    SQLiteStore,
    StoreError,
    TurnFailedError,
    TurnInput,
    UnknownTurnError,
    tool,
)
from agent.core.records import SessionKey
from agent.testing import ScriptedModel, call, reply
from tests.agent.helpers import assistant_count


async def test_start_returns_before_the_turn_runs_and_result_waits(store):
    release = asyncio.Event()

    async def script(request):
        await release.wait()
        return reply("late")

    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(script))) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start("hello")
        waiting = asyncio.create_task(session.result(turn_id))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        assert await session.status() == "running"
        release.set()
        assert await waiting == Completed(turn_id=turn_id, text="late")
        assert await session.status() == "idle"


async def test_transcript_is_a_copy_of_the_live_messages_in_order(store):
    model = ScriptedModel(lambda request: reply(f"re: {request.messages[-1].text}"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        session = runtime.session("a", "s1")
        await session.turn("one")
        await session.turn("two")

        transcript = await session.transcript()
        transcript.clear()  # the caller's own list

        assert [(m.role, m.text) for m in await session.transcript()] == [
            ("user", "one"),
            ("assistant", "re: one"),
            ("user", "two"),
            ("assistant", "re: two"),
        ]


async def test_a_sink_added_later_sees_every_event_until_it_is_removed(store):
    class Collect:
        def __init__(self) -> None:
            self.types: list[str] = []

        def emit(self, event) -> None:
            self.types.append(event.type)

    first, added = Collect(), Collect()
    model = ScriptedModel(lambda request: reply("ok"))
    async with AgentRuntime(store, Agent(name="a", model=model), sink=first) as runtime:
        stop = runtime.add_sink(added)
        await runtime.session("a", "s1").turn("one")
        stop()
        await runtime.session("a", "s1").turn("two")

    once = ["turn.started", "message.completed", "turn.completed"]
    assert [t for t in added.types if t != "message.delta"] == once
    assert [t for t in first.types if t != "message.delta"] == once * 2


async def test_turns_of_one_session_run_one_at_a_time_in_order(store):
    order: list[str] = []
    in_flight = 0
    most = 0
    all_admitted = asyncio.Event()

    async def script(request):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await all_admitted.wait()  # however slow the disk, nothing ends before all are in
        await asyncio.sleep(0.002)
        in_flight -= 1
        order.append(request.messages[-1].text)
        return reply("ok")

    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(script))) as runtime:
        session = runtime.session("a", "s1")
        ids = [await session.start(f"m{i}") for i in range(5)]
        statuses = [t.status for t in await session.turns()]
        all_admitted.set()
        results = [await session.result(t) for t in ids]

    assert statuses[0] == "running"
    assert statuses[1:] == ["queued"] * 4
    assert order == [f"m{i}" for i in range(5)]
    assert most == 1
    assert all(isinstance(r, Completed) for r in results)
    stored = await store.load(SessionKey("a", "s1"))
    assert [getattr(m, "text", "") for m in stored.transcript[::2]] == order


async def test_turns_of_different_sessions_run_concurrently(store):
    both_in = asyncio.Event()
    inside = 0

    async def script(request):
        nonlocal inside
        inside += 1
        if inside == 2:
            both_in.set()
        await asyncio.wait_for(both_in.wait(), timeout=5)
        return reply("ok")

    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(script))) as runtime:
        one, two = runtime.session("a", "s1"), runtime.session("a", "s2")
        t1, t2 = await one.start("x"), await two.start("y")
        r1, r2 = await one.result(t1), await two.result(t2)

    assert isinstance(r1, Completed)
    assert isinstance(r2, Completed)


async def test_turn_raises_when_the_turn_fails(store):
    model = ScriptedModel(lambda r: reply(stop_reason="refusal"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        with pytest.raises(TurnFailedError) as failure:
            await runtime.session("a", "s1").turn("hello")

    assert failure.value.phase == "model"
    assert failure.value.step == "model:1"


async def test_result_of_an_unknown_turn_is_refused(store):
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(lambda r: reply("x")))
    ) as rt:
        with pytest.raises(UnknownTurnError):
            await rt.session("a", "s1").result("nope")


async def test_unknown_agent_is_a_config_error(store):
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(lambda r: reply("x")))
    ) as rt:
        with pytest.raises(ConfigError, match="no agent named 'b'"):
            rt.session("b", "s1")


async def test_session_object_is_shared_per_address(store):
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(lambda r: reply("x")))
    ) as rt:
        assert rt.session("a", "s1") is rt.session("a", "s1")
        assert rt.session("a", "s1") is not rt.session("a", "s2")


@tool
def lookup(city: str) -> str:
    """Look up a city."""
    return f"{city}: sunny"


def weather(request):
    if assistant_count(request) % 2 == 0:
        return reply("looking", call("lookup", {"city": "Oslo"}))
    return reply("Sunny in Oslo.")


async def test_observe_one_turn_sees_only_its_events(store):
    seen: list[tuple[str, str]] = []
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(weather), tools=[lookup])
    ) as rt:
        session = rt.session("a", "s1")
        first = await session.turn("one")
        second_id = await session.start("two")
        stop = await session.observe(lambda e: seen.append((e.turn_id, e.type)), turn_id=second_id)
        await session.result(second_id)
        stop()

    assert seen
    assert {t for t, _ in seen} == {second_id} != {first.turn_id}
    assert seen[-1][1] == "turn.completed"


async def test_observe_with_replay_folds_committed_history_then_goes_live(store):
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(weather), tools=[lookup])
    ) as rt:
        session = rt.session("a", "s1")
        done = await session.turn("one")
        replayed = [e async for e in session.stream(done.turn_id)]

    assert [e.type for e in replayed] == [
        "message.completed",
        "action.requested",
        "action.completed",
        "message.completed",
        "turn.completed",
    ]
    assert replayed[1].input == {"city": "Oslo"}
    assert replayed[2].result == "Oslo: sunny"
    assert replayed[-1].text == "Sunny in Oslo."


async def test_stream_of_a_live_turn_ends_on_its_terminal_event(store):
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(weather), tools=[lookup])
    ) as rt:
        session = rt.session("a", "s1")
        turn_id = await session.start(TurnInput(text="one", user="U1"))
        events = [e async for e in session.stream(turn_id, replay=False)]

    assert events[0].type == "turn.started"
    assert events[-1].type == "turn.completed"
    assert "message.delta" in [e.type for e in events]


async def test_a_failing_observer_does_not_stop_the_turn(store, caplog):
    def explode(event):
        raise RuntimeError("observer bug")

    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(weather), tools=[lookup])
    ) as rt:
        session = rt.session("a", "s1")
        await session.observe(explode)
        done = await session.turn("one")

    assert done.text == "Sunny in Oslo."
    assert "an observer of a/s1 failed" in caplog.text


class FailingStore(MemoryStore):
    """A memory store whose disk "fails" on a chosen tool step's commit."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_on_commit: int | None = None
        self.commits = 0

    def _count(self) -> None:
        self.commits += 1
        if self.commits == self.fail_on_commit:
            raise StoreError("disk I/O error")

    async def commit_with(self, key, work, record):
        self._count()
        return await super().commit_with(key, work, record)


async def test_a_store_failure_halts_the_session_instead_of_wedging_it():
    store = FailingStore()

    def script(request):
        if request.messages[-1].role == "user":
            return reply("", call("lookup", {"city": "Oslo"}))
        return reply("done")

    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(script), tools=[lookup])
    ) as rt:
        session = rt.session("a", "s1")
        store.fail_on_commit = 1  # the first tool step
        first = await session.start("one")
        second = await session.start("two")
        events = [e.type async for e in session.stream(first)]
        with pytest.raises(StoreError, match="halted after an internal error"):
            await session.result(first)
        with pytest.raises(StoreError, match="halted after an internal error"):
            await session.result(second)
        with pytest.raises(StoreError, match=r"halted after an internal error \(StoreError: disk"):
            await session.start("three")

    assert events[-1] == "turn.failed"  # a stream of the stopped turn ends
    stored = await store.load(SessionKey("a", "s1"))
    # the second turn never opened after the half-finished first one
    assert [m.role for m in stored.transcript] == ["user", "assistant"]
    assert stored.turns[second].status == "queued"
    assert stored.turns[first].status == "running"

    # the next start resumes both, in order, from the last checkpoint
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(script), tools=[lookup])
    ) as rt:
        session = rt.session("a", "s1")
        assert (await session.result(second)).status == "completed"
        assert (await session.result(first)).status == "completed"
    stored = await store.load(SessionKey("a", "s1"))
    assert [m.role for m in stored.transcript] == [
        "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip


async def test_idle_sessions_beyond_the_limit_are_unloaded_and_read_again(store):
    model = ScriptedModel(lambda r: reply(f"seen {len(r.messages)}"))
    runtime = AgentRuntime(store, Agent(name="a", model=model), max_loaded_sessions=2)
    async with runtime:
        first = runtime.session("a", "s1")
        await first.turn("one")
        for other in ("s2", "s3"):
            await runtime.session("a", other).turn("hi")
        assert first._shared.in_memory is None  # the least recently used idle session went
        again = await first.turn("two")
        assert runtime.session("a", "s1") is first
        assert len(runtime._loaded) == 2

    assert again.text == "seen 3"  # its history came back from the store


class GatedStore(MemoryStore):
    """A memory store whose commits land, then wait at a gate before returning.

    That is the SQLite store's case when a caller is cancelled: its write goes
    on to completion on the connection thread after the caller has gone.
    """

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.gate.set()

    async def commit(self, key, commit):
        await super().commit(key, commit)
        self.entered.set()
        await self.gate.wait()


async def test_cancelling_start_mid_commit_keeps_memory_and_store_in_step():
    store = GatedStore()
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(lambda r: reply("hi")))
    ) as rt:
        session = rt.session("a", "s1")
        store.gate.clear()
        admitting = asyncio.create_task(session.start("hello", turn_id="ev1"))
        await store.entered.wait()
        admitting.cancel()  # an HTTP timeout, a client that went away
        store.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await admitting
        # the Slack retry of the same event finds the admitted turn and runs it once
        assert await session.start("hello", turn_id="ev1") == "ev1"
        assert (await session.result("ev1")).text == "hi"
        follow_up = await session.turn("again")

    assert follow_up.text == "hi"
    stored = await store.load(SessionKey("a", "s1"))
    assert [m.role for m in stored.transcript] == ["user", "assistant"] * 2
    assert next(iter(stored.turns)) == "ev1"


async def test_a_turn_admitted_before_recovery_waits_for_the_unfinished_one(store):
    release = asyncio.Event()

    async def script(request):
        if request.messages[-1].text == "first" and not release.is_set():
            await release.wait()
        return reply(f"re: {request.messages[-1].text}")

    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(script))) as rt:
        session = rt.session("a", "s1")
        await session.start("first", turn_id="A")
        await asyncio.sleep(0.01)
    release.set()

    late = AgentRuntime(store, Agent(name="a", model=ScriptedModel(script)))  # start() not called
    session = late.session("a", "s1")
    await session.start("second", turn_id="B")
    assert (await session.result("A")).text == "re: first"
    assert (await session.result("B")).text == "re: second"
    await late.close()


async def test_a_closed_runtime_refuses_new_turns(store):
    from agent import RuntimeClosedError

    runtime = AgentRuntime(store, Agent(name="a", model=ScriptedModel(lambda r: reply("x"))))
    await runtime.start()
    session = runtime.session("a", "s1")
    await runtime.close()
    with pytest.raises(RuntimeClosedError, match="closed"):
        await session.start("hello")


async def test_a_turn_another_process_admitted_is_seen_before_the_next_one(tmp_path):
    # two runtimes on one database file, as the server and `run-schedule` beside it
    model = ScriptedModel(lambda request: reply(f"re: {request.messages[-1].text}"))
    server_store = await SQLiteStore.open(tmp_path / "bot.db")
    command_store = await SQLiteStore.open(tmp_path / "bot.db")
    try:
        async with (
            AgentRuntime(server_store, Agent(name="a", model=model)) as server,
            AgentRuntime(command_store, Agent(name="a", model=model)) as command,
        ):
            await server.session("a", "s1").turn("monday")  # the server holds the session
            await command.session("a", "s1").turn("by hand")

            await server.session("a", "s1").turn("tuesday")

            said = [m.text for m in await server.session("a", "s1").transcript()]
            assert said == [
                "monday",
                "re: monday",
                "by hand",
                "re: by hand",
                "tuesday",
                "re: tuesday",
            ]
    finally:
        await server_store.close()
        await command_store.close()


async def test_a_session_reset_before_its_first_turn_stays_listed(store):
    # the console's reset of a session nobody has asked anything in yet
    agent = Agent(name="bot", instructions="x", model=ScriptedModel(lambda request: reply("x")))
    async with AgentRuntime(store, [agent]) as runtime:
        await runtime.session("bot", "http:fresh").reset()
    assert await store.has_session(SessionKey("bot", "http:fresh"))
    listed = [s.session_id for s in await store.list_sessions("bot", prefix="http:")]
    assert listed == ["http:fresh"]
