"""Rule 19's last sentence: no turn waits forever on a tool.

A remote tool that hangs is stopped when its turn is cancelled, replaced or runs
out of time (after the agent's ``tool_cancel_grace``), or when its own
``timeout`` passes; the call still gets a result, so the transcript stays valid
and the turns queued behind it run.
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
    ConfigError,
    Interrupted,
    ModelRequest,
    ToolMessage,
    tool,
)
from agent.core.records import SessionKey
from agent.models.anthropic.wire import api_messages
from agent.testing import RecordingSink, ScriptedModel, call, reply

from .wire_checks import assert_valid_api_messages

KEY = SessionKey("a", "s1")
WAIT = 5.0
GRACE = 0.05


class Hang:
    """A remote tool that never returns; it notes when it is entered and cancelled."""

    def __init__(self, *, timeout: float | None = None, stubborn: bool = False) -> None:
        self.entered = asyncio.Event()
        self.cancelled = 0
        self.let_go = asyncio.Event()

        async def hang() -> str:
            """Wait for something that never comes."""
            self.entered.set()
            while True:
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    self.cancelled += 1
                    if not stubborn:
                        raise
                    await self.let_go.wait()  # ignores its cancellation until let go
                    return "late"

        self.tool = tool(timeout=timeout)(hang)


def calls_hang_then_answers(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        return reply(f"after hang: {last.result}")
    if request.turn_id == "hung":
        return reply("", call("hang", id="c1"))
    return reply(f"answer to {last.text}")


async def started(store: Any, hang: Hang, sink: Any = None, **agent: Any) -> AgentRuntime:
    model = ScriptedModel(calls_hang_then_answers)
    runtime = AgentRuntime(
        store,
        Agent(name="a", model=model, tools=[hang.tool], tool_cancel_grace=GRACE, **agent),
        sink=sink,
    )
    await runtime.start()
    return runtime


async def tool_results(store: Any) -> list[Any]:
    transcript = (await store.load(KEY)).transcript
    assert_valid_api_messages(api_messages(list(transcript)))  # every call has its result
    return [m.result for m in transcript if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("reason", ["requested", "replaced"])
async def test_a_cancel_or_replace_stops_a_hung_tool_after_the_grace(store, reason):
    hang = Hang()
    sink = RecordingSink()
    runtime = await started(store, hang, sink)
    session = runtime.session("a", "s1")
    await session.start("go", turn_id="hung")
    await asyncio.wait_for(hang.entered.wait(), WAIT)

    if reason == "requested":
        assert await session.cancel("hung") is True
        after = await session.start("next", turn_id="next")
    else:
        after = await session.start("next", turn_id="next", replace=True)

    assert await asyncio.wait_for(session.result("hung"), WAIT) == Cancelled(
        turn_id="hung", reason=reason
    )
    assert hang.cancelled == 1  # its task was cancelled, not left running
    [result] = await tool_results(store)
    assert result["cancelled"] is True
    assert result["reason"] == reason
    assert "did not finish within 0.05 s" in result["error"]
    completed = [e for e in sink.events if e.type == "action.completed"]
    assert [e.error for e in completed] == [result["error"]]
    # the message queued behind the hung tool is answered
    done = await asyncio.wait_for(session.result(after), WAIT)
    assert isinstance(done, Completed)
    assert done.text == "answer to next"
    await runtime.close()


async def test_the_time_limit_stops_a_hung_tool_and_the_next_turn_runs(store):
    hang = Hang()
    runtime = await started(store, hang, max_turn_seconds=0.1)
    session = runtime.session("a", "s1")
    await session.start("go", turn_id="hung")
    await session.start("next", turn_id="next")

    assert await asyncio.wait_for(session.result("hung"), WAIT) == Interrupted(
        turn_id="hung", reason="timeout", detail="it ran longer than a turn may"
    )
    [result] = await tool_results(store)
    assert result["reason"] == "timeout"
    assert result["error"].startswith("stopped: the turn ran past its time limit")
    assert isinstance(await asyncio.wait_for(session.result("next"), WAIT), Completed)
    await runtime.close()


async def test_a_tool_past_its_own_timeout_fails_the_call_and_the_model_goes_on(store):
    hang = Hang(timeout=0.05)
    runtime = await started(store, hang)
    session = runtime.session("a", "s1")

    done = await asyncio.wait_for(session.result(await session.start("go", turn_id="hung")), WAIT)

    assert isinstance(done, Completed)  # a timed-out call is an error the model sees
    error = {"error": "TimeoutError: tool hang did not finish within 0.05 s"}
    assert await tool_results(store) == [error]
    assert done.text == f"after hang: {error}"
    assert hang.cancelled == 1
    await runtime.close()


async def test_a_tool_that_ignores_its_cancellation_does_not_hold_the_turn(store):
    hang = Hang(stubborn=True)
    runtime = await started(store, hang)
    session = runtime.session("a", "s1")
    await session.start("go", turn_id="hung")
    await asyncio.wait_for(hang.entered.wait(), WAIT)

    await session.cancel("hung")

    assert await asyncio.wait_for(session.result("hung"), WAIT) == Cancelled(
        turn_id="hung", reason="requested"
    )
    [result] = await tool_results(store)
    assert result["reason"] == "requested"
    hang.let_go.set()  # the abandoned task ends on its own; its late answer is dropped
    assert isinstance(await session.result(await session.start("next")), Completed)
    assert len(await tool_results(store)) == 1
    await runtime.close()


def test_a_timeout_needs_an_async_tool_and_a_positive_number():
    def local() -> str:
        """Runs inside a transaction."""
        return "x"

    async def remote() -> str:
        """Runs outside."""
        return "x"

    with pytest.raises(ConfigError, match="needs an async tool"):
        tool(timeout=1.0)(local)
    with pytest.raises(ConfigError, match="timeout must be above 0"):
        tool(timeout=0)(remote)
    assert tool(timeout=2.5)(remote).timeout == 2.5
    with pytest.raises(ConfigError, match="tool_cancel_grace"):
        Agent(name="a", model=ScriptedModel(lambda r: reply("x")), tool_cancel_grace=-1)
