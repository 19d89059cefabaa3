"""Issue 21, point 6: a turn's machine result beside its reply.

An agent with an ``output_type`` is offered `OUTPUT_TOOL`; the model gives the
result through it, the engine validates it, and the turn completes with
``Completed.output``. A reply without the result is asked again, a result that
does not validate is refused with its problems, and past the agent's
``output_retries`` the turn fails in phase ``output``. Each runs on every store.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from agent import (
    OUTPUT_TOOL,
    Agent,
    AgentRuntime,
    Completed,
    ConfigError,
    Failed,
    ModelRequest,
    SurfacePolicy,
    ToolMessage,
    TriggerMessage,
    TurnEvent,
    tool,
)
from agent.models.anthropic.wire import api_messages
from agent.testing import ScriptedModel, call, reply

from .wire_checks import assert_valid_api_messages

OSLO = {"city": "Oslo", "high_c": 21.5, "rain": False}


class Forecast(BaseModel):
    """Tomorrow's weather in one city."""

    city: str
    high_c: float = Field(ge=-90, le=60)
    rain: bool


class Asked:
    """A scripted model that keeps each request's messages (a view is valid for one call)."""

    def __init__(self, answer: Any) -> None:
        self.requests: list[ModelRequest] = []
        self.seen: list[list[Any]] = []
        self._answer = answer

    def model(self) -> ScriptedModel:
        def script(request: ModelRequest) -> Any:
            self.requests.append(request)
            self.seen.append(list(request.messages))
            return self._answer(request, len(self.requests))

        return ScriptedModel(script)


def forecaster(asked: Asked, **options: Any) -> Agent:
    return Agent(name="a", model=asked.model(), output_type=Forecast, **options)


async def test_a_valid_result_completes_the_turn_beside_its_reply(store):
    asked = Asked(lambda request, n: reply("Sunny in Oslo.", call(OUTPUT_TOOL, OSLO, id="r1")))
    events: list[TurnEvent] = []
    async with AgentRuntime(store, forecaster(asked)) as runtime:
        session = runtime.session("a", "s")
        turn_id = await session.start("tomorrow in Oslo?")
        await session.observe(events.append, turn_id=turn_id)
        result = await session.result(turn_id)
        [record] = await session.turns()
        replayed: list[TurnEvent] = []
        await session.observe(replayed.append, turn_id=turn_id, replay=True)

    assert isinstance(result, Completed)
    assert result.text == "Sunny in Oslo."
    assert result.output == OSLO
    assert Forecast.model_validate(result.output) == Forecast(**OSLO)
    assert record.result == result
    assert isinstance(record.result, Completed)
    assert record.result.output == OSLO  # stored with the turn
    assert len(asked.requests) == 1  # the result ended the turn: no model call after it
    [offered] = [t for t in asked.requests[0].tools if t.name == OUTPUT_TOOL]
    assert offered.input_schema["properties"].keys() == {"city", "high_c", "rain"}
    assert "Tomorrow's weather in one city." in offered.description
    completed = [e for e in events if e.type == "turn.completed"]
    assert [(e.text, e.output) for e in completed] == [("Sunny in Oslo.", OSLO)]
    assert [(e.text, e.output) for e in replayed if e.type == "turn.completed"] == [
        ("Sunny in Oslo.", OSLO)
    ]


async def test_a_reply_without_the_result_is_asked_again_and_its_answer_kept(store):
    def answer(request: ModelRequest, n: int) -> Any:
        if isinstance(request.messages[-1], TriggerMessage):
            return reply("", call(OUTPUT_TOOL, OSLO, id="r1"))
        return reply("Sunny in Oslo.")

    asked = Asked(answer)
    async with AgentRuntime(store, forecaster(asked)) as runtime:
        session = runtime.session("a", "s")
        result = await session.result(await session.start("tomorrow in Oslo?"))
        transcript = await session.transcript()

    assert isinstance(result, Completed)
    assert (result.text, result.output) == ("Sunny in Oslo.", OSLO)
    assert [m.role for m in transcript] == ["user", "assistant", "trigger", "assistant", "tool"]
    prompt = transcript[2]
    assert isinstance(prompt, TriggerMessage)
    assert OUTPUT_TOOL in prompt.text
    assert len(asked.requests) == 2
    assert_valid_api_messages(api_messages(asked.seen[1]))


