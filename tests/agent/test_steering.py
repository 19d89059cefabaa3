"""Issue 21, point 3: steering a running turn.

`AgentSession.steer` stores input with the running turn and the turn's run
places it, as a user message, before its next model call: after the results of
the calls in flight, or after a reply that was streaming when it came (that
reply stays, and the model answers the steer next). Steering with no turn at
work, a suspended one, one being stopped, or one whose final reply is being
written is refused, saying which. Each runs on every store.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    AssistantMessage,
    Completed,
    Message,
    ModelRequest,
    SQLiteStore,
    Steered,
    Steering,
    SteerRefusedError,
    ToolContext,
    ToolMessage,
    TurnEvent,
    UserMessage,
    tool,
)
from agent.core.records import Commit, SessionKey
from agent.models.anthropic.wire import api_messages
from agent.testing import ScriptedModel, call, reply

from .wire_checks import assert_valid_api_messages

WAIT = 10.0


class Gates:
    """Where the turn stops until the test lets it on: in a tool, and in a model call."""

    def __init__(self) -> None:
        self.in_tool = asyncio.Event()
        self.tool_may_finish = asyncio.Event()
        self.in_model = asyncio.Event()
        self.model_may_answer = asyncio.Event()
        self.asked_with_steer: list[list[Message]] = []
        """The messages of each model request that ended with a steer (a request's view
        of the transcript is valid for that call only, so it is copied here)."""

    def tools(self) -> list[Any]:
        gates = self

        @tool
        async def look(ctx: ToolContext) -> str:
            """Look around, until the test lets the look finish."""
            gates.in_tool.set()
            await gates.tool_may_finish.wait()
            return "looked"

        @tool
        async def ask(ctx: ToolContext) -> str:
            """Ask the speaker to approve."""
            answer = await ctx.request_input(id="ok", prompt="Go on?")
            return f"answered {answer}"

        return [look, ask]

    async def script(self, request: ModelRequest) -> Any:
        """``look`` calls the gated tool, ``slow`` answers once let on, ``ask`` asks."""
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.steer:
            self.asked_with_steer.append(list(request.messages))
            return reply(f"about {last.text!r}: noted")
        if isinstance(last, ToolMessage):
            return reply(f"after {last.result}")
        if last.text == "look":
            return reply("Looking.", call("look", id="c1"))
        if last.text == "ask":
            return reply("", call("ask", id="c1"))
        if last.text == "slow":
            self.in_model.set()
            await self.model_may_answer.wait()
            return reply("the slow answer")
        return reply(f"you said {last.text}")


def agent_with(gates: Gates) -> Agent:
    return Agent(name="a", model=ScriptedModel(gates.script), tools=gates.tools())


async def test_a_steer_during_a_tool_call_reaches_the_model_after_the_result(store):
    gates = Gates()
    events: list[TurnEvent] = []
    async with AgentRuntime(store, agent_with(gates)) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("look")
        await session.observe(events.append, turn_id=turn_id)
        await asyncio.wait_for(gates.in_tool.wait(), WAIT)

        taken = await session.steer("and the weather too", by="U2", steer_id="st1")
        assert taken == Steered(turn_id=turn_id, steer_id="st1")
        [waiting] = next(t for t in await session.turns() if t.turn_id == turn_id).steering
        assert waiting == Steering(steer_id="st1", text="and the weather too", by="U2")
        gates.tool_may_finish.set()

        result = await session.result(turn_id)
        assert isinstance(result, Completed)
        assert result.text == "about 'and the weather too': noted"
        [record] = await session.turns()
        transcript = await session.transcript()

    # the steer sits after the call's result, and the model's next request carried it
    kinds = [type(m).__name__ for m in transcript]
    assert kinds == [
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
        "UserMessage",
        "AssistantMessage",
    ]
    placed = transcript[3]
    assert isinstance(placed, UserMessage)
    assert (placed.turn_id, placed.text, placed.user, placed.steer) == (
        turn_id,
        "and the weather too",
        "U2",
        "st1",
    )
    assert record.steering == (
        Steering(steer_id="st1", text="and the weather too", by="U2", index=3),
    )
    [asked] = gates.asked_with_steer
    assert asked == transcript[:4]
    # on the wire the steer joins the tool result's user message, after it
    wire = api_messages(asked)
    assert_valid_api_messages(wire)
    assert [b["type"] for b in wire[-1]["content"]] == ["tool_result", "text"]
    types = [e.type for e in events]
    assert (
        types.index("action.completed")
        < types.index("turn.steered")
        < types.index("turn.completed")
    )
    [steered] = [e for e in events if e.type == "turn.steered"]
    assert (steered.steer_id, steered.index, steered.by) == ("st1", 3, "U2")


async def test_a_steer_while_the_final_reply_streams_keeps_it_and_asks_again(store):
    gates = Gates()
    async with AgentRuntime(store, agent_with(gates)) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("slow")
        await asyncio.wait_for(gates.in_model.wait(), WAIT)
        await session.steer("in French, please")
        gates.model_may_answer.set()

        result = await session.result(turn_id)
        assert isinstance(result, Completed)
        assert result.text == "about 'in French, please': noted"
        transcript = await session.transcript()
        replayed: list[TurnEvent] = []
        await session.observe(replayed.append, turn_id=turn_id, replay=True)

    replies = [m.text for m in transcript if isinstance(m, AssistantMessage)]
    assert replies == ["the slow answer", "about 'in French, please': noted"]
    assert [m.role for m in transcript] == ["user", "assistant", "user", "assistant"]
    assert_valid_api_messages(api_messages(transcript))
    # a late subscriber is shown the steer where it landed
    assert [e.type for e in replayed] == [
        "message.completed",
        "turn.steered",
        "message.completed",
        "turn.completed",
    ]


async def test_the_same_steer_twice_is_placed_once_and_two_steers_keep_their_order(store):
    gates = Gates()
    async with AgentRuntime(store, agent_with(gates)) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("look")
        await asyncio.wait_for(gates.in_tool.wait(), WAIT)
        first = await session.steer("one", steer_id="m1")
        assert await session.steer("one", steer_id="m1") == first  # a redelivery
        await session.steer("two", steer_id="m2")
        gates.tool_may_finish.set()
        await session.result(turn_id)
        assert await session.steer("one", steer_id="m1") == first  # and after it placed
        transcript = await session.transcript()

    steers = [(m.steer, m.text) for m in transcript if isinstance(m, UserMessage) and m.steer]
    assert steers == [("m1", "one"), ("m2", "two")]


async def test_steering_is_refused_with_no_turn_at_work_and_after_the_reply(store):
    gates = Gates()
    async with AgentRuntime(store, agent_with(gates)) as runtime:
        session = runtime.session("a", "s")
        with pytest.raises(SteerRefusedError, match="no turn is running") as refused:
            await session.steer("anyone?")
        assert refused.value.reason == "no_turn"

        done = await session.turn("hello")
        with pytest.raises(SteerRefusedError, match="start a turn instead") as refused:
            await session.steer("too late")
        assert refused.value.reason == "no_turn"

        turn_id = await session.start("look")
        await asyncio.wait_for(gates.in_tool.wait(), WAIT)
        with pytest.raises(SteerRefusedError, match=f"turn {done.turn_id} is not running"):
            await session.steer("to the wrong turn", turn_id=done.turn_id)
        gates.tool_may_finish.set()
        await session.result(turn_id)
        transcript = await session.transcript()
    assert not [m for m in transcript if isinstance(m, UserMessage) and m.steer]


async def test_steering_is_refused_after_a_cancel_and_while_suspended(store):
    gates = Gates()
    async with AgentRuntime(store, agent_with(gates)) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("look")
        await asyncio.wait_for(gates.in_tool.wait(), WAIT)
        assert await session.cancel(turn_id)
        with pytest.raises(SteerRefusedError, match="is stopping") as refused:
            await session.steer("wait, one more thing")
        assert (refused.value.reason, refused.value.turn_id) == ("stopping", turn_id)
        gates.tool_may_finish.set()
        await session.result(turn_id)

        asking = await session.start("ask")
        await session.result(asking)
        with pytest.raises(SteerRefusedError, match="waits for a person's answer") as refused:
            await session.steer("never mind")
        assert refused.value.reason == "suspended"


class ClosingGate(SQLiteStore):
    """A SQLite store that holds the write of a turn's completion until let on."""

    closing: asyncio.Event
    may_close: asyncio.Event

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        if any(t.status == "completed" for t in commit.turns):
            self.closing.set()
            await self.may_close.wait()
        await super().commit(key, commit)


async def test_steering_is_refused_once_the_final_reply_is_being_written(tmp_path):
    store = await ClosingGate.open(tmp_path / "s.db")
    store.closing, store.may_close = asyncio.Event(), asyncio.Event()
    async with AgentRuntime(store, agent_with(Gates())) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("hello")
        await asyncio.wait_for(store.closing.wait(), WAIT)
        with pytest.raises(SteerRefusedError, match="writing its final reply") as refused:
            await session.steer("and another thing")
        assert refused.value.reason == "finishing"
        store.may_close.set()
        assert (await session.result(turn_id)).text == "you said hello"
    await store.close()
