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
    RetryPolicy,
    SQLiteStore,
    ThinkingBlock,
    ToolCall,
    TurnFailedError,
    tool,
)
from agent.core.records import SessionKey
from agent.testing import RecordingSink
from tests.fakes.anthropic_api import Cut, FakeAnthropic, Fault, Hang, Reply, StreamError

from .wire_checks import assert_valid_api_messages

FAST_RETRY = RetryPolicy(attempts=3, first_delay=0.01, max_delay=0.05)


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
    # carrying on sends the paused reply back last: a prefill, taken by the 4.5 models only
    runtime, _ = await runtime_for(claude(model="claude-haiku-4-5"))
    done = await runtime.session("a", "s1").turn("When is the deploy?")

    assert done.text == "Searching the archive. Found it: the deploy is Friday."
    stored = await transcript(sqlite_store)
    assert [m.role for m in stored] == ["user", "assistant"]  # one step, one message
    continued = api.requests[1]["messages"]
    assert continued[-1]["role"] == "assistant"
    # sent back as it came, but for the trailing space the API refuses there
    assert continued[-1]["content"][0]["text"] == "Searching the archive."


async def test_pause_turn_on_a_model_that_refuses_prefill_is_taken_as_it_is(
    api, claude, runtime_for, sqlite_store
):
    api.queue(Reply.text("Searching the archive.", stop_reason="pause_turn"))
    runtime, _ = await runtime_for(claude())  # claude-sonnet-5-5 refuses a prefill

    done = await runtime.session("a", "s1").turn("When is the deploy?")

    assert done.text == "Searching the archive."
    assert len(api.requests) == 1  # no request ending with the assistant's message
    stored = await transcript(sqlite_store)
    assert stored[-1].stop_reason == "pause_turn"  # it had content, so it committed


# -- 4. thinking ----------------------------------------------------------------------------


async def test_thinking_blocks_are_stored_and_sent_back_with_their_signature(
    api, claude, runtime_for, sqlite_store
):
    thinking = {"type": "thinking", "thinking": "Paris needs a lookup.", "signature": "sig-123"}
    call = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}}
    api.queue(Reply([thinking, call], stop_reason="tool_use"), Reply.text("Sunny."))
    runtime, sink = await runtime_for(claude(thinking=True), tools=[lookup])
    await runtime.session("a", "s1").turn("Weather in Paris?")

    # the text between tool calls comes back empty unless a display asks for it
    assert api.requests[0]["thinking"] == {"type": "adaptive", "display": "summarized"}
    stored = await transcript(sqlite_store)
    assert stored[1].content[0] == ThinkingBlock(
        thinking="Paris needs a lookup.", signature="sig-123"
    )
    assert api.requests[1]["messages"][1]["content"][0] == thinking  # echoed exactly
    reasoning = "".join(e.text for e in sink.events if e.type == "reasoning.delta")
    assert reasoning == "Paris needs a lookup."


async def test_thinking_is_off_unless_asked_and_takes_a_budget_where_one_exists(
    api, claude, runtime_for
):
    runtime, _ = await runtime_for(claude())
    await runtime.session("a", "s1").turn("hi")
    assert api.requests[-1]["thinking"] == {"type": "between_tools"}  # Sonnet 5.5's "off"

    manual = claude(model="claude-sonnet-4-6", thinking=True, thinking_budget=2048)
    runtime, _ = await runtime_for(manual)
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
    runtime, _ = await runtime_for(claude(max_retries=2), model_retry=RetryPolicy(attempts=1))
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
    runtime, _ = await runtime_for(model, model_retry=RetryPolicy(attempts=1))
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

    with pytest.raises(ConfigError, match="ANTHROPIC_THINKING_BUDGET must be at least 1024"):
        AnthropicModel(
            AnthropicSettings(
                api_key="k", model="claude-sonnet-4-6", thinking=True, thinking_budget=100
            )
        )
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


# -- gaps a review found ----------------------------------------------------------------------


async def test_usage_carries_input_and_output_tokens_as_the_api_counted_them(
    api, claude, runtime_for
):
    api.queue(Reply.text("Fine."))
    runtime, _ = await runtime_for(claude())
    done = await runtime.session("a", "s1").turn("How are you?")
    [counted] = api.usages
    assert done.usage.input_tokens == counted["input_tokens"]
    assert done.usage.output_tokens > 0
    assert done.usage.cache_creation_input_tokens == counted["cache_creation_input_tokens"]


async def test_a_reply_of_only_whitespace_is_asked_again_and_never_stored(
    api, claude, runtime_for, sqlite_store
):
    api.queue(Reply.text("\n\n"), Reply.text("Here it is."))
    runtime, _ = await runtime_for(claude())
    session = runtime.session("a", "s1")
    done = await session.turn("Answer me")
    assert done.text == "Here it is."
    assert [m.role for m in await transcript(sqlite_store)] == ["user", "assistant"]
    await session.turn("And again")  # the next request is one the API accepts
    assert_valid_api_messages(api.requests[-1]["messages"])


async def test_a_tool_call_cut_off_by_max_tokens_is_dropped_not_run(
    api, claude, runtime_for, sqlite_store
):
    text = {"type": "text", "text": "Posting the summary now."}
    cut = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Pa"}}
    api.queue(Reply([text, cut], stop_reason="max_tokens"))
    runtime, sink = await runtime_for(claude(), tools=[lookup])
    done = await runtime.session("a", "s1").turn("Summarize")
    assert done.text == "Posting the summary now."
    assert not [e for e in sink.events if e.type == "action.requested"]
    stored = await transcript(sqlite_store)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].tool_calls == ()


