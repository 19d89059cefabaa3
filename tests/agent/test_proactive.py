"""Rule 22: receive() starts a turn nobody typed and shows it through the channel's renderer."""

from __future__ import annotations

from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    ConfigError,
    ModelReply,
    ModelRequest,
    RuntimeClosedError,
    Trigger,
    TriggerMessage,
    TurnEvent,
    receive,
)
from agent._json import JsonValue
from agent.testing import ScriptedModel, reply


class Notebook:
    """A channel that shows turns as lines in a notebook, by target."""

    agent = "a"

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        self.pages: dict[str, list[str]] = {}
        self.events: list[TurnEvent] = []

    async def deliver(self, session_id: str, turn_id: str, target: JsonValue) -> None:
        page = self.pages.setdefault(str(target), [])
        async for event in self.runtime.session(self.agent, session_id).stream(turn_id):
            self.events.append(event)
            if event.type == "turn.completed":
                page.append(event.text)


async def summon(channel: Any, runtime: AgentRuntime, **given: Any) -> str:
    """``receive`` a turn into session ``ops:daily`` at ``C0OPS``; ``given`` overrides."""
    asked: dict[str, Any] = {
        "seed": "hi",
        "target": "C0OPS",
        "trigger": Trigger(by="cli"),
        "session": "ops:daily",
    }
    return await receive(channel, runtime, **(asked | given))


def summarizer() -> tuple[Agent, list[ModelRequest]]:
    asked: list[ModelRequest] = []

    def answer(request: ModelRequest) -> ModelReply:
        asked.append(request)
        return reply(f"summary of: {request.messages[-1].text}")

    return Agent(name="a", model=ScriptedModel(answer)), asked


async def test_a_proactive_turn_is_stored_as_a_trigger_and_shown_by_the_channel(store):
    agent, asked = summarizer()
    async with AgentRuntime(store, agent) as runtime:
        notebook = Notebook(runtime)

        daily = Trigger(by="schedule:daily")
        turn_id = await summon(notebook, runtime, seed="Summarize the day.", trigger=daily)

        assert notebook.pages == {"C0OPS": ["summary of: Summarize the day."]}
        [started] = [e for e in notebook.events if e.type == "turn.started"]
        assert started.trigger == "proactive"
        transcript = await runtime.session("a", "ops:daily").transcript()
        opening = transcript[0]
        assert isinstance(opening, TriggerMessage)
        assert (opening.text, opening.by, opening.turn_id) == (
            "Summarize the day.",
            "schedule:daily",
            turn_id,
        )
        [record] = await runtime.session("a", "ops:daily").turns()
        assert record.input.target == "C0OPS"  # kept with the turn, for a restart to show it
        [request] = asked
        assert request.messages[0] == opening  # sent on; the wire makes it a user message


async def test_the_same_turn_id_twice_is_one_turn(store):
    agent, asked = summarizer()
    async with AgentRuntime(store, agent) as runtime:
        notebook = Notebook(runtime)
        for _ in range(2):
            await summon(notebook, runtime, turn_id="schedule:daily:2026-12-01T09:00:00+00:00")

        assert len(asked) == 1
        assert len(await runtime.session("a", "ops:daily").turns()) == 1


async def test_a_channel_that_cannot_deliver_is_refused_before_anything_starts(store):
    class Mute:
        agent = "a"

    agent, asked = summarizer()
    async with AgentRuntime(store, agent) as runtime:
        with pytest.raises(ConfigError, match="Mute cannot deliver a turn"):
            await summon(Mute(), runtime)

        class Stranger(Notebook):
            agent = "nobody"

        with pytest.raises(ConfigError, match="nobody"):
            await summon(Stranger(runtime), runtime)

        class OnlyOps(Notebook):
            def check_target(self, target: JsonValue) -> None:
                if target != "C0OPS":
                    raise ValueError(f"no page for {target!r}")

        with pytest.raises(ValueError, match="no page for 'C0NOWHERE'"):
            await summon(OnlyOps(runtime), runtime, target="C0NOWHERE")
        assert await runtime.session("a", "ops:daily").turns() == []
    assert asked == []


async def test_a_closed_runtime_refuses_and_a_failed_delivery_is_raised_not_dropped(store):
    agent, _ = summarizer()
    runtime = AgentRuntime(store, agent)
    await runtime.close()
    with pytest.raises(RuntimeClosedError):
        await summon(Notebook(runtime), runtime)

    class Unreachable(Notebook):
        async def deliver(self, session_id: str, turn_id: str, target: JsonValue) -> None:
            raise ConnectionError("the surface is down")

    async with AgentRuntime(store, agent) as runtime:
        with pytest.raises(ConnectionError, match="the surface is down"):
            await summon(Unreachable(runtime), runtime, turn_id="t1")
        # the turn itself is durable: it runs, and can be shown again
        session = runtime.session("a", "ops:daily")
        assert (await session.result("t1")).status == "completed"