async def test_an_invalid_result_is_refused_naming_its_problem_and_given_again(store):
    def answer(request: ModelRequest, n: int) -> Any:
        if n == 1:
            return reply("Hot in Oslo.", call(OUTPUT_TOOL, {**OSLO, "high_c": 400}, id="r1"))
        return reply("", call(OUTPUT_TOOL, OSLO, id="r2"))

    asked = Asked(answer)
    async with AgentRuntime(store, forecaster(asked)) as runtime:
        session = runtime.session("a", "s")
        result = await session.result(await session.start("tomorrow in Oslo?"))

    assert isinstance(result, Completed)
    assert (result.text, result.output) == ("Hot in Oslo.", OSLO)
    refused = asked.seen[1][-1]
    assert isinstance(refused, ToolMessage)
    assert refused.is_error
    assert "high_c" in refused.result["error"]
    assert "less than or equal to 60" in refused.result["error"]
    assert_valid_api_messages(api_messages(asked.seen[1]))


@pytest.mark.parametrize("misses", ["invalid", "missing"])
async def test_a_result_never_given_right_fails_the_turn_after_the_retries(store, misses):
    def answer(request: ModelRequest, n: int) -> Any:
        if misses == "missing":
            return reply(f"answer {n}, and no result")
        return reply("", call(OUTPUT_TOOL, {"city": "Oslo"}, id=f"r{n}"))

    asked = Asked(answer)
    async with AgentRuntime(store, forecaster(asked, output_retries=2)) as runtime:
        session = runtime.session("a", "s")
        result = await session.result(await session.start("tomorrow in Oslo?"))
        transcript = await session.transcript()
        asks = len(asked.requests)
        # the session is not stuck: the next turn runs
        follow_up = await session.start("and Bergen?")
        assert isinstance(await session.result(follow_up), Failed)

    assert isinstance(result, Failed)
    assert result.phase == "output"
    assert result.error.startswith("the model gave no valid result after 2 retries: ")
    if misses == "missing":
        assert result.error.endswith(f"the reply did not call {OUTPUT_TOOL}")
        assert [m.role for m in transcript] == ["user", *["assistant", "trigger"] * 2, "assistant"]
        assert transcript[-1].text == "answer 3, and no result"  # the last reply is kept
    else:
        assert "high_c" in result.error
        assert "rain" in result.error
        assert [m.role for m in transcript] == ["user", *["assistant", "tool"] * 3]
    assert asks == 3  # the first try and two retries
    assert result.step == f"model:{len(transcript) - (1 if misses == 'missing' else 2)}"
    assert_valid_api_messages(api_messages(transcript))


async def test_the_other_calls_of_the_batch_run_before_the_turn_ends_with_its_result(store):
    ran: list[str] = []

    @tool
    async def note(text: str) -> str:
        """Note something down."""
        ran.append(text)
        return "noted"

    def answer(request: ModelRequest, n: int) -> Any:
        return reply("Done.", call(OUTPUT_TOOL, OSLO, id="r1"), call("note", {"text": "x"}))

    asked = Asked(answer)
    agent = Agent(name="a", model=asked.model(), output_type=Forecast, tools=[note])
    async with AgentRuntime(store, agent) as runtime:
        session = runtime.session("a", "s")
        result = await session.result(await session.start("tomorrow in Oslo?"))

    assert isinstance(result, Completed)
    assert result.output == OSLO
    assert ran == ["x"]  # the model asked for both; both ran, then the turn ended


def test_the_result_tool_cannot_be_denied_nor_shadowed_and_the_type_must_be_a_model():
    model = ScriptedModel(lambda request: reply("hi"))
    deny = SurfacePolicy(deny_tools=(OUTPUT_TOOL,))
    with pytest.raises(ConfigError, match="it cannot be denied"):
        Agent(name="a", model=model, output_type=Forecast, surfaces={"slack": deny})

    @tool
    async def final_result(city: str) -> str:
        """A tool that takes the result tool's name."""
        return city

    with pytest.raises(ConfigError, match="two tools are named 'final_result'"):
        Agent(name="a", model=model, output_type=Forecast, tools=[final_result])
    with pytest.raises(ConfigError, match="output_type must be a pydantic model"):
        Agent(name="a", model=model, output_type=dict)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="output_retries must be 0 or more"):
        Agent(name="a", model=model, output_type=Forecast, output_retries=-1)
