"""Issue 22, point 1: delegation through restarts, a second process and a call cut short.

What a review found and these show fixed: a mirror answered in a process whose
copy of the parent predates the mirror still answers the child (never the
parent); a parent cancelled just before its process stopped has its child
stopped by the next start; a delegating call stopped by its own time limit stops
its child; a child answered while its parent waited shows its steps to the
parent's watchers once the parent runs on; and a mirror answered at a replica
while another process writes the parent answers the child at once, the parent
running on once it is free.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent import (
    Agent,
    AgentRuntime,
    Cancelled,
    Completed,
    SQLiteStore,
    Suspended,
    ToolContext,
    TurnEvent,
    tool,
)
from agent.core.records import SessionKey
from agent.engine.lease import SessionLease, new_holder, retire
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_process import DEADLINE_SECONDS
from tests.agent.test_delegation import (
    OPENING,
    WAIT,
    approving_tool,
    ending,
    lead,
    researcher,
    results_of,
)
from tests.agent.test_leases import Stores, stores

__all__ = ["stores"]  # the fixture


def asking_twice(request: Any) -> Any:
    done = results_of(request)
    if len(done) < 2:
        return reply("", call("publish", id=f"r{len(done) + 1}"))
    return reply(f"found {'+'.join(str(m.result) for m in done)}")


async def test_a_mirror_answered_in_a_process_that_did_not_know_it_answers_the_child(
    stores: Stores,
):
    ran: list[str] = []
    agents = [lead(), researcher([approving_tool(ran)], script=asking_twice)]
    store_a, store_b = stores
    async with AgentRuntime(store_a, agents) as a, AgentRuntime(store_b, agents) as b:
        parent_a = a.session("lead", "s1")
        turn_id = await parent_a.start(OPENING)
        assert isinstance(await parent_a.result(turn_id), Suspended)
        [first] = await parent_a.pending()

        # the other process answers the child itself; the child asks again, and the
        # parent, run on there, waits on a new mirror
        parent_b = b.session("lead", "s1")
        asks_again = await ending(parent_b, turn_id)
        await b.session("researcher", "s1/c1").resume(f"{turn_id}/c1", "publish", True, by="U1")
        await asyncio.wait_for(asks_again, WAIT)
        [second] = await parent_b.pending()
        assert second.id != first.id
        assert [r.id for r in await parent_a.pending()] == [first.id]  # a's copy is behind

        # the card of the new mirror is clicked where the old copy is kept
        done_in_a = await ending(parent_a, turn_id)
        await parent_a.resume(turn_id, second.id, False, by="U1")
        await asyncio.wait_for(done_in_a, WAIT)
        done = await parent_a.result(turn_id)
        steps = await store_a.load_steps(parent_a.key, turn_id)

    assert done == Completed(turn_id=turn_id, text="lead: found published+kept")
    assert ran == ["publish:True", "publish:False"]
    # the parent's mirrors were settled by the child's moves, never answered themselves
    assert steps[f"input:{turn_id}:{second.id}"]["child_moved_on"] is True
    assert "value" not in steps[f"input:{turn_id}:{second.id}"]


async def test_a_child_whose_parent_was_cancelled_just_before_a_stop_is_stopped_at_start(
    tmp_path: Path,
):
    agents = [lead(), researcher([approving_tool([])])]
    path = tmp_path / "sessions.db"
    store = await SQLiteStore.open(path)
    async with AgentRuntime(store, agents) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        assert await session.cancel(turn_id) is True
        # the runtime closes before the cancel's cascade task ran
    await store.close()

    store = await SQLiteStore.open(path)
    try:
        async with AgentRuntime(store, agents) as runtime:
            [record] = await runtime.session("researcher", "s1/c1").turns()
            parent = await runtime.session("lead", "s1").result(turn_id)
    finally:
        await store.close()

    assert parent == Cancelled(turn_id=turn_id, reason="requested")
    assert record.result == Cancelled(turn_id=f"{turn_id}/c1", reason="requested")


async def test_a_delegating_call_past_its_own_time_limit_stops_its_child(store):
    @tool(timeout=0.2)
    async def research(task: str, ctx: ToolContext) -> Any:
        """Delegate, but not for long."""
        return await ctx.delegate("researcher", task)

    @tool
    async def dig() -> str:
        """Dig for a long time."""
        await asyncio.sleep(60)
        return "deep"

    def script(request: Any) -> Any:
        done = results_of(request)
        if not done:
            return reply("", call("research", {"task": "x"}, id="c1"))
        return reply(f"lead: {done[-1].result}")

    boss = Agent(name="lead", model=ScriptedModel(script), tools=[research])
    async with AgentRuntime(store, [boss, researcher([dig], tool_cancel_grace=0.05)]) as runtime:
        done = await runtime.session("lead", "s1").turn(OPENING)
        child = await asyncio.wait_for(
            runtime.session("researcher", "s1/c1").result(f"{done.turn_id}/c1"), WAIT
        )

    assert "did not finish within 0.2 s" in done.text
    assert child == Cancelled(turn_id=f"{done.turn_id}/c1", reason="requested")


async def test_a_child_answered_while_its_parent_waited_shows_its_steps_once_the_parent_runs_on(
    store,
):
    async with AgentRuntime(store, [lead(), researcher([approving_tool([])])]) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        [mirror] = await session.pending()
        seen: list[TurnEvent] = []
        stop = await session.observe(seen.append, turn_id=turn_id)
        await session.resume(turn_id, mirror.id, True, by="U1")
        done = await asyncio.wait_for(session.result(turn_id), WAIT)
        stop()

    assert isinstance(done, Completed)
    forwarded = [(e.type, getattr(e, "name", None)) for e in seen if e.via == turn_id]
    assert ("action.completed", "publish") in forwarded
    assert ("turn.completed", None) in forwarded
    assert seen[-1].type == "turn.completed"
    assert seen[-1].turn_id == turn_id


async def test_a_mirror_answered_at_another_replica_answers_the_child_once_the_parent_is_free(
    stores: Stores,
):
    ran: list[str] = []

    def replica(store: Any) -> AgentRuntime:
        agents = [lead(), researcher([approving_tool(ran)])]
        return AgentRuntime(store, agents, hand_over=True, sweep_seconds=0.05)

    async with replica(stores[0]) as a, replica(stores[1]) as b:
        parent_a = a.session("lead", "s1")
        turn_id = await parent_a.start(OPENING)
        assert isinstance(await parent_a.result(turn_id), Suspended)
        # a third process writes the parent's session just now
        owner = SessionLease(stores[0], SessionKey("lead", "s1"), new_holder(), seconds=60.0)
        assert await asyncio.wait_for(owner.take(), DEADLINE_SECONDS)

        parent_b = b.session("lead", "s1")
        [mirror] = await parent_b.pending()
        answering = asyncio.ensure_future(parent_b.resume(turn_id, mirror.id, True, by="U1"))
        child = b.session("researcher", "s1/c1")
        answered = await ending(child, f"{turn_id}/c1")
        await asyncio.wait_for(answered, DEADLINE_SECONDS)  # the child ran on, at once
        assert ran == ["publish:True"]
        await owner.drop()  # once it lets go, the parent's mirror is settled and it runs on
        await asyncio.wait_for(answering, DEADLINE_SECONDS)
        done = await asyncio.wait_for(parent_b.result(turn_id), DEADLINE_SECONDS)
        retire(owner.holder)

    assert done == Completed(turn_id=turn_id, text="lead: found published")
    assert ran == ["publish:True"]
    assert await stores[0].read_inbox(SessionKey("lead", "s1")) == []


async def test_a_child_that_asks_again_while_its_parent_waits_on_another_is_shown_at_once(store):
    ran: list[str] = []

    def two_tasks(request: Any) -> Any:
        done = results_of(request)
        if not done:
            calls = [
                call("research", {"task": t}, id=c) for c, t in (("c1", "twice"), ("c2", "once"))
            ]
            return reply("", *calls)
        return reply(" ".join(str(m.result) for m in done))

    def by_task(request: Any) -> Any:
        done = results_of(request)
        wanted = 2 if request.messages[0].text == "twice" else 1
        if len(done) < wanted:
            return reply("", call("publish", id=f"r{len(done) + 1}"))
        return reply(f"found {'+'.join(str(m.result) for m in done)}")

    boss = Agent(name="lead", model=ScriptedModel(two_tasks), tools=lead().tools)
    async with AgentRuntime(store, [boss, researcher([approving_tool(ran)], script=by_task)]) as rt:
        session = rt.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        first, other = await session.pending()

        # the first child asks again; its parent still waits on the second child
        asks_again = await ending(session, turn_id)
        await session.resume(turn_id, first.id, True, by="U1")
        await asyncio.wait_for(asks_again, WAIT)
        again, same = await session.pending()
        assert again.child is not None
        assert (again.call_id, again.child.input_id) == ("c1", "publish@r2")
        assert same == other  # the other card is the same card: its id did not change

        await session.resume(turn_id, again.id, False, by="U1")
        await session.resume(turn_id, same.id, True, by="U1")
        done = await asyncio.wait_for(session.result(turn_id), WAIT)

    assert done == Completed(turn_id=turn_id, text="found published+kept found published")
    assert sorted(ran) == ["publish:False", "publish:True", "publish:True"]
