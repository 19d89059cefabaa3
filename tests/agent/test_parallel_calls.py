"""Issue 22, point 2: the calls of one reply run concurrently; their results keep call order.

Each test holds the calls of one batch on events it sets itself, so the order
in which calls end is the test's choice, never the scheduler's: overlap is shown
by calls that can only finish once all of them have started, and order by
releasing them in a shuffled order. The property test at the end draws batches,
completion orders and a point at which the runtime stops mid-batch (as a
deploy stops it), and checks that every call ends with exactly one result, in
call order, and that a call whose result committed never runs again.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import (
    Agent,
    AgentRuntime,
    Cancelled,
    Completed,
    ModelRequest,
    SQLiteStore,
    ToolContext,
    ToolMessage,
    TurnEvent,
    tool,
)
from agent.core.records import SessionKey
from agent.errors import ConfigError
from agent.testing import RecordingSink, ScriptedModel, call, reply
from tests.agent.helpers import select

KEY = SessionKey("a", "s1")
WAIT = 10.0


def batch_then_results(*calls: Any) -> Any:
    """A model that asks for ``calls`` in one reply, then answers with the results it got."""

    def script(request: ModelRequest) -> Any:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return reply("On it.", *calls)
        return reply(",".join(f"{m.call_id}={m.result}" for m in results))

    return script


class Held:
    """Remote tools ``work(n)`` that each wait for their own release, and a log of them."""

    def __init__(self) -> None:
        self.release: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.log: list[str] = []
        self.running = 0
        self.most_at_once = 0

    def gate(self, call_id: str) -> asyncio.Event:
        self.started.setdefault(call_id, asyncio.Event())
        return self.release.setdefault(call_id, asyncio.Event())

    async def wait_started(self, call_id: str) -> None:
        """Return once the call ``call_id`` is in flight."""
        self.gate(call_id)
        await asyncio.wait_for(self.started[call_id].wait(), WAIT)

    def tool(self) -> Any:
        @tool
        async def work(n: int, ctx: ToolContext) -> str:
            """Work on item n until the test lets it finish."""
            release = self.gate(ctx.call_id)
            self.log.append(f"start {ctx.call_id}")
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.started[ctx.call_id].set()
            try:
                await release.wait()
            finally:
                self.running -= 1
            self.log.append(f"end {ctx.call_id}")
            return f"r{n}"

        return work


class Committed(RecordingSink):
    """Records events; `wait_for` returns once a call's result has committed."""

    def __init__(self) -> None:
        super().__init__()
        self.done: dict[str, asyncio.Event] = {}

    def _done(self, call_id: str) -> asyncio.Event:
        return self.done.setdefault(call_id, asyncio.Event())

    def emit(self, event: TurnEvent) -> None:
        super().emit(event)
        if event.type == "action.completed":
            self._done(event.call_id).set()

    async def wait_for(self, call_id: str) -> None:
        await asyncio.wait_for(self._done(call_id).wait(), WAIT)


async def tool_results(store: Any) -> list[tuple[str, Any]]:
    return [
        (m.call_id, m.result)
        for m in (await store.load(KEY)).transcript
        if isinstance(m, ToolMessage)
    ]


async def test_the_calls_of_one_reply_run_at_the_same_time(store):
    held = Held()
    calls = [call("work", {"n": n}, id=f"c{n}") for n in range(1, 5)]
    agent = Agent(name="a", model=ScriptedModel(batch_then_results(*calls)), tools=[held.tool()])
    async with AgentRuntime(store, agent) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start("go")
        # every call is in flight before any may end: one at a time could never get here
        for n in range(1, 5):
            await held.wait_started(f"c{n}")
        assert held.running == 4
        for n in range(1, 5):
            held.release[f"c{n}"].set()
        result = await session.result(turn_id)

    assert result == Completed(turn_id=turn_id, text="c1=r1,c2=r2,c3=r3,c4=r4")
    assert held.log[:4] == ["start c1", "start c2", "start c3", "start c4"]


