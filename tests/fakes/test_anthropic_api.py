from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic import AsyncAnthropic

from tests.fakes.anthropic_api import Cut, FakeAnthropic, Fault, Hang, Reply, StreamError

MODEL = "claude-sonnet-5-5"
MANUAL = "claude-sonnet-4-6"
"""A model that still takes manual thinking (``enabled`` with a budget)."""
SUMMARIZED: Any = {"type": "adaptive", "display": "summarized"}
HELLO: list[Any] = [{"role": "user", "content": "hi"}]
EPHEMERAL = {"type": "ephemeral"}
BROKEN_STREAM = (httpx2.RemoteProtocolError, anthropic.APIConnectionError)
"""A stream cut after its 200: raw before anthropic 2.17, wrapped as a connection error since."""


def client(
    api: FakeAnthropic, *, max_retries: int = 0, api_key: str = "test-key"
) -> AsyncAnthropic:
    return AsyncAnthropic(base_url=api.base_url, api_key=api_key, max_retries=max_retries)


async def stream_all(c: AsyncAnthropic, **params: Any) -> tuple[list[Any], Any]:
    """Every event the SDK yields, and the message it accumulated."""
    params = {"model": MODEL, "max_tokens": 100, "messages": HELLO, **params}
    async with c.messages.stream(**params) as stream:
        events = [event async for event in stream]
        return events, await stream.get_final_message()


def deltas(events: list[Any], kind: str) -> list[Any]:
    return [e.delta for e in events if e.type == "content_block_delta" and e.delta.type == kind]


async def test_streamed_text_arrives_in_several_deltas() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply.text("Hello there, how are you?"))
        events, message = await stream_all(c)

    assert len(deltas(events, "text_delta")) > 3
    assert message.content[0].text == "Hello there, how are you?"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens > 1
    assert api.requests[0]["stream"] is True


async def test_tool_input_arrives_in_several_json_parts() -> None:
    arguments = {"query": "weather in Paris", "days": 3}
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply.tool("search", arguments, id="toolu_1", text="Let me look."))
        events, message = await stream_all(c)

    assert len(deltas(events, "input_json_delta")) > 2
    call = message.content[1]
    assert (call.type, call.id, call.name, call.input) == (
        "tool_use",
        "toolu_1",
        "search",
        arguments,
    )
    assert message.stop_reason == "tool_use"


async def test_thinking_streams_with_its_signature() -> None:
    thought = {"type": "thinking", "thinking": "The user greets me.", "signature": "sig-123"}
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply([thought, {"type": "text", "text": "Hi!"}]))
        events, message = await stream_all(c, thinking=SUMMARIZED)

    assert len(deltas(events, "thinking_delta")) > 1
    assert [d.signature for d in deltas(events, "signature_delta")] == ["sig-123"]
    assert message.content[0].thinking == "The user greets me."
    assert message.content[0].signature == "sig-123"


async def test_non_streaming_create_gets_the_whole_message() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        message = await c.messages.create(model=MODEL, max_tokens=100, messages=HELLO)

    assert message.content[0].text == "ok"
    assert message.model == MODEL
    assert api.usages == [
        {"input_tokens": 7, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    ]


async def test_script_answers_from_the_request() -> None:
    async def echo(body: dict[str, Any]) -> Reply:
        return Reply.text(f"you said {body['messages'][-1]['content']}")

    async with FakeAnthropic(echo) as api, client(api) as c:
        _, message = await stream_all(c, messages=[{"role": "user", "content": "ping"}])

    assert message.content[0].text == "you said ping"


async def test_overloaded_is_retried_by_the_sdk() -> None:
    async with (
        FakeAnthropic() as api,
        AsyncAnthropic(base_url=api.base_url, api_key="test-key") as c,
    ):
        api.queue(Fault.overloaded(), Reply.text("recovered"))
        _, message = await stream_all(c)

    assert message.content[0].text == "recovered"
    assert len(api.requests) == 2
    assert api.request_headers[1]["x-stainless-retry-count"] == "1"


async def test_rate_limit_retry_waits_for_retry_after() -> None:
    async with FakeAnthropic() as api, client(api, max_retries=1) as c:
        api.queue(Fault.rate_limited(0.1), Reply.text("later"))
        started = time.monotonic()
        _, message = await stream_all(c)
        waited = time.monotonic() - started

    assert message.content[0].text == "later"
    # the SDK's own first backoff is at least 0.375 s: shorter means it obeyed retry-after
    assert 0.1 <= waited < 0.3


async def test_rate_limit_surfaces_once_retries_run_out() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Fault.rate_limited(0.01))
        with pytest.raises(anthropic.RateLimitError):
            await stream_all(c)


