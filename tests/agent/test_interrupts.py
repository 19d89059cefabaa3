"""Issue 21, points 1, 2 and 4: interrupts, holds, waits with a timeout, and retries.

An exact-turn interrupt ends one turn `Interrupted` and lets the next run; a
session interrupt does that to the turn at work and holds the session, so its
queued turns, and new ones, wait until `resume_session`; the hold is stored. A
wait with a timeout gives up waiting and leaves the turn be. A retry answers an
ended, unanswered turn's input again as a new, linked turn. Each runs on every
store.
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
    ConflictError,
    Failed,
    Interrupted,
    ModelRequest,
    SQLiteStore,
    ToolContext,
    ToolMessage,
    TurnEvent,
    UserMessage,
    WaitTimedOut,
    tool,
)
from agent.core.records import Commit, SessionKey
from agent.errors import ModelError
from agent.models.anthropic.wire import api_messages
from agent.testing import ScriptedModel, call, reply

from .wire_checks import assert_valid_api_messages

WAIT = 10.0


class Hangs:
    """A remote tool, ``hang``, that reports it was entered and then waits for good."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    def tool(self) -> Any:
        entered = self.entered

        @tool
        async def hang(ctx: ToolContext) -> str:
            """Wait until stopped."""
            entered.set()
            await asyncio.Event().wait()
            return "never"

        return hang


def opening(request: ModelRequest) -> str:
    return next(
        m.text
        for m in request.messages
        if isinstance(m, UserMessage) and m.turn_id == request.turn_id
    )


def script(request: ModelRequest) -> Any:
    """``hang`` calls the tool that never returns; ``fail`` fails; anything else echoes."""
    text, last = opening(request), request.messages[-1]
    if isinstance(last, ToolMessage):
        return reply(f"after {last.result}")
    if text == "hang":
        return reply("", call("hang", id="c1"))
    if text == "fail" and not request.turn_id.endswith(("retry", "retry'")):
        raise ModelError("the model is down", retryable=False)
    return reply(f"you said {text}")


def agent_with(hangs: Hangs) -> Agent:
    # a running tool gets a grace to finish when its turn is stopped; these never do
    return Agent(
        name="a", model=ScriptedModel(script), tools=[hangs.tool()], tool_cancel_grace=0.05
    )


# -- an exact-turn interrupt -----------------------------------------------------------


async def test_an_interrupted_turn_ends_interrupted_and_the_next_turn_runs(store):
    hangs = Hangs()
    events: list[TurnEvent] = []
    async with AgentRuntime(store, agent_with(hangs)) as runtime:
        session = runtime.session("a", "s")
        stopped = await session.start("hang")
        await session.observe(events.append, turn_id=stopped)
        after = await session.start("next")
        await asyncio.wait_for(hangs.entered.wait(), WAIT)
        assert await session.interrupt_turn(stopped)

        result = await session.result(stopped)
        assert isinstance(result, Interrupted)
        assert (result.reason, result.detail) == ("interrupted", "an operator interrupted it")
        assert (await session.result(after)).text == "you said next"
        assert not await session.interrupt_turn(stopped)  # it had already ended

    assert [e.type for e in events][-1] == "turn.interrupted"
    state = await store.load(SessionKey("a", "s"))
    [closed] = [m for m in state.transcript if isinstance(m, ToolMessage)]
    assert closed.result == {
        "interrupted": True,
        "reason": "interrupted",
        "error": "stopped: the turn was interrupted (an operator interrupted it) while this "
        "call ran, and it did not finish within 0.05 s",
    }
    assert_valid_api_messages(api_messages(list(state.transcript)))


async def test_a_cancel_refuses_the_reasons_interrupts_reserve(store):
    async with AgentRuntime(store, agent_with(Hangs())) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("hang")
        for reason in ("interrupted", "timeout", "held", "lost"):
            with pytest.raises(ValueError, match=f"reason '{reason}' is reserved"):
                await session.cancel(turn_id, reason)
        assert await session.cancel(turn_id)  # a plain cancel still ends it cancelled
        assert isinstance(await session.result(turn_id), Cancelled)


# -- a session interrupt holds the session ------------------------------------------------


async def test_a_session_interrupt_holds_queued_and_new_turns_until_resumed(store):
    hangs = Hangs()
    async with AgentRuntime(store, agent_with(hangs)) as runtime:
        session = runtime.session("a", "s")
        at_work = await session.start("hang")
        queued = await session.start("one")
        await asyncio.wait_for(hangs.entered.wait(), WAIT)

        assert await session.interrupt("the operator is looking into it") == [at_work]
        assert isinstance(await session.result(at_work), Interrupted)
        assert await session.held() == "the operator is looking into it"
        arrived = await session.start("two")  # a held session refuses nothing: it queues

        waited = await session.wait(queued, timeout=0.2)
        assert waited == WaitTimedOut(turn_id=queued, waited=0.2)
        statuses = {t.turn_id: t.status for t in await session.turns()}
        assert (statuses[queued], statuses[arrived]) == ("queued", "queued")

        assert await session.resume_session()
        assert not await session.resume_session()  # no longer held
        assert await session.held() is None
        assert (await session.result(queued)).text == "you said one"
        assert (await session.result(arrived)).text == "you said two"
        ordered = [t.turn_id for t in await session.turns()]
        assert ordered == [at_work, queued, arrived]


