"""Every model of the table, through the real SDK, against the strict fake Messages API.

The fake enforces its own reading of Anthropic's per-model rules (written from
the docs, apart from `agent.models.anthropic.rules`), so a shape the table gets wrong
fails here as a 400, as it would against the real API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import anthropic
import pytest
from aiohttp import web
from pydantic import BaseModel

from agent import (
    OUTPUT_TOOL,
    Agent,
    AgentRuntime,
    AnthropicModel,
    AnthropicSettings,
    AssistantMessage,
    Completed,
    ConfigError,
    SQLiteStore,
    ThinkingBlock,
    tool,
)
from agent.core.records import SessionKey
from agent.models.anthropic.rules import EFFORTS, RULES
from agent.models.anthropic.wire import api_messages
from agent.testing import RecordingSink, ScriptedModel, reply
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.local_server import serve_locally

NOTE = {"type": "thinking", "thinking": "I need the weather first.", "signature": "sig-note"}


@tool
def lookup(city: str) -> dict[str, Any]:
    """Look up the weather in a city."""
    return {"city": city, "weather": "sunny"}


def weather(body: dict[str, Any]) -> Reply:
    """A note, a tool call, then the answer: what Claude does between tool calls."""
    last = body["messages"][-1]["content"]
    if isinstance(last, list) and last and last[0].get("type") == "tool_result":
        return Reply.text("Sunny in Paris.")
    call = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}}
    return Reply([NOTE, call], stop_reason="tool_use")


@pytest.fixture
async def api() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(weather) as server:
        yield server


@pytest.fixture
async def claude(api: FakeAnthropic) -> AsyncIterator[Callable[..., AnthropicModel]]:
    made: list[AnthropicModel] = []

    def make(**settings: Any) -> AnthropicModel:
        base = AnthropicSettings(api_key="test-key", base_url=api.base_url, max_retries=0)
        model = AnthropicModel(replace(base, **settings))
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


async def one_turn(
    store: SQLiteStore, model: AnthropicModel, text: str = "Weather in Paris?", **agent: Any
) -> tuple[str, RecordingSink]:
    sink = RecordingSink()
    agent = {"instructions": "Be brief.", "tools": [lookup], **agent}
    async with AgentRuntime(store, Agent(name="a", model=model, **agent), sink=sink) as runtime:
        done = await runtime.session("a", "s1").turn(text)
    return done.text, sink


def combinations() -> list[Any]:
    """Each model with the bot's defaults, thinking on, and every effort it offers."""
    cases = []
    for name, rules in RULES.items():
        cases.append(pytest.param(name, {}, id=f"{name}-defaults"))
        thinking: dict[str, Any] = {"thinking": True}
        if rules.thinks_by == "budget":
            thinking["thinking_budget"] = 2048
        cases.append(pytest.param(name, thinking, id=f"{name}-thinking"))
        for effort in EFFORTS:
            if effort in rules.efforts:
                cases.append(pytest.param(name, {"effort": effort}, id=f"{name}-{effort}"))
    return cases


@pytest.mark.parametrize(("model", "settings"), combinations())
@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")  # the SDK's
async def test_every_model_gets_a_request_it_accepts_through_a_tool_loop_and_a_count(
    api, claude, sqlite_store, model, settings
):
    # a budget small enough that the window counts tokens, so count_tokens gets the shape too
    made = claude(model=model, context_budget=1_000, **settings)

    text, _ = await one_turn(sqlite_store, made, "Weather in Paris? " + "Please. " * 600)

    assert text == "Sunny in Paris."
    assert len(api.requests) == len(api.usages) == 2  # both answered: no 400
    assert api.count_requests, "the window counted tokens"
    first, second = api.requests
    assert first["model"] == second["model"] == model
    assert first["thinking"] == second["thinking"]
    # the reply goes back exactly as it came (its thinking as the fake showed it)
    first_reply = (await transcript(sqlite_store))[1]
    sent_back = [
        {k: v for k, v in b.items() if k != "cache_control"}
        for b in second["messages"][1]["content"]
    ]
    assert sent_back == api_messages([first_reply])[0]["content"]
    assert api.dropped_thinking == []


