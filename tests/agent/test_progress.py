"""Issue 21, point 6: a tool's ``ctx.progress`` is shown live and never stored.

A line a tool says reaches the turn's stream as ``action.progress`` between the
call's request and its result, in order, and the process's log; it is not in the
transcript, not in the model's next request, not in a replay of the turn, and
not in the session's event log. A local tool says it from the store's
connection thread, and it arrives all the same.
"""

from __future__ import annotations

import logging
from typing import Any

from agent import (
    ActionProgress,
    Agent,
    AgentRuntime,
    ModelRequest,
    ToolContext,
    ToolMessage,
    tool,
)
from agent.core.records import SessionKey
from agent.engine.turn.progress import MAX_PROGRESS_CHARS
from agent.testing import RecordingSink, ScriptedModel, call, reply


@tool
async def count_up(ctx: ToolContext) -> str:
    """Count to three, saying how far it got."""
    for n in (1, 2, 3):
        ctx.progress(f"counted {n} of 3")
    ctx.progress("   ")  # nothing to say: nothing shown
    ctx.progress("x" * 1_000)
    return "counted"


@tool
def count_here(ctx: ToolContext) -> str:
    """The same, as a local tool (on the store's connection thread where it has one)."""
    ctx.progress("counting here")
    return "counted here"


def script(name: str) -> Any:
    def answer(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            assert "counted 1 of 3" not in repr(request.messages)  # the model never sees it
            return reply(f"the tool said {last.result}")
        return reply("", call(name, id="c1"))

    return answer


async def test_progress_is_streamed_in_order_and_logged_but_never_stored(store, caplog):
    sink = RecordingSink()
    agent = Agent(name="a", model=ScriptedModel(script("count_up")), tools=[count_up])
    caplog.set_level(logging.INFO, logger="agent")
    async with AgentRuntime(store, agent, sink=sink) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("count")
        assert (await session.result(turn_id)).text == "the tool said counted"
        replayed = [e.type async for e in session.stream(turn_id, replay=True)]

    types = [t for t in sink.types(turn_id) if not t.endswith(".delta")]
    assert types == [
        "turn.started",
        "action.requested",
        "action.progress",
        "action.progress",
        "action.progress",
        "action.progress",
        "action.completed",
        "message.completed",
        "turn.completed",
    ]
    lines = [e for e in sink.events if isinstance(e, ActionProgress)]
    assert [e.text for e in lines[:3]] == ["counted 1 of 3", "counted 2 of 3", "counted 3 of 3"]
    assert {(e.call_id, e.name) for e in lines} == {("c1", "count_up")}
    assert len(lines[3].text) == MAX_PROGRESS_CHARS
    assert lines[3].text.endswith("…")
    assert "action.progress" not in replayed
    assert "counted 2 of 3" in caplog.text

    state = await store.load(SessionKey("a", "s"))
    assert "of 3" not in repr(state.transcript)
    [result] = [m for m in state.transcript if isinstance(m, ToolMessage)]
    assert result.result == "counted"  # the tool's result, and nothing it said


async def test_a_local_tool_says_its_progress_from_the_connection_thread(tx_store):
    sink = RecordingSink()
    agent = Agent(name="a", model=ScriptedModel(script("count_here")), tools=[count_here])
    async with AgentRuntime(tx_store, agent, sink=sink) as runtime:
        session = runtime.session("a", "s")
        assert (await session.turn("count")).text.startswith("the tool said")

    lines = [e for e in sink.events if isinstance(e, ActionProgress)]
    assert [(e.text, e.name) for e in lines] == [("counting here", "count_here")]
    types = [t for t in sink.types() if t.startswith("action.")]
    assert types == ["action.requested", "action.progress", "action.completed"]