@pytest.mark.parametrize("seed", range(4))
async def test_results_reach_the_transcript_in_call_order_whatever_order_calls_end(store, seed):
    held = Held()
    sink = Committed()
    ids = [f"c{n}" for n in range(1, 6)]
    calls = [call("work", {"n": n}, id=call_id) for n, call_id in enumerate(ids, 1)]
    agent = Agent(name="a", model=ScriptedModel(batch_then_results(*calls)), tools=[held.tool()])
    ending = ids[:]
    random.Random(seed).shuffle(ending)
    async with AgentRuntime(store, agent, sink=sink) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start("go")
        for call_id in ending:
            await held.wait_started(call_id)
        for call_id in ending:
            held.release[call_id].set()
            await sink.wait_for(call_id)
        result = await session.result(turn_id)

    assert [line.split()[1] for line in held.log if line.startswith("end")] == ending
    # the transcript, and so the next request, holds them in the order the model asked
    assert await tool_results(store) == [(c, f"r{n}") for n, c in enumerate(ids, 1)]
    assert result.text == ",".join(f"{c}=r{n}" for n, c in enumerate(ids, 1))
    # action.completed comes as each call ends, for the person watching
    completed = [e.call_id for e in sink.events if e.type == "action.completed"]
    assert completed == ending


async def test_no_more_calls_run_at_once_than_the_agent_allows(store):
    held = Held()
    sink = Committed()
    calls = [call("work", {"n": n}, id=f"c{n}") for n in range(1, 7)]
    agent = Agent(
        name="a",
        model=ScriptedModel(batch_then_results(*calls)),
        tools=[held.tool()],
        max_parallel_calls=2,
    )
    async with AgentRuntime(store, agent, sink=sink) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start("go")
        await held.wait_started("c1")
        await held.wait_started("c2")
        assert held.log == ["start c1", "start c2"]  # the third waits for a slot
        for n in range(1, 7):
            held.gate(f"c{n}").set()  # each may end as soon as it starts
        result = await session.result(turn_id)

    assert isinstance(result, Completed)
    assert held.most_at_once == 2
    # the waiting calls took the free slots in call order
    assert [line for line in held.log if line.startswith("start")] == [
        f"start c{n}" for n in range(1, 7)
    ]


async def test_local_calls_take_their_transactions_one_at_a_time_beside_remote_ones(
    sqlite_store: SQLiteStore,
):
    held = Held()
    inside: list[str] = []
    overlapped: list[str] = []

    @tool
    def record(n: int, ctx: ToolContext) -> str:
        """Write a row (local: inside the step's transaction)."""
        if inside:
            overlapped.append(ctx.call_id)
        inside.append(ctx.call_id)
        ctx.store.execute("create table if not exists rows (n integer not null)")
        ctx.store.execute("insert into rows (n) values (?)", [n])
        inside.remove(ctx.call_id)
        return f"row {n}"

    calls = [
        call("work", {"n": 1}, id="c1"),
        call("record", {"n": 2}, id="c2"),
        call("record", {"n": 3}, id="c3"),
        call("work", {"n": 4}, id="c4"),
    ]
    sink = Committed()
    model = ScriptedModel(batch_then_results(*calls))
    agent = Agent(name="a", model=model, tools=[held.tool(), record])
    async with AgentRuntime(sqlite_store, agent, sink=sink) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start("go")
        # the local calls commit while the remote one ahead of them still runs
        await sink.wait_for("c2")
        await sink.wait_for("c3")
        assert held.running == 2
        assert await tool_results(sqlite_store) == []  # c1 is owed: nothing placed yet
        held.gate("c4").set()
        held.gate("c1").set()
        result = await session.result(turn_id)

    assert result.text == "c1=r1,c2=row 2,c3=row 3,c4=r4"
    assert overlapped == []
    assert sorted(await select(sqlite_store, "select n from rows")) == [(2,), (3,)]