async def test_pause_turn_continues_a_bounded_number_of_times(
    api, claude, runtime_for, sqlite_store
):
    from agent.models.anthropic._model import MAX_CONTINUATIONS

    api.queue(*[Reply.text(f"part {n}.", stop_reason="pause_turn") for n in range(10)])
    runtime, _ = await runtime_for(claude(model="claude-haiku-4-5"))
    done = await runtime.session("a", "s1").turn("Research this")
    assert len(api.requests) == MAX_CONTINUATIONS + 1
    assert done.text == "".join(f"part {n}." for n in range(MAX_CONTINUATIONS + 1))
    stored = await transcript(sqlite_store)
    assert stored[-1].stop_reason == "pause_turn"  # it had content, so it committed


async def test_a_long_tool_batch_still_lets_the_next_step_read_the_cache(api, claude, runtime_for):
    batch = [
        {"type": "tool_use", "id": f"toolu_{n}", "name": "lookup", "input": {"city": f"C{n}"}}
        for n in range(12)
    ]
    api.queue(Reply(batch, stop_reason="tool_use"), Reply.text("All sunny."))
    runtime, _ = await runtime_for(claude(), tools=[lookup])
    await runtime.session("a", "s1").turn("Weather in twelve cities?")
    first, second = api.usages
    # 25 new blocks since the last breakpoint: beyond the API's 20-block look-back,
    # so it is the breakpoint left where the first request wrote that keeps the read
    assert second["cache_read_input_tokens"] >= (
        first["cache_read_input_tokens"] + first["cache_creation_input_tokens"]
    )


async def test_a_multi_step_tool_loop_under_manual_thinking_is_accepted(
    api, claude, runtime_for, sqlite_store
):
    thought = {"type": "thinking", "thinking": "Two lookups.", "signature": "sig-1"}
    first = Reply.tool("lookup", {"city": "Paris"}, id="toolu_1")
    api.queue(
        Reply([thought, *first.content], stop_reason="tool_use"),
        Reply.tool("lookup", {"city": "Lyon"}, id="toolu_2"),
        Reply.text("Sunny in both."),
    )
    manual = claude(model="claude-sonnet-4-6", thinking=True, thinking_budget=2048)
    runtime, _ = await runtime_for(manual, tools=[lookup])
    done = await runtime.session("a", "s1").turn("Paris and Lyon?")
    assert done.text == "Sunny in both."
    assert [b["thinking"] for b in api.requests] == [{"type": "enabled", "budget_tokens": 2048}] * 3
    assert api.requests[2]["messages"][1]["content"][0] == thought


async def test_a_loop_begun_without_thinking_finishes_without_it_after_thinking_is_turned_on(
    api, claude, runtime_for, sqlite_store
):
    # the step after the tool never answers: the deploy lands mid-turn
    api.queue(Reply.tool("lookup", {"city": "Paris"}, id="toolu_1"), Hang(Reply.text("x"), 1))
    runtime, _ = await runtime_for(claude(model="claude-sonnet-4-6"), tools=[lookup])
    session = runtime.session("a", "s1")
    turn_id = await session.start("Weather?")
    await asyncio.wait_for(api.hung.wait(), 10)  # the tool step committed; the next one hangs
    await runtime.close()
    assert [m.role for m in await transcript(sqlite_store)] == ["user", "assistant", "tool"]

    api.queue(Reply.text("Sunny."))
    thinking_model = claude(model="claude-sonnet-4-6", thinking=True, thinking_budget=2048)
    runtime, _ = await runtime_for(thinking_model, tools=[lookup])
    done = await runtime.session("a", "s1").result(turn_id)
    assert done.text == "Sunny."
    assert api.requests[-1]["thinking"] == {"type": "disabled"}  # the fake refuses "enabled" here


async def test_an_unreachable_api_is_a_clear_passing_error(claude, runtime_for, unused_tcp_port):
    model = claude(base_url=f"http://127.0.0.1:{unused_tcp_port}", max_retries=1)
    runtime, _ = await runtime_for(model, model_retry=RetryPolicy(attempts=2, first_delay=0.01))
    with pytest.raises(TurnFailedError, match="could not reach the model provider"):
        await runtime.session("a", "s1").turn("hi")


async def test_a_retry_after_of_an_hour_is_capped_so_the_turn_goes_on(api, claude, runtime_for):
    api.queue(Fault.rate_limited(3600), Reply.text("Back."))
    runtime, _ = await runtime_for(claude(max_retry_wait=0.05))
    done = await asyncio.wait_for(runtime.session("a", "s1").turn("hi"), timeout=10)
    assert done.text == "Back."
    assert len(api.requests) == 2


async def test_when_the_sdk_gives_up_the_engine_waits_as_retry_after_says(api, claude, runtime_for):
    api.queue(*[Fault.rate_limited(0.05)] * 2, Reply.text("Back."))
    model = claude(max_retries=1)
    # without the header's 0.05 s the engine would wait its own first_delay of 60 s
    runtime, _ = await runtime_for(model, model_retry=RetryPolicy(attempts=2, first_delay=60))
    done = await asyncio.wait_for(runtime.session("a", "s1").turn("hi"), timeout=10)
    assert done.text == "Back."


@pytest.mark.parametrize(
    "key", ["sk-ant-secret\n", " sk-ant-secret", "sk-ant secret", ""], ids=repr
)
def test_a_key_the_api_could_never_take_is_refused_when_the_model_is_built(key):
    from agent import ConfigError

    with pytest.raises(ConfigError, match="API key") as refused:
        AnthropicModel(AnthropicSettings(api_key=key))
    assert "secret" not in str(refused.value)


def test_no_key_anywhere_is_refused_when_the_model_is_built(monkeypatch, tmp_path):
    from agent import ConfigError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("ANTHROPIC_PROFILE", raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))  # no profile in it
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(AnthropicSettings(api_key=None))