async def test_a_session_interrupt_with_nothing_at_work_still_holds(store):
    async with AgentRuntime(store, agent_with(Hangs())) as runtime:
        session = runtime.session("a", "s")
        assert (await session.turn("first")).text == "you said first"
        assert await session.interrupt() == []
        assert await session.held() == "an operator interrupted the session"
        waiting = await session.start("second")
        assert isinstance(await session.wait(waiting, timeout=0.1), WaitTimedOut)
        assert await session.resume_session()
        assert (await session.result(waiting)).text == "you said second"


async def test_a_hold_outlives_a_restart(tmp_path):
    path = tmp_path / "sessions.db"
    store = await SQLiteStore.open(path)
    async with AgentRuntime(store, agent_with(Hangs())) as runtime:
        session = runtime.session("a", "s")
        await session.interrupt("held over the deploy")
        waiting = await session.start("after the deploy")
    await store.close()

    store = await SQLiteStore.open(path)
    async with AgentRuntime(store, agent_with(Hangs())) as runtime:
        session = runtime.session("a", "s")
        assert await session.held() == "held over the deploy"
        assert isinstance(await session.wait(waiting, timeout=0.2), WaitTimedOut)
        assert await session.resume_session()
        assert (await session.result(waiting)).text == "you said after the deploy"
    await store.close()


# -- a wait with a timeout -----------------------------------------------------------------


async def test_a_wait_that_times_out_leaves_the_turn_running(store):
    hangs = Hangs()
    async with AgentRuntime(store, agent_with(hangs)) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("hang")
        await asyncio.wait_for(hangs.entered.wait(), WAIT)
        assert await session.wait(turn_id, timeout=0.05) == WaitTimedOut(
            turn_id=turn_id, waited=0.05
        )
        [record] = await session.turns()
        assert record.status == "running"
        assert await session.cancel(turn_id)  # still there to stop
        assert isinstance(await session.wait(turn_id, timeout=WAIT), Cancelled)
        done = await session.start("quick")
        assert isinstance(await session.wait(done, timeout=WAIT), Completed)


# -- retry ----------------------------------------------------------------------------------


async def test_a_failed_turn_is_retried_twice_as_two_linked_turns(store):
    async with AgentRuntime(store, agent_with(Hangs())) as runtime:
        session = runtime.session("a", "s")
        failed = await session.start("fail", turn_id="t")
        assert isinstance(await session.result(failed), Failed)

        first, second = await session.retry("t"), await session.retry("t")
        assert (first, second) == ("t.retry", "t.retry'")
        assert (await session.result(first)).text == "you said fail"
        assert (await session.result(second)).text == "you said fail"
        records = {t.turn_id: t for t in await session.turns()}
        assert records["t"].status == "failed"  # the retried turn stays as it ended
        assert (records[first].retry_of, records[second].retry_of) == ("t", "t")
        assert records[first].input == records["t"].input

        with pytest.raises(ConflictError, match="is completed; only a failed, cancelled"):
            await session.retry(first)


async def test_cancelled_and_interrupted_turns_are_retried_and_unfinished_ones_refused(store):
    hangs = Hangs()
    async with AgentRuntime(store, agent_with(hangs)) as runtime:
        session = runtime.session("a", "s")
        interrupted = await session.start("hang", turn_id="i")
        cancelled = await session.start("first", turn_id="c")  # queued behind it
        assert await session.cancel(cancelled)
        assert isinstance(await session.result(cancelled), Cancelled)
        await asyncio.wait_for(hangs.entered.wait(), WAIT)
        with pytest.raises(ConflictError, match="turn i is running"):
            await session.retry(interrupted)
        assert await session.interrupt_turn(interrupted)
        assert isinstance(await session.result(interrupted), Interrupted)

        again = await session.retry(cancelled)
        assert (await session.result(again)).text == "you said first"
        hangs.entered.clear()
        resumed = await session.retry(interrupted)
        await asyncio.wait_for(hangs.entered.wait(), WAIT)  # it runs the work again
        assert {t.turn_id: t.retry_of for t in await session.turns()} == {
            "i": None,
            "c": None,
            "c.retry": "c",
            "i.retry": "i",
        }
        assert await session.cancel(resumed)


async def test_a_retry_under_a_chosen_id_is_admitted_once_however_often_it_is_asked(store):
    async with AgentRuntime(store, agent_with(Hangs())) as runtime:
        session = runtime.session("a", "s")
        assert isinstance(await session.result(await session.start("fail", turn_id="t")), Failed)
        assert await session.retry("t", new_turn_id="t.retry") == "t.retry"
        assert await session.retry("t", new_turn_id="t.retry") == "t.retry"  # asked again
        assert (await session.result("t.retry")).text == "you said fail"
        with pytest.raises(ConflictError, match="turn id t is taken"):
            await session.retry("t.retry", new_turn_id="t")
        assert [t.turn_id for t in await session.turns()] == ["t", "t.retry"]


async def test_a_retry_of_an_unknown_turn_says_so(store):
    from agent import UnknownTurnError

    async with AgentRuntime(store, agent_with(Hangs())) as runtime:
        with pytest.raises(UnknownTurnError):
            await runtime.session("a", "s").retry("nobody")


# -- the store keeps the hold ---------------------------------------------------------------


async def test_the_store_keeps_a_sessions_hold_until_released(store):
    key = SessionKey("a", "held")
    await store.commit(key, Commit(hold="why"))
    assert (await store.load(key)).hold == "why"
    await store.commit(key, Commit(release_hold=True, hold="why again"))
    assert (await store.load(key)).hold == "why again"  # released, then held anew
    await store.commit(key, Commit(release_hold=True))
    assert (await store.load(key)).hold is None