async def test_cut_connection_breaks_the_stream() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Cut(Reply.text("Hello there, how are you?"), after_events=4))
        with pytest.raises(BROKEN_STREAM) as caught:
            await stream_all(c)
        assert "incomplete chunked read" in str(caught.value)
        # the server took no harm
        _, message = await stream_all(c)

    assert message.content[0].text == "ok"


async def test_cut_without_streaming_is_a_connection_error() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Cut(Reply.text("Hello there"), after_events=0))
        with pytest.raises(anthropic.APIConnectionError):
            await c.messages.create(model=MODEL, max_tokens=100, messages=HELLO)


async def test_delay_slows_the_stream() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply(Reply.text("Hello there").content, delay=0.02))
        started = time.monotonic()
        events, _ = await stream_all(c)
        waited = time.monotonic() - started

    # nine events (start, ping, block start, three deltas, block stop, delta, stop): eight gaps
    assert waited >= 8 * 0.02
    assert len(deltas(events, "text_delta")) == 3


async def test_clean_cut_ends_without_message_stop() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Cut(Reply.text("Hello there"), after_events=4, clean=True))
        events, message = await stream_all(c)

    assert "message_stop" not in [e.type for e in events]
    assert message.content[0].text == "Hell"
    assert message.stop_reason is None


async def test_stream_error_raises_api_status_error() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(StreamError(Reply.text("Hello there"), after_events=4))
        with pytest.raises(anthropic.APIStatusError) as caught:
            await stream_all(c)

    assert caught.value.type == "overloaded_error"
    assert caught.value.status_code == 200


async def test_hang_waits_for_release() -> None:
    release = asyncio.Event()
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Hang(Reply.text("Hello there"), after_events=4, release=release))
        reading = asyncio.create_task(stream_all(c))
        await asyncio.wait_for(api.hung.wait(), 2)
        await asyncio.sleep(0.05)
        assert not reading.done()
        release.set()
        _, message = await reading

    assert message.content[0].text == "Hello there"


async def test_hang_survives_the_client_going_away(caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()
    async with FakeAnthropic() as api:
        api.queue(Hang(Reply.text("Hello there"), after_events=4, release=release))
        async with client(api) as c:
            reading = asyncio.create_task(stream_all(c))
            await asyncio.wait_for(api.hung.wait(), 2)
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
        release.set()
        await asyncio.sleep(0.05)  # the server now writes into the dead connection
        async with client(api) as c:
            _, message = await stream_all(c)

    assert message.content[0].text == "ok"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_hang_is_let_go_when_the_server_stops() -> None:
    started = time.monotonic()
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Hang(Reply.text("Hello there"), after_events=4))
        reading = asyncio.create_task(stream_all(c))
        await asyncio.wait_for(api.hung.wait(), 2)
        # leaving the fake first: the hung stream must not hold up its shutdown
        await api.__aexit__(None, None, None)
        with pytest.raises(BROKEN_STREAM):
            await reading

    assert time.monotonic() - started < 1


