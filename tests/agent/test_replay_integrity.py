"""Issue 22, point 5: a replay that finds the store disagreeing with the loop stops untouched.

Each test leaves a turn unfinished mid-batch (its runtime closed under a tool,
as a deploy would), then makes the store disagree with where the loop stands:
a reply stored as a step with no message in the transcript, or a call's step
saying its result is placed while the transcript still owes it. The next
runtime replays the turn and must raise `ReplayIntegrityError` naming both
positions, write nothing more, and still end the stream of anyone watching.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    ReplayIntegrityError,
    StoreError,
    ToolContext,
    ToolMessage,
    is_replay_integrity_error,
    tool,
)
from agent.core.records import Commit, SessionKey, StoredStep
from agent.testing import RecordingSink, ScriptedModel, call, reply

KEY = SessionKey("a", "s1")
WAIT = 10.0


def script(request: Any) -> Any:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return reply(
            "Two lookups.", call("look", {"n": 1}, id="c1"), call("look", {"n": 2}, id="c2")
        )
    return reply("done")


async def stopped_mid_batch(store: Any) -> None:
    """Leave turn t1 running, its first call's result committed and its second in flight."""
    reached = asyncio.Event()

    @tool
    async def look(n: int, ctx: ToolContext) -> str:
        """Look something up."""
        if n == 2:
            reached.set()
            await asyncio.Event().wait()  # until the runtime closes under it
        return f"r{n}"

    agent = Agent(name="a", model=ScriptedModel(script), tools=[look], max_parallel_calls=1)
    async with AgentRuntime(store, agent) as runtime:
        await runtime.session("a", "s1").start("go", turn_id="t1")
        await asyncio.wait_for(reached.wait(), WAIT)


async def snapshot(store: Any) -> tuple[Any, ...]:
    state = await store.load(KEY)
    return (
        list(state.transcript),
        state.turns["t1"],
        state.status,
        await store.load_steps(KEY, "t1"),
    )


@tool
async def look(n: int) -> str:
    """Look something up."""
    return f"r{n}"


async def replay_expecting_integrity_error(store: Any) -> ReplayIntegrityError:
    before = await snapshot(store)
    sink = RecordingSink()
    model = ScriptedModel(script)
    async with AgentRuntime(store, Agent(name="a", model=model, tools=[look]), sink=sink) as rt:
        with pytest.raises(ReplayIntegrityError) as raised:
            await asyncio.wait_for(rt.session("a", "s1").result("t1"), WAIT)
    # nothing more was written: no ending, no closing results, no retry bookkeeping
    after = await snapshot(store)
    assert after[0] == before[0]
    assert after[2:] == before[2:]
    assert (after[1].status, after[1].result) == (before[1].status, before[1].result)
    assert list(model.requests) == []  # the model was never asked from a history that disagrees
    # whoever watched the turn was told it stopped: the stream ends
    assert sink.events[-1].type == "turn.failed"
    assert "transcript" in sink.events[-1].error
    return raised.value


async def test_a_reply_stored_where_the_transcript_has_none_stops_the_replay(store):
    await stopped_mid_batch(store)
    index = len((await store.load(KEY)).transcript) + 1  # past the owed call's result
    # the owed call ends now, and a reply step for the next index is stored with no message
    await store.commit(KEY, Commit(steps=(StoredStep(f"model:{index}", "t1", {"message": index}),)))

    error = await replay_expecting_integrity_error_after_the_call(store, index)
    assert error.expected == f"no step model:{index} (the transcript ends at {index - 1})"
    assert error.found == f"step model:{index} placed at index {index}"


async def replay_expecting_integrity_error_after_the_call(store: Any, index: int) -> Any:
    """As `replay_expecting_integrity_error`, for a replay that first commits the owed call."""
    sink = RecordingSink()
    model = ScriptedModel(script)
    async with AgentRuntime(store, Agent(name="a", model=model, tools=[look]), sink=sink) as rt:
        with pytest.raises(ReplayIntegrityError) as raised:
            await asyncio.wait_for(rt.session("a", "s1").result("t1"), WAIT)
    state = await store.load(KEY)
    assert len(state.transcript) == index  # the owed result committed; nothing after it
    assert state.turns["t1"].status == "running"  # no ending was written
    assert list(model.requests) == []
    assert sink.events[-1].type == "turn.failed"
    return raised.value


async def test_a_call_whose_step_says_placed_while_the_transcript_owes_it_stops_the_replay(store):
    await stopped_mid_batch(store)
    state = await store.load(KEY)
    at = len(state.transcript) - 2  # the reply that made the calls
    bogus = StoredStep(f"tool:{at}:c2", "t1", {"message": 7, "is_error": False})
    await store.commit(KEY, Commit(steps=(bogus,)))

    error = await replay_expecting_integrity_error(store)
    assert error.turn_id == "t1"
    assert error.expected == f"the result of call c2 at transcript index {len(state.transcript)}"
    assert error.found == f"step tool:{at}:c2 placed at index 7"
    assert str(error).endswith(
        f"(the loop expected {error.expected}; the store holds {error.found})"
    )


def test_is_replay_integrity_error_sees_through_causes_and_groups():
    error = ReplayIntegrityError("x", turn_id="t", expected="a", found="b")
    assert is_replay_integrity_error(error)
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = error  # as ``raise RuntimeError(...) from error`` leaves it
    assert is_replay_integrity_error(wrapped)
    assert is_replay_integrity_error(ExceptionGroup("batch", [ValueError("v"), error]))
    assert not is_replay_integrity_error(StoreError("a store error of another kind"))
    assert isinstance(error, StoreError)  # a store failure still, for code that catches those
