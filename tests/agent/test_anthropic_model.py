"""Claude through the real SDK, against a local server that speaks the Messages API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    AnthropicModel,
    AnthropicSettings,
    AssistantMessage,
    ModelRetry,
    SQLiteStore,
    ThinkingBlock,
    ToolCall,
    TurnFailedError,
    tool,
)
from agent.ports import SessionKey
from agent.testing import RecordingSink
from tests.fakes.anthropic_api import Cut, FakeAnthropic, Fault, Hang, Reply, StreamError

from .wire_checks import assert_valid_api_messages

FAST_RETRY = ModelRetry(attempts=3, first_delay=0.01, max_delay=0.05)


@tool
def lookup(city: str, days: int = 1) -> dict[str, Any]:
    """Look up the weather in a city."""
    return {"city": city, "days": days, "weather": "sunny"}


@tool
async def flaky(city: str) -> str:
    """A tool that always fails."""
    raise ConnectionError(f"weather service down for {city}")


@pytest.fixture
async def api() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def claude(api: FakeAnthropic) -> AsyncIterator[Callable[..., AnthropicModel]]:
    made: list[AnthropicModel] = []

    def make(**overrides: Any) -> AnthropicModel:
        settings = AnthropicSettings(
            api_key="test-key",
            base_url=api.base_url,
            max_retries=2,
            read_timeout=5.0,
            step_timeout=10.0,
        )
        model = AnthropicModel(replace(settings, **overrides))
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


@pytest.fixture
async def runtime_for(
    sqlite_store: SQLiteStore,
) -> AsyncIterator[Callable[..., Any]]:
    runtimes: list[AgentRuntime] = []

    async def start(model: AnthropicModel, **agent: Any) -> tuple[AgentRuntime, RecordingSink]:
        sink = RecordingSink()
        defaults: dict[str, Any] = {"instructions": "Be brief.", "model_retry": FAST_RETRY}
        runtime = AgentRuntime(
            sqlite_store, Agent(name="a", model=model, **{**defaults, **agent}), sink=sink
        )
        await runtime.start()
        runtimes.append(runtime)
        return runtime, sink

    yield start
    for runtime in runtimes:
        await runtime.close()


async def transcript(store: SQLiteStore) -> list[Any]:
    return list((await store.load(SessionKey("a", "s1"))).transcript)


# -- 1. streaming ---------------------------------------------------------------------------


async def test_reply_text_streams_as_deltas_and_lands_as_one_message(api, claude, runtime_for):
    api.queue(Reply.text("The deploy is on Friday at noon."))
    runtime, sink = await runtime_for(claude())
    done = await runtime.session("a", "s1").turn("When is the deploy?")

    assert done.text == "The deploy is on Friday at noon."
    deltas = [e.text for e in sink.events if e.type == "message.delta"]
    assert len(deltas) > 3
    assert "".join(deltas) == done.text
    [body] = api.requests
    assert body["stream"] is True
    assert body["model"] == "claude-sonnet-5-5"
    assert body["messages"][0]["content"][0]["text"] == "When is the deploy?"


async def test_a_tool_call_streamed_in_json_parts_runs_with_its_whole_input(
    api, claude, runtime_for, sqlite_store
):
    api.queue(
        Reply.tool("lookup", {"city": "Paris", "days": 3}, id="toolu_1", text="Checking."),
        Reply.text("Sunny for three days."),
    )
    runtime, sink = await runtime_for(claude(), tools=[lookup])
    done = await runtime.session("a", "s1").turn("Weather in Paris?")

    assert done.text == "Sunny for three days."
    [requested] = [e for e in sink.events if e.type == "action.requested"]
    assert requested.input == {"city": "Paris", "days": 3}
    stored = await transcript(sqlite_store)
    assert stored[1].tool_calls == (
        ToolCall(id="toolu_1", name="lookup", input={"city": "Paris", "days": 3}),
    )
    # 2. the result goes back as a tool_result block
    result = api.requests[1]["messages"][2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_1"
    assert "is_error" not in result
    assert '"weather": "sunny"' in result["content"]


async def test_a_tool_that_raised_goes_back_with_is_error(api, claude, runtime_for):
    api.queue(Reply.tool("flaky", {"city": "Oslo"}, id="toolu_1"), Reply.text("It is down."))
    runtime, _ = await runtime_for(claude(), tools=[flaky])
    await runtime.session("a", "s1").turn("Weather in Oslo?")

    result = api.requests[1]["messages"][2]["content"][0]
    result.pop("cache_control")  # it is the newest message
    assert result == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "ConnectionError: weather service down for Oslo",
        "is_error": True,
    }


# -- 3. stop reasons ------------------------------------------------------------------------


async def test_an_empty_refusal_fails_the_step_before_anything_commits(
    api, claude, runtime_for, sqlite_store
):
    api.queue(Reply([], stop_reason="refusal"))
    runtime, _ = await runtime_for(claude())
    with pytest.raises(TurnFailedError, match=r"stopped \(refusal\) without any content"):
        await runtime.session("a", "s1").turn("Something it refuses")
    assert [m.role for m in await transcript(sqlite_store)] == ["user"]


async def test_max_tokens_with_content_commits_and_without_fails(
    api, claude, runtime_for, sqlite_store
):
    api.queue(Reply.text("A long answer that was cut", stop_reason="max_tokens"))
    runtime, _ = await runtime_for(claude())
    session = runtime.session("a", "s1")
    cut = await session.turn("Tell me everything.")
    assert cut.text == "A long answer that was cut"
    stored = await transcript(sqlite_store)
    assert stored[-1].stop_reason == "max_tokens"

    api.queue(Reply([], stop_reason="max_tokens"))
    with pytest.raises(TurnFailedError, match=r"stopped \(max_tokens\) without any content"):
        await session.turn("And more?")
    assert [m.role for m in await transcript(sqlite_store)] == ["user", "assistant", "user"]


async def test_pause_turn_continues_the_same_step_into_one_reply(
    api, claude, runtime_for, sqlite_store
):
    api.queue(Reply.text("Searching the archive. ", stop_reason="pause_turn"))
    api.queue(Reply.text("Found it: the deploy is Friday."))
    runtime, _ = await runtime_for(claude())
    done = await runtime.session("a", "s1").turn("When is the deploy?")

    assert done.text == "Searching the archive. Found it: the deploy is Friday."
    stored = await transcript(sqlite_store)
    assert [m.role for m in stored] == ["user", "assistant"]  # one step, one message
    continued = api.requests[1]["messages"]
    assert continued[-1]["role"] == "assistant"
    # sent back as it came, but for the trailing space the API refuses there
    assert continued[-1]["content"][0]["text"] == "Searching the archive."


# -- 4. thinking ----------------------------------------------------------------------------


async def test_thinking_blocks_are_stored_and_sent_back_with_their_signature(
    api, claude, runtime_for, sqlite_store
):
    thinking = {"type": "thinking", "thinking": "Paris needs a lookup.", "signature": "sig-123"}
    call = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}}
    api.queue(Reply([thinking, call], stop_reason="tool_use"), Reply.text("Sunny."))
    runtime, sink = await runtime_for(claude(thinking=True), tools=[lookup])
    await runtime.session("a", "s1").turn("Weather in Paris?")

    assert api.requests[0]["thinking"] == {"type": "adaptive"}
    stored = await transcript(sqlite_store)
    assert stored[1].content[0] == ThinkingBlock(
        thinking="Paris needs a lookup.", signature="sig-123"
    )
    assert api.requests[1]["messages"][1]["content"][0] == thinking  # echoed exactly
    reasoning = "".join(e.text for e in sink.events if e.type == "reasoning.delta")
    assert reasoning == "Paris needs a lookup."


async def test_thinking_is_off_unless_asked_and_takes_a_budget(api, claude, runtime_for):
    runtime, _ = await runtime_for(claude())
    await runtime.session("a", "s1").turn("hi")
    assert api.requests[-1]["thinking"] == {"type": "disabled"}

    runtime, _ = await runtime_for(claude(thinking=True, thinking_budget=2048))
    await runtime.session("a", "s2").turn("hi")
    assert api.requests[-1]["thinking"] == {"type": "enabled", "budget_tokens": 2048}


# -- 5. prompt caching ----------------------------------------------------------------------


async def test_breakpoints_on_system_and_newest_message_make_later_steps_read_the_cache(
    api, claude, runtime_for
):
    api.queue(
        Reply.tool("lookup", {"city": "Paris"}, id="toolu_1"),
        Reply.tool("lookup", {"city": "Lyon"}, id="toolu_2"),
        Reply.text("Sunny in both."),
    )
    runtime, sink = await runtime_for(claude(), tools=[lookup])
    done = await runtime.session("a", "s1").turn("Weather in Paris and Lyon?")

    for body in api.requests:
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    reads = [u["cache_read_input_tokens"] for u in api.usages]
    assert reads[0] == 0
    assert 0 < reads[1] < reads[2]  # each step reads all the one before it wrote
    [completed] = [e for e in sink.events if e.type == "turn.completed"]
    assert completed.usage == done.usage
    assert completed.usage.cache_read_input_tokens == sum(reads)
    assert completed.usage.cache_creation_input_tokens == sum(
        u["cache_creation_input_tokens"] for u in api.usages
    )


async def test_a_later_turn_of_the_thread_reads_the_earlier_turns_from_the_cache(
    api, claude, runtime_for
):
    runtime, _ = await runtime_for(claude())
    session = runtime.session("a", "s1")
    await session.turn("First question")
    second = await session.turn("Second question")
    assert second.usage.cache_read_input_tokens == api.usages[0]["cache_creation_input_tokens"]


# -- 6. faults ------------------------------------------------------------------------------


async def test_overloaded_then_success_is_retried_by_the_sdk(
    api, claude, runtime_for, sqlite_store
):
    api.queue(Fault.overloaded(), Reply.text("Back."))
    runtime, _ = await runtime_for(claude())
    done = await runtime.session("a", "s1").turn("hi")
    assert done.text == "Back."
    assert len(api.requests) == 2
    assert [m.role for m in await transcript(sqlite_store)] == ["user", "assistant"]


async def test_rate_limited_waits_as_long_as_retry_after_says(api, claude, runtime_for):
    api.queue(Fault.rate_limited(0.4), Reply.text("Done."))
    runtime, _ = await runtime_for(claude())
    started = time.monotonic()
    done = await runtime.session("a", "s1").turn("hi")
    assert done.text == "Done."
    assert time.monotonic() - started >= 0.4
    assert len(api.requests) == 2


async def test_faults_beyond_the_sdks_retries_fail_the_turn_with_the_reason(
    api, claude, runtime_for
):
    api.queue(*[Fault.server_error()] * 3)
    runtime, _ = await runtime_for(claude(max_retries=2), model_retry=ModelRetry(attempts=1))
    with pytest.raises(TurnFailedError, match=r"500 api_error"):
        await runtime.session("a", "s1").turn("hi")
    assert len(api.requests) == 3  # the first try and the SDK's two retries: bounded


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(lambda r: Cut(r, after_events=5), id="connection-dropped"),
        pytest.param(lambda r: Cut(r, after_events=5, clean=True), id="body-ended-early"),
        pytest.param(lambda r: StreamError(r, after_events=5), id="error-event"),
    ],
)
async def test_a_stream_broken_mid_reply_is_asked_again_and_commits_once(
    api, claude, runtime_for, sqlite_store, broken
):
    whole = Reply.text("Friday at noon, in the main channel.")
    api.queue(broken(whole), whole)
    runtime, sink = await runtime_for(claude())
    done = await runtime.session("a", "s1").turn("When?")

    assert done.text == "Friday at noon, in the main channel."
    assert len(api.requests) == 2
    stored = await transcript(sqlite_store)
    assert [m.role for m in stored] == ["user", "assistant"]
    attempts = {e.attempt for e in sink.events if e.type == "message.delta"}
    assert attempts == {1, 2}


async def test_a_stalled_stream_hits_the_step_deadline_and_is_asked_again(api, claude, runtime_for):
    whole = Reply.text("Here now.")
    api.queue(Hang(whole, after_events=3), whole)
    runtime, _ = await runtime_for(claude(step_timeout=0.5, read_timeout=30.0))
    done = await runtime.session("a", "s1").turn("hi")
    assert done.text == "Here now."
    assert len(api.requests) == 2


async def test_the_step_deadline_covers_a_request_that_never_gets_an_answer(
    api, claude, runtime_for
):
    release = asyncio.Event()

    async def never(body: dict[str, Any]) -> Reply:
        await release.wait()
        return Reply.text("too late")

    api._script = never
    model = claude(step_timeout=0.5, read_timeout=30.0, max_retries=2)
    runtime, _ = await runtime_for(model, model_retry=ModelRetry(attempts=1))
    with pytest.raises(TurnFailedError, match=r"no complete reply within 0.5 s"):
        await runtime.session("a", "s1").turn("hi")
    release.set()
    # cut by the step's deadline, long before the read timeout would let the SDK retry
    assert len(api.requests) == 1


async def test_a_wrong_key_fails_the_turn_clearly_without_the_key_or_the_request(
    api, claude, runtime_for, sqlite_store
):
    secret = "sk-ant-api03-very-secret"
    runtime, sink = await runtime_for(claude(api_key=secret))
    with pytest.raises(TurnFailedError) as failed:
        await runtime.session("a", "s1").turn("my private question about payroll")

    error = str(failed.value)
    assert "401 authentication_error" in error
    assert "check ANTHROPIC_API_KEY" in error
    assert secret not in error
    assert "payroll" not in error
    [event] = [e for e in sink.events if e.type == "turn.failed"]
    assert secret not in event.error
    assert len(api.requests) == 1  # a refused key is not retried
    assert [m.role for m in await transcript(sqlite_store)] == ["user"]


async def test_an_invalid_request_fails_with_the_providers_reason(api, claude, runtime_for):
    api.queue(Fault.invalid("max_tokens: too large for this model"))
    runtime, _ = await runtime_for(claude())
    with pytest.raises(TurnFailedError, match=r"400 invalid_request_error.*too large"):
        await runtime.session("a", "s1").turn("hi")
    assert len(api.requests) == 1


def test_settings_the_api_would_refuse_are_refused_up_front():
    from agent import ConfigError

    with pytest.raises(ConfigError, match="thinking_budget"):
        AnthropicModel(AnthropicSettings(api_key="k", thinking=True, thinking_budget=100))
    assert "sk-secret" not in repr(AnthropicSettings(api_key="sk-secret"))


# -- 8. context growth ----------------------------------------------------------------------


async def test_a_thread_past_its_budget_sends_a_valid_window_and_keeps_the_transcript_whole(
    api, claude, runtime_for, sqlite_store
):
    def script(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]["content"]
        if last[0]["type"] == "tool_result" or "no tool" in str(last):
            return Reply.text("Noted: " + "detail " * 60)
        return Reply.tool("lookup", {"city": "Paris"})

    api._script = script
    runtime, _ = await runtime_for(claude(context_budget=3_000), tools=[lookup])
    session = runtime.session("a", "s1")
    for n in range(12):
        await session.turn(f"Question {n}: " + "context " * 80)

    stored = await transcript(sqlite_store)
    assert len(stored) == 12 * 4  # nothing was cut from the store
    last = api.requests[-1]
    assert_valid_api_messages(last["messages"])
    assert api.count_requests, "the provider's token count was asked"
    sent_tokens = api.usages[-1]
    total = sum(sent_tokens.values()) - sent_tokens.get("output_tokens", 0)
    assert total <= 3_000
    texts = [b["text"] for m in last["messages"] for b in m["content"] if b["type"] == "text"]
    assert texts[0].startswith("Question 0:")  # the first exchange stays
    assert any("left out here" in t for t in texts)
    questions = [t for t in texts if t.startswith("Question")]
    assert questions[-1].startswith("Question 11:")  # and the newest
    assert isinstance(stored[-1], AssistantMessage)