async def test_wrong_key_is_unauthorized() -> None:
    async with FakeAnthropic() as api, client(api, api_key="wrong-key") as c:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await stream_all(c)
        with pytest.raises(anthropic.AuthenticationError):
            await c.messages.count_tokens(model=MODEL, messages=HELLO)

    assert caught.value.type == "authentication_error"
    assert "wrong-key" not in str(caught.value)
    assert len(api.requests) == 1


def tool_call(id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": "search", "input": {}}


def tool_result(id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": id, "content": "found"}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


THINKING: Any = {"type": "enabled", "budget_tokens": 1024}
THOUGHT = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
MANUAL_THINKING = {"model": MANUAL, "max_tokens": 2048, "thinking": THINKING}

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "dangling tool_use",
        {"messages": [*HELLO, {"role": "assistant", "content": [tool_call("t1")]}, *HELLO]},
        "without `tool_result`",
    ),
    (
        "tool_result after text",
        {
            "messages": [
                *HELLO,
                {"role": "assistant", "content": [tool_call("t1")]},
                {"role": "user", "content": [text("and"), tool_result("t1")]},
            ]
        },
        "must come before",
    ),
    (
        "tool_result without its call",
        {"messages": [{"role": "user", "content": [tool_result("t9")]}]},
        "unexpected `tool_use_id`",
    ),
    ("first role assistant", {"messages": [{"role": "assistant", "content": "hi"}]}, "first"),
    ("two user messages in a row", {"messages": [*HELLO, *HELLO]}, "alternate"),
    ("empty content", {"messages": [{"role": "user", "content": []}]}, "non-empty content"),
    ("blank text", {"messages": [{"role": "user", "content": [text("  ")]}]}, "non-whitespace"),
    ("zero max_tokens", {"max_tokens": 0}, "max_tokens"),
    (
        "five cache breakpoints",
        {
            "system": [text(f"s{i}", cache_control=EPHEMERAL) for i in range(4)],
            "messages": [{"role": "user", "content": [text("hi", cache_control=EPHEMERAL)]}],
        },
        "maximum of 4",
    ),
    (
        "unsigned thinking",
        {
            "messages": [
                *HELLO,
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}]},
            ]
        },
        "signature",
    ),
    (
        "tool loop dropped its thinking",
        {
            **MANUAL_THINKING,
            "messages": [
                *HELLO,
                {"role": "assistant", "content": [tool_call("t1")]},
                {"role": "user", "content": [tool_result("t1")]},
            ],
        },
        "Expected `thinking`",
    ),
    ("unknown model", {"model": "claude-fake-1"}, "model: claude-fake-1"),
    (
        "a tool name with a dot",
        {"tools": [{"name": "mcp.search", "input_schema": {"type": "object"}}]},
        "tools.0.custom.name: String should match pattern",
    ),
    (
        "a tool without an object schema",
        {"tools": [{"name": "search", "input_schema": {"type": "string"}}]},
        "tools.0.custom.input_schema.type: Input should be 'object'",
    ),
    (
        "a property key with a space",
        {
            "tools": [
                {"name": "search", "input_schema": {"type": "object", "properties": {"a b": {}}}}
            ]
        },
        "Property keys should match pattern",
    ),
    (
        "two tools of one name",
        {"tools": [{"name": "search", "input_schema": {"type": "object"}}] * 2},
        "Tool names must be unique",
    ),
    (
        "thinking the fake never sent",
        {"messages": [*HELLO, {"role": "assistant", "content": [THOUGHT]}, *HELLO]},
        "messages.1.content.0: Invalid `signature` in `thinking` block",
    ),
]


