"""Issue 22, point 3: two calls of one batch may each ask a person; each answer applies alone.

The calls of a batch run together, so two of them may ask at once: the turn
suspends on both (``Suspended.request`` and ``others``, in call order, both in
one ``input.requested``), `pending` lists both, an answer to one is stored and
leaves the turn waiting on the other, and once the last is in the turn runs
on, each call getting its own answer. A call of the batch that needed nobody
keeps its result meanwhile, and a cancel of the waiting turn places it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    Cancelled,
    Completed,
    InboundEvent,
    ResumeConflictError,
    Suspended,
    ToolContext,
    ToolMessage,
    TurnInput,
    tool,
)
from agent.core.records import SessionKey
from agent.testing import RecordingSink, ScriptedModel, call, reply

KEY = SessionKey("a", "s1")
WAIT = 10.0
OPENING = TurnInput(
    text="ship both", user="U1", event=InboundEvent(source="slack", user="U1", attested=True)
)
CALLS = [
    call("post", {"channel": "ops"}, id="c1"),
    call("count", id="c2"),
    call("post", {"channel": "sales"}, id="c3"),
]


def script(request: Any) -> Any:
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    if not results:
        return reply("Posting to both.", *CALLS)
    return reply("; ".join(f"{m.call_id}: {m.result}" for m in results))


def agent_with(posted: list[str], ttl: float | None = None) -> Agent:
    @tool
    async def post(channel: str, ctx: ToolContext) -> dict[str, Any]:
        """Post to a channel once someone approves."""
        approved = await ctx.request_input(
            id=f"post-{channel}", prompt=f"Post to #{channel}?", schema={"type": "boolean"}, ttl=ttl
        )
        if approved is True:
            posted.append(channel)
        return {"posted": approved is True}

    @tool
    async def count() -> int:
        """Count something nobody needs to approve."""
        return 3

    return Agent(name="a", model=ScriptedModel(script), tools=[post, count])


async def test_two_calls_that_ask_in_one_batch_wait_together_and_are_answered_one_by_one(store):
    posted: list[str] = []
    sink = RecordingSink()
    async with AgentRuntime(store, agent_with(posted), sink=sink) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start(OPENING)
        parked = await session.result(turn_id)

        assert isinstance(parked, Suspended)
        assert [r.id for r in parked.requests] == ["post-ops", "post-sales"]
        assert [r.call_id for r in await session.pending()] == ["c1", "c3"]
        [asked] = [e for e in sink.events if e.type == "input.requested"]
        assert asked.request["id"] == "post-ops"
        assert [other["id"] for other in asked.others] == ["post-sales"]
        # the call that needed nobody has its result; it waits behind c1, unplaced
        steps = await store.load_steps(KEY, turn_id)
        assert steps["tool:1:c2"] == {"result": 3, "is_error": False}

        await session.resume(turn_id, "post-sales", True, by="U1")
        # one answer is in: the turn waits on the other, and nothing ran yet
        assert await session.status() == "suspended"
        assert [r.id for r in await session.pending()] == ["post-ops"]
        assert posted == []
        with pytest.raises(ResumeConflictError, match="already answered by U1"):
            await session.resume(turn_id, "post-sales", False, by="U1")

        await session.resume(turn_id, "post-ops", False, by="U1")
        done = await session.result(turn_id)

    assert done == Completed(
        turn_id=turn_id,
        text="c1: {'posted': False}; c2: 3; c3: {'posted': True}",
    )
    assert posted == ["sales"]
    assert await session.pending() == ()
    results = [m.call_id for m in (await store.load(KEY)).transcript if isinstance(m, ToolMessage)]
    assert results == ["c1", "c2", "c3"]


async def test_a_cancel_of_a_turn_waiting_on_two_requests_keeps_the_result_of_the_call_that_ran(
    store,
):
    async with AgentRuntime(store, agent_with([])) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        await session.resume(turn_id, "post-ops", True, by="U1")  # one answered, one open

        assert await session.cancel(turn_id) is True
        assert await session.result(turn_id) == Cancelled(turn_id=turn_id, reason="requested")

    results = {
        m.call_id: m.result
        for m in (await store.load(KEY)).transcript
        if isinstance(m, ToolMessage)
    }
    assert list(results) == ["c1", "c2", "c3"]
    assert results["c2"] == 3  # it ran before the turn waited: its own result is placed
    assert results["c1"] == results["c3"] == {"cancelled": True}


async def test_requests_of_one_batch_nobody_answers_expire_each_and_the_turn_runs_on(store):
    async with AgentRuntime(store, agent_with([], ttl=0.05)) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start(OPENING)
        ended = asyncio.Event()
        await session.observe(
            lambda e: ended.set() if e.type == "turn.completed" else None, turn_id=turn_id
        )
        await asyncio.wait_for(ended.wait(), WAIT)
        done = await session.result(turn_id)

    assert done == Completed(
        turn_id=turn_id, text="c1: {'posted': False}; c2: 3; c3: {'posted': False}"
    )
    for input_id in ("post-ops", "post-sales"):
        answer = await session.answer_of(turn_id, input_id)
        assert answer is not None
        assert answer.expired