async def test_a_cancel_stops_every_running_call_of_the_batch_and_keeps_what_finished(store):
    held = Held()
    sink = Committed()
    calls = [call("work", {"n": n}, id=f"c{n}") for n in range(1, 4)]
    agent = Agent(
        name="a",
        model=ScriptedModel(batch_then_results(*calls)),
        tools=[held.tool()],
        tool_cancel_grace=0.05,
    )
    async with AgentRuntime(store, agent, sink=sink) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start("go")
        for n in (1, 2, 3):
            await held.wait_started(f"c{n}")
        held.release["c2"].set()
        await sink.wait_for("c2")  # c2 ended; it waits, unplaced, behind c1
        await session.cancel(turn_id)
        result = await session.result(turn_id)

    assert result == Cancelled(turn_id=turn_id, reason="requested")
    results = dict(await tool_results(store))
    assert list(results) == ["c1", "c2", "c3"]
    assert results["c2"] == "r2"  # it finished: its own result is placed, not a closing one
    for stopped in ("c1", "c3"):
        assert results[stopped]["cancelled"] is True
        assert "did not finish within" in results[stopped]["error"]


def test_an_agent_needs_at_least_one_call_slot():
    with pytest.raises(ConfigError, match="max_parallel_calls"):
        Agent(name="a", model=ScriptedModel(lambda r: reply("hi")), max_parallel_calls=0)


# -- the property: random batches, completion orders and stops ------------------


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[str], list[int], int]:
    """Kinds of a batch's calls, the order the remote ones end in, and a stop point."""
    kinds = draw(st.lists(st.sampled_from(["remote", "local"]), min_size=1, max_size=6))
    remote = [i for i, kind in enumerate(kinds) if kind == "remote"]
    order = draw(st.permutations(remote))
    stop_after = draw(st.integers(min_value=0, max_value=len(remote)))
    return kinds, list(order), stop_after


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches())
def test_every_call_gets_exactly_one_result_in_call_order_across_stops(
    batch: tuple[list[str], list[int], int],
) -> None:
    kinds, order, stop_after = batch
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(_run_stopped_batch(Path(folder) / "s.db", kinds, order, stop_after))


async def _run_stopped_batch(path: Path, kinds: list[str], order: list[int], stop: int) -> None:
    held = Held()
    runs: list[str] = []

    @tool
    def record(n: int, ctx: ToolContext) -> str:
        """Write a row (local)."""
        runs.append(ctx.call_id)
        ctx.store.execute("create table if not exists rows (call_id text not null)")
        ctx.store.execute("insert into rows (call_id) values (?)", [ctx.call_id])
        return f"row {n}"

    work = held.tool()
    ids = [f"c{i}" for i in range(len(kinds))]
    calls = [
        call("work" if kind == "remote" else "record", {"n": i}, id=ids[i])
        for i, kind in enumerate(kinds)
    ]
    expected = [
        (ids[i], f"r{i}" if kind == "remote" else f"row {i}") for i, kind in enumerate(kinds)
    ]

    def agent() -> Agent:
        return Agent(
            name="a", model=ScriptedModel(batch_then_results(*calls)), tools=[work, record]
        )

    store = await SQLiteStore.open(str(path))
    try:
        sink = Committed()
        async with AgentRuntime(store, agent(), sink=sink) as runtime:
            await runtime.session("a", "s1").start("go", turn_id="t1")
            for i in order[:stop]:
                await held.wait_started(ids[i])
                held.release[ids[i]].set()
                await sink.wait_for(ids[i])
            if stop < len(order):
                # the rest are in flight when the runtime stops under them
                for i in order[stop:]:
                    await held.wait_started(ids[i])
        ended_before = [line.split()[1] for line in held.log if line.startswith("end")]
        for event in held.release.values():
            event.set()
        held.log.clear()
        async with AgentRuntime(store, agent()) as runtime:
            result = await asyncio.wait_for(runtime.session("a", "s1").result("t1"), WAIT)

        assert isinstance(result, Completed), result
        assert await tool_results(store) == expected
        # a remote call whose result committed never ran again; the others ran again once
        again = [line.split()[1] for line in held.log if line.startswith("start")]
        owed_again = [ids[i] for i in order if ids[i] not in ended_before]
        assert sorted(again) == sorted(owed_again)
        # local calls ran, and wrote, exactly once: inside the transaction of their result
        locals_ = [ids[i] for i, kind in enumerate(kinds) if kind == "local"]
        assert sorted(runs) == sorted(locals_)
        if locals_:
            assert sorted(await select(store, "select call_id from rows")) == [
                (c,) for c in sorted(locals_)
            ]
    finally:
        await store.close()