@pytest.mark.parametrize("model", sorted(RULES))
@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
async def test_the_old_adapters_thinking_off_is_refused_exactly_where_the_table_says(api, model):
    async with anthropic.AsyncAnthropic(api_key="test-key", base_url=api.base_url) as client:
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "disabled"},
        }
        refusal: Any = None
        try:
            await client.messages.create(**params)
        except anthropic.BadRequestError as exc:
            refusal = exc.body

    assert (refusal is not None) == (RULES[model].off != "disabled")
    if refusal is not None:
        assert refusal["error"]["type"] == "invalid_request_error"


async def test_the_default_model_turns_thinking_off_with_between_tools_and_shows_its_notes(
    api, claude, sqlite_store
):
    text, sink = await one_turn(sqlite_store, claude())

    assert text == "Sunny in Paris."
    assert api.requests[0]["model"] == "claude-sonnet-5-5"
    assert api.requests[0]["thinking"] == {"type": "between_tools"}
    assert "output_config" not in api.requests[0]
    # the note between tool calls streams as progress, is stored, and goes back unchanged
    notes = "".join(e.text for e in sink.events if e.type == "reasoning.delta")
    assert notes == NOTE["thinking"]
    assert api.requests[1]["messages"][1]["content"][0] == NOTE
    first = next(m for m in await transcript(sqlite_store) if isinstance(m, AssistantMessage))
    assert first.content[0] == ThinkingBlock(thinking=NOTE["thinking"], signature="sig-note")
    assert first.model == "claude-sonnet-5-5"