@pytest.mark.parametrize(
    ("body", "complaint"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
async def test_refuses_what_the_api_refuses(body: dict[str, Any], complaint: str) -> None:
    params = {"model": MODEL, "max_tokens": 100, "messages": HELLO, **body}
    async with FakeAnthropic() as api, client(api) as c:
        with pytest.raises((anthropic.BadRequestError, anthropic.NotFoundError)) as caught:
            await c.messages.create(**params)

    assert complaint in str(caught.value)
    assert len(api.requests) == 1
    assert api.usages == []


async def test_thinking_kept_through_the_tool_loop_is_accepted() -> None:
    # thinking begins the loop; later replies of the loop need not think again
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply([THOUGHT, tool_call("t1")], stop_reason="tool_use"), Reply.tool("t", {}))
        first = await c.messages.create(**MANUAL_THINKING, messages=HELLO)
        loop: list[Any] = [
            *HELLO,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [tool_result("t1")]},
        ]
        await c.messages.create(**MANUAL_THINKING, messages=loop)
        messages: list[Any] = [
            *loop,
            {"role": "assistant", "content": [tool_call("t2")]},
            {"role": "user", "content": [tool_result("t2")]},
        ]
        await c.messages.create(**MANUAL_THINKING, messages=messages)

    assert first.content[0].thinking == "hmm"  # the 4.6 models summarize by default
    assert len(api.usages) == 3


async def test_extending_a_cached_prefix_reads_it() -> None:
    first = [
        {"role": "user", "content": [text("Tell me about the weather.", cache_control=EPHEMERAL)]}
    ]
    second: list[Any] = [
        {"role": "user", "content": [text("Tell me about the weather.")]},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": [text("And tomorrow?", cache_control=EPHEMERAL)]},
    ]
    async with FakeAnthropic() as api, client(api) as c:
        _, one = await stream_all(c, system="Be brief.", messages=first)
        _, two = await stream_all(c, system="Be brief.", messages=second)
        counted = await c.messages.count_tokens(model=MODEL, system="Be brief.", messages=second)

    assert one.usage.cache_read_input_tokens == 0
    assert one.usage.cache_creation_input_tokens > 0
    assert two.usage.cache_read_input_tokens == one.usage.cache_creation_input_tokens
    assert two.usage.cache_creation_input_tokens > 0
    total = two.usage.input_tokens + two.usage.cache_read_input_tokens
    assert total + two.usage.cache_creation_input_tokens == counted.input_tokens
    assert len(api.usages) == 2


async def test_prefix_below_the_minimum_is_not_cached() -> None:
    messages = [{"role": "user", "content": [text("short", cache_control=EPHEMERAL)]}]
    async with FakeAnthropic(min_cache_tokens=1024) as api, client(api) as c:
        await stream_all(c, messages=messages)
        await stream_all(c, messages=messages)

    assert [u["cache_read_input_tokens"] for u in api.usages] == [0, 0]
    assert [u["cache_creation_input_tokens"] for u in api.usages] == [0, 0]


@pytest.mark.parametrize(
    ("model", "cached"), [("claude-sonnet-5-5", True), ("claude-sonnet-5", False)]
)
async def test_each_model_has_its_own_cache_minimum(model: str, cached: bool) -> None:
    # about 700 tokens: over Sonnet 5.5's 512, under Sonnet 5's 1,024
    long = [{"role": "user", "content": [text("word " * 560, cache_control=EPHEMERAL)]}]
    async with FakeAnthropic(min_cache_tokens="model") as api, client(api) as c:
        await stream_all(c, model=model, messages=long)
        await stream_all(c, model=model, messages=long)

    assert (api.usages[1]["cache_read_input_tokens"] > 0) is cached


async def test_the_cache_is_per_model() -> None:
    messages = [{"role": "user", "content": [text("hello", cache_control=EPHEMERAL)]}]
    async with FakeAnthropic() as api, client(api) as c:
        await stream_all(c, messages=messages)
        await stream_all(c, model="claude-opus-5-5", messages=messages)

    assert [u["cache_read_input_tokens"] for u in api.usages] == [0, 0]


async def test_count_tokens() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        counted = await c.messages.count_tokens(model=MODEL, messages=HELLO)

    # {"text":"hi","type":"text"} is 27 characters: 7 tokens at four characters a token
    assert counted.input_tokens == 7
    assert api.count_requests == [{"model": MODEL, "messages": HELLO}]
