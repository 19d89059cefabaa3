"""Replicas hand work to the one that writes a session, through the store's inbox.

Two runtimes with ``hand_over=True`` on one database (a SQLite file, a
PostgreSQL schema) stand for two replicas behind a load balancer: A writes the
session, B gets the person's next message, click or Stop. B hands it over; A
carries it out as if it had got it itself, exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    Cancelled,
    Completed,
    Interrupted,
    ModelRequest,
    ResumeAuthorizationError,
    Suspended,
    TurnInput,
    UnknownTurnError,
    WaitTimedOut,
)
from agent.core.model import ModelReply
from agent.engine.lease import SessionLease, new_holder, retire
from agent.engine.session._inbox import Inbox
from agent.stores.postgres import PostgresStore
from agent.testing import ScriptedModel, reply
from tests.agent.child_process import DEADLINE_SECONDS
from tests.agent.test_hitl import Ledger, post_tool, script, speaker_input
from tests.agent.test_leases import KEY, Stores, stores

__all__ = ["stores"]  # the fixture

SWEEP = 0.05
"""Each replica's sweep, short: it is what finds the handed-over work (no NOTIFY on SQLite)."""


class Answering:
    """A model whose answer to ``hold`` waits until the test lets it go; others answer at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[str] = []
        self.holding = asyncio.Event()
        self.go = asyncio.Event()
        self.model = ScriptedModel(self._answer)

    async def _answer(self, request: ModelRequest) -> ModelReply:
        said = request.messages[-1].text
        self.asked.append(said)
        if said == "hold":
            self.holding.set()
            await self.go.wait()
        return reply(f"{self.name} answers {said}")


def replica(store: Any, model: Any, **agent: Any) -> AgentRuntime:
    return AgentRuntime(
        store, Agent(name="a", model=model, **agent), hand_over=True, sweep_seconds=SWEEP
    )


@pytest.fixture
async def pair(
    stores: Stores,
) -> AsyncIterator[tuple[Answering, Answering, AgentRuntime, AgentRuntime]]:
    a_model, b_model = Answering("A"), Answering("B")
    a, b = replica(stores[0], a_model.model), replica(stores[1], b_model.model)
    async with a, b:
        yield a_model, b_model, a, b


async def test_a_follow_up_at_another_replica_supersedes_the_running_turn_there(pair):
    a_model, b_model, a, b = pair
    await a.session("a", "s1").start("hold", turn_id="t1")
    await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)

    # B cannot take the session A writes: it hands the follow-up over, and returns at once
    here = b.session("a", "s1")
    assert await here.start("next", turn_id="t2", replace=True) == "t2"
    assert here.was_handed_over("t2")
    second = await asyncio.wait_for(here.result("t2"), DEADLINE_SECONDS)

    assert isinstance(second, Completed)
    assert second.text == "A answers next"  # run by A, the replica that writes the session
    first = await a.session("a", "s1").result("t1")
    assert isinstance(first, Cancelled)
    assert first.reason == "replaced"
    assert b_model.asked == []
    assert await a.store.read_inbox(KEY) == []


async def test_the_same_message_handed_over_by_two_replicas_is_one_turn(stores: Stores):
    a_model, b_model, c_model = Answering("A"), Answering("B"), Answering("C")
    a = replica(stores[0], a_model.model)
    b = replica(stores[1], b_model.model)
    c = replica(stores[1], c_model.model)  # a third replica, on B's connection
    async with a, b, c:
        await a.session("a", "s1").start("hold", turn_id="t1")
        await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)
        # Slack's retry of one event lands on another replica than the first delivery
        await b.session("a", "s1").start("again", turn_id="t2")
        await c.session("a", "s1").start("again", turn_id="t2")
        a_model.go.set()
        done = await asyncio.wait_for(c.session("a", "s1").result("t2"), DEADLINE_SECONDS)

    assert isinstance(done, Completed)
    # once A let the session go, whichever replica swept first ran it: one of them, once
    asked = a_model.asked + b_model.asked + c_model.asked
    assert sorted(asked) == ["again", "hold"]
    turns = (await stores[0].load(KEY)).turns
    assert list(turns) == ["t1", "t2"]


async def test_a_turn_nobody_admitted_or_handed_over_is_unknown_at_once_on_a_replica(pair):
    # A process that died between keeping a reply owed and admitting its turn leaves
    # nothing to wait for: the stream must say so, not wait for a start that never comes.
    a_model, _b_model, a, b = pair
    await a.session("a", "s1").start("hold", turn_id="t1")
    await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)
    here = b.session("a", "s1")

    with pytest.raises(UnknownTurnError):
        await asyncio.wait_for(here.result("never"), DEADLINE_SECONDS)
    with pytest.raises(UnknownTurnError):
        await asyncio.wait_for(anext(aiter(here.stream("never"))), DEADLINE_SECONDS)

    # one handed over by a third replica (in the inbox, not yet carried out) is awaited
    await b.store.post_inbox(
        KEY, "start", "t2", Inbox.start_body(TurnInput(text="next"), False), at=0
    )
    watched = asyncio.ensure_future(here.result("t2"))
    await asyncio.sleep(SWEEP * 4)
    assert not watched.done()
    a_model.go.set()
    done = await asyncio.wait_for(watched, DEADLINE_SECONDS)
    assert isinstance(done, Completed)
    assert done.text == "A answers next"


async def test_a_cancel_at_another_replica_stops_the_turn_where_it_runs(pair):
    a_model, _b_model, a, b = pair
    await a.session("a", "s1").start("hold", turn_id="t1")
    await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)

    assert await b.session("a", "s1").cancel("t1") is True
    ended = await asyncio.wait_for(a.session("a", "s1").result("t1"), DEADLINE_SECONDS)

    assert isinstance(ended, Cancelled)
    assert ended.reason == "requested"


async def test_an_interrupt_at_another_replica_stops_the_turn_where_it_runs(pair):
    a_model, _b_model, a, b = pair
    await a.session("a", "s1").start("hold", turn_id="t1")
    await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)

    assert await b.session("a", "s1").interrupt_turn("t1") is True
    ended = await asyncio.wait_for(a.session("a", "s1").result("t1"), DEADLINE_SECONDS)

    assert isinstance(ended, Interrupted)
    assert ended.reason == "interrupted"
    assert await b.session("a", "s1").held() is None  # one turn, not the session


async def test_a_steer_at_another_replica_reaches_the_turn_where_it_runs(pair):
    a_model, b_model, a, b = pair
    await a.session("a", "s1").start("hold", turn_id="t1")
    await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)

    taken = await b.session("a", "s1").steer("and this", steer_id="m2", by="U2")
    assert (taken.turn_id, taken.handed_over) == ("t1", True)
    while await a.store.read_inbox(KEY):  # noqa: ASYNC110 - A takes it on its sweep
        await asyncio.sleep(SWEEP)
    a_model.go.set()
    ended = await asyncio.wait_for(a.session("a", "s1").result("t1"), DEADLINE_SECONDS)

    assert isinstance(ended, Completed)
    assert ended.text == "A answers and this"  # A's model answered the steer too
    assert a_model.asked == ["hold", "and this"]
    assert b_model.asked == []
    [record] = await a.session("a", "s1").turns()
    assert [(s.steer_id, s.by) for s in record.steering] == [("m2", "U2")]
    assert await a.store.read_inbox(KEY) == []


async def test_a_hold_and_its_release_at_another_replica_are_carried_out_once(pair):
    a_model, _b_model, a, b = pair
    await a.session("a", "s1").start("hold", turn_id="t1")
    await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)
    here = b.session("a", "s1")

    assert await here.interrupt("held from B") == []  # handed to A, which stops t1
    ended = await asyncio.wait_for(a.session("a", "s1").result("t1"), DEADLINE_SECONDS)
    assert isinstance(ended, Interrupted)
    assert await here.held() == "held from B"
    await here.start("after", turn_id="t2")
    assert isinstance(await here.wait("t2", timeout=0.3), WaitTimedOut)  # held, wherever

    assert await here.resume_session()
    done = await asyncio.wait_for(here.result("t2"), DEADLINE_SECONDS)
    assert isinstance(done, Completed)
    assert await a.session("a", "s1").held() is None
    assert await a.store.read_inbox(KEY) == []


async def test_an_answer_at_another_replica_is_handed_over_and_carried_out_once(stores: Stores):
    ledger = Ledger()
    tools = [post_tool(ledger)]
    a = replica(stores[0], ScriptedModel(script), tools=tools)
    b = replica(stores[1], ScriptedModel(script), tools=tools)
    async with a, b:
        parked = await a.session("a", "s1").start(speaker_input(), turn_id="t1")
        assert isinstance(await a.session("a", "s1").result(parked), Suspended)
        # a third process writes the session just now (it is finishing something there)
        owner = SessionLease(stores[0], KEY, new_holder(), seconds=60.0)
        # (once A's worker, done with the turn for now, has let the session go)
        assert await asyncio.wait_for(owner.take(), DEADLINE_SECONDS)

        here = b.session("a", "s1")
        with pytest.raises(ResumeAuthorizationError):  # checked at B: U2 is not the speaker
            await here.resume("t1", "approve", True, by="U2")
        await here.resume("t1", "approve", True, by="U1")
        assert here.was_handed_over("t1")
        assert [i.kind for i in await stores[0].read_inbox(KEY)] == ["answer"]
        await owner.drop()  # once it lets go, whichever replica sweeps first carries it out
        done = await asyncio.wait_for(here.result("t1"), DEADLINE_SECONDS)
        retire(owner.holder)

    assert isinstance(done, Completed)
    assert ledger.posted == ["hello team"]
    assert await stores[0].read_inbox(KEY) == []


async def test_a_reset_at_another_replica_is_carried_out_where_the_session_is_written(pair):
    a_model, _b_model, a, b = pair
    await a.session("a", "s1").start("hold", turn_id="t1")
    await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)

    done = await asyncio.wait_for(b.session("a", "s1").reset(), DEADLINE_SECONDS)

    assert (done.previous_session, done.generation) == ("s1#g0", 1)
    archived = await a.session("a", "s1").archived(0)
    assert archived is not None
    ended = archived.turns["t1"].result
    assert isinstance(ended, Cancelled)
    assert ended.reason == "reset"


async def test_on_postgres_the_owner_is_woken_at_once_not_by_its_sweep(postgres_url: str):
    first, second = await PostgresStore.open(postgres_url), await PostgresStore.open(postgres_url)
    a_model = Answering("A")
    # no sweep at all: only the NOTIFY of the post can tell A there is work
    a = AgentRuntime(
        first, Agent(name="a", model=a_model.model), hand_over=True, sweep_seconds=None
    )
    b = AgentRuntime(
        second, Agent(name="a", model=Answering("B").model), hand_over=True, sweep_seconds=None
    )
    try:
        async with a, b:
            await a.session("a", "s1").start("hold", turn_id="t1")
            await asyncio.wait_for(a_model.holding.wait(), DEADLINE_SECONDS)
            await b.session("a", "s1").start("next", turn_id="t2", replace=True)
            done = await asyncio.wait_for(b.session("a", "s1").result("t2"), DEADLINE_SECONDS)
        assert isinstance(done, Completed)
        assert done.text == "A answers next"
    finally:
        await first.close()
        await second.close()