async def test_thinking_on_asks_for_the_text_that_would_otherwise_come_back_empty(
    api, claude, sqlite_store
):
    _, sink = await one_turn(sqlite_store, claude(thinking=True))

    assert api.requests[0]["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert "".join(e.text for e in sink.events if e.type == "reasoning.delta") == NOTE["thinking"]


async def transcript(store: SQLiteStore) -> list[Any]:
    return list((await store.load(SessionKey("a", "s1"))).transcript)


async def test_a_model_switched_mid_thread_never_gets_the_old_models_thinking(
    api, claude, sqlite_store
):
    await one_turn(sqlite_store, claude(model="claude-sonnet-5-5"))
    before = len(api.requests)

    # the operator changed ANTHROPIC_MODEL; the thread goes on
    await one_turn(sqlite_store, claude(model="claude-opus-5-5"), "And tomorrow?")

    later = api.requests[before:]
    for body in later:
        sent = [
            b
            for m in body["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
            if b["type"] == "thinking"
        ]
        # only what opus itself wrote in this turn goes back to it
        assert all(b["signature"] == "sig-note" for b in sent)
        assert len(sent) <= 1
    assert api.dropped_thinking == []  # nothing the API would have had to drop
    kept = [m for m in await transcript(sqlite_store) if isinstance(m, AssistantMessage)]
    assert [m.model for m in kept] == ["claude-sonnet-5-5"] * 2 + ["claude-opus-5-5"] * 2
    assert any(isinstance(b, ThinkingBlock) for b in kept[0].content)  # the transcript keeps it


async def test_a_thread_from_before_models_were_recorded_sends_no_old_thinking(
    api, claude, sqlite_store
):
    # a reply with no model recorded, as every reply stored before this change
    older = ScriptedModel(lambda request: reply("Noted.", thinking="An old note."))
    await one_turn(sqlite_store, older, "Remember Paris.")  # type: ignore[arg-type]
    [old] = [m for m in await transcript(sqlite_store) if isinstance(m, AssistantMessage)]
    assert (old.model, isinstance(old.content[0], ThinkingBlock)) == (None, True)

    text, _ = await one_turn(sqlite_store, claude(), "Weather in Paris?")

    assert text == "Sunny in Paris."
    assert len(api.requests) == len(api.usages)  # a block it never issued would be a 400
    assert all(b["type"] != "thinking" for b in api.requests[0]["messages"][1]["content"])


async def test_a_system_prompt_changed_mid_thread_sends_no_thinking_bound_to_the_old_one(
    api, claude, sqlite_store
):
    model = claude()
    await one_turn(sqlite_store, model)

    # a policy edited in Slack between two turns changes the system prompt
    await one_turn(sqlite_store, model, "And tomorrow?", instructions="Answer in French.")

    assert len(api.requests) == len(api.usages)  # the fake refuses a block bound elsewhere
    old = api.requests[2]["messages"][1]["content"]
    assert all(b["type"] != "thinking" for b in old)


async def test_settings_a_model_refuses_never_send_a_request(api):
    for model, settings in (
        ("claude-sonnet-5-5", {"thinking": False, "effort": "max"}),
        ("claude-opus-5-5", {"thinking": False}),
        ("claude-sonnet-5-5", {"thinking": True, "thinking_budget": 2048}),
        ("claude-haiku-4-5", {"effort": "medium"}),
    ):
        settings_ = AnthropicSettings(api_key="test-key", base_url=api.base_url, model=model)
        with pytest.raises(ConfigError):
            AnthropicModel(replace(settings_, **settings))
    assert api.requests == []
    assert api.count_requests == []


async def test_a_paused_reply_under_manual_thinking_is_taken_as_it_is(api, claude, sqlite_store):
    # a prefill with thinking on is refused even on the 4.5 models, which take one otherwise
    think = {"type": "thinking", "thinking": "Searching first.", "signature": "sig-p"}
    paused = Reply([think, {"type": "text", "text": "Searching the archive."}], "pause_turn")
    async with FakeAnthropic() as fake:
        fake.queue(paused, Reply.text("Found it: Friday."))
        model = AnthropicModel(
            AnthropicSettings(
                api_key="test-key",
                base_url=fake.base_url,
                model="claude-haiku-4-5",
                thinking=True,
                thinking_budget=2048,
            )
        )
        try:
            text, _ = await one_turn(sqlite_store, model, "When is the deploy?", tools=[])
        finally:
            await model.aclose()
        sent = fake.requests

    assert text == "Searching the archive."
    assert len(sent) == 1  # never a request ending with the assistant's message


# -- the start-up check ----------------------------------------------------------------------


async def test_the_start_up_check_passes_for_a_model_the_key_may_use(api, claude):
    await claude().check_access()

    assert [r["path"] for r in api.models_requests] == ["/v1/models/claude-sonnet-5-5"]
    assert api.requests == []  # no turn, no token spent


async def test_a_typo_in_the_model_stops_the_start_with_a_clear_message(api, claude):
    with pytest.raises(ConfigError, match=r"ANTHROPIC_MODEL=claude-sonet-5-5 is not a model"):
        await claude(model="claude-sonet-5-5").check_access()


async def test_a_model_the_key_has_no_access_to_stops_the_start():
    async with FakeAnthropic(unavailable_models=["claude-opus-5-5"]) as api:
        model = AnthropicModel(
            AnthropicSettings(api_key="test-key", base_url=api.base_url, model="claude-opus-5-5")
        )
        try:
            with pytest.raises(ConfigError, match="ANTHROPIC_MODEL=claude-opus-5-5"):
                await model.check_access()
        finally:
            await model.aclose()


async def test_a_key_the_api_refuses_stops_the_start_without_the_key(api):
    model = AnthropicModel(AnthropicSettings(api_key="sk-ant-wrong-secret", base_url=api.base_url))
    try:
        with pytest.raises(ConfigError) as refused:
            await model.check_access()
    finally:
        await model.aclose()
    assert "refused ANTHROPIC_API_KEY (401)" in str(refused.value)
    assert "sk-ant-wrong-secret" not in str(refused.value)


async def test_an_unreachable_models_api_only_warns(unused_tcp_port, caplog):
    model = AnthropicModel(
        AnthropicSettings(api_key="test-key", base_url=f"http://127.0.0.1:{unused_tcp_port}")
    )
    try:
        await model.check_access()  # goes on
    finally:
        await model.aclose()
    [warned] = [r.getMessage() for r in caplog.records if "Models API" in r.getMessage()]
    assert "could not reach the model provider" in warned


async def test_a_deprecated_model_warns_when_the_bot_starts(api, claude, caplog):
    await claude(model="claude-opus-4-5").check_access()

    assert any("claude-opus-4-5 is deprecated" in r.getMessage() for r in caplog.records)


def test_live_capabilities_that_refuse_the_request_are_named():
    from anthropic.types import ModelInfo

    from agent.models.anthropic.rules import refused_by_capabilities
    from tests.fakes.anthropic_models import find_model, model_info

    known = find_model("claude-sonnet-5-5")
    assert known is not None
    row = model_info(known)
    assert (
        refused_by_capabilities(
            AnthropicSettings().shape(), ModelInfo.model_validate(row).capabilities, "x"
        )
        == []
    )
    # a model whose capabilities say no to between_tools and to max effort (the API changed)
    row["capabilities"]["thinking"]["types"]["between_tools"]["supported"] = False
    row["capabilities"]["effort"]["max"]["supported"] = False
    info = ModelInfo.model_validate(row)
    problems = refused_by_capabilities(
        AnthropicSettings(thinking=True, effort="max").shape(), info.capabilities, "x"
    ) + refused_by_capabilities(AnthropicSettings().shape(), info.capabilities, "x")
    assert problems == [
        "ANTHROPIC_EFFORT=max is not offered by ANTHROPIC_MODEL=x, says the Models API",
        "ANTHROPIC_MODEL=x does not take thinking 'between_tools', says the Models API: "
        "change ANTHROPIC_THINKING (or ANTHROPIC_THINKING_BUDGET)",
    ]


async def test_a_gateway_without_a_models_api_only_warns(caplog):
    async def nothing_here(request: web.Request) -> web.Response:
        return web.json_response({"message": "no route"}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", nothing_here)
    runner, url = await serve_locally(app)
    model = AnthropicModel(AnthropicSettings(api_key="test-key", base_url=url))
    try:
        await model.check_access()  # goes on: nothing says the model is unknown
    finally:
        await model.aclose()
        await runner.cleanup()
    assert any("without the API's error" in r.getMessage() for r in caplog.records)


def test_a_blank_model_is_refused_by_the_engine_and_means_the_default_to_the_bot():
    with pytest.raises(ConfigError, match="ANTHROPIC_MODEL='' is blank"):
        AnthropicSettings(api_key="k", model="").check()
    with pytest.raises(ConfigError, match="padded with spaces"):
        AnthropicSettings(api_key="k", model=" claude-sonnet-5-5").check()

    from bot.settings import Settings

    settings = Settings(anthropic_model="  ", _env_file=None)  # ANTHROPIC_MODEL= in a .env
    assert settings.anthropic_model == "claude-sonnet-5-5"


class Forecast(BaseModel):
    """Tomorrow's weather in one city."""

    city: str
    high_c: float


def forecast(body: dict[str, Any]) -> Reply:
    """The answer and the result in one reply, as an agent with a result type asks."""
    result = {"city": "Paris", "high_c": 24.0}
    return Reply.tool(OUTPUT_TOOL, result, id="toolu_r", text="Sunny in Paris, 24 degrees.")


@pytest.mark.parametrize(
    ("model", "settings"),
    [c for c in combinations() if str(c.id).endswith(("-defaults", "-thinking"))],
)
@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")  # the SDK's
async def test_a_result_type_gets_a_request_every_model_accepts_with_thinking_on(
    sqlite_store, model, settings
):
    async with FakeAnthropic(forecast) as api:
        base = AnthropicSettings(api_key="test-key", base_url=api.base_url, max_retries=0)
        made = AnthropicModel(replace(base, model=model, **settings))
        agent = Agent(name="a", model=made, instructions="Be brief.", output_type=Forecast)
        async with AgentRuntime(sqlite_store, agent) as runtime:
            done = await runtime.session("a", "s1").turn("Weather in Paris tomorrow?")
        await made.aclose()

    assert isinstance(done, Completed)
    assert (done.text, done.output) == (
        "Sunny in Paris, 24 degrees.",
        {"city": "Paris", "high_c": 24.0},
    )
    [sent] = api.requests
    # a forced tool_choice is refused with thinking on: the result tool is offered, never forced
    assert "tool_choice" not in sent
    assert [t["name"] for t in sent["tools"]] == [OUTPUT_TOOL]
