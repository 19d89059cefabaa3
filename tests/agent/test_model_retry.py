"""A model step that failed for a passing reason is asked again, committing once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent import (
    Agent,
    AgentRuntime,
    ModelError,
    ModelRequest,
    RetryPolicy,
    TextDelta,
    TurnFailedError,
    Usage,
)
from agent.core.model import ModelStreamEvent
from agent.core.records import SessionKey
from agent.testing import RecordingSink, ScriptedModel, call, reply
from tests.agent.helpers import assistant_count
from tests.agent.test_loop import lookup

FAST = RetryPolicy(attempts=3, first_delay=0.01, max_delay=0.05)


class FlakyModel:
    """Streams part of a reply and breaks, ``breaks`` times, then answers in full."""

    def __init__(self, breaks: int, *, retryable: bool = True, retry_after: float | None = None):
        self.breaks = breaks
        self.retryable = retryable
        self.retry_after = retry_after
        self.attempts: list[int] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        self.attempts.append(request.attempt)
        yield TextDelta(text="Hel")
        if len(self.attempts) <= self.breaks:
            raise ModelError(
                "the reply stream broke", retryable=self.retryable, retry_after=self.retry_after
            )
        yield TextDelta(text="lo")
        yield reply("Hello")


async def test_a_broken_stream_is_asked_again_and_commits_once(store):
    model = FlakyModel(breaks=2)
    sink = RecordingSink()
    agent = Agent(name="a", model=model, model_retry=FAST)
    async with AgentRuntime(store, agent, sink=sink) as runtime:
        done = await runtime.session("a", "s1").turn("hi")

    assert done.text == "Hello"
    assert model.attempts == [1, 2, 3]
    stored = await store.load(SessionKey("a", "s1"))
    assert [m.role for m in stored.transcript] == ["user", "assistant"]
    deltas = [(e.text, e.attempt) for e in sink.events if e.type == "message.delta"]
    # a renderer sees the attempt grow and drops what the broken ones streamed
    assert deltas == [("Hel", 1), ("Hel", 2), ("Hel", 3), ("lo", 3)]


async def test_a_step_that_keeps_failing_fails_the_turn_after_its_attempts(store):
    model = FlakyModel(breaks=10)
    agent = Agent(name="a", model=model, model_retry=FAST)
    async with AgentRuntime(store, agent) as runtime:
        with pytest.raises(TurnFailedError, match="the reply stream broke"):
            await runtime.session("a", "s1").turn("hi")
    assert model.attempts == [1, 2, 3]
    stored = await store.load(SessionKey("a", "s1"))
    assert [m.role for m in stored.transcript] == ["user"]


async def test_an_error_that_retrying_cannot_fix_fails_at_once(store):
    model = FlakyModel(breaks=1, retryable=False)
    agent = Agent(name="a", model=model, model_retry=FAST)
    async with AgentRuntime(store, agent) as runtime:
        with pytest.raises(TurnFailedError):
            await runtime.session("a", "s1").turn("hi")
    assert model.attempts == [1]


def test_the_wait_between_tries_doubles_honours_retry_after_and_is_capped():
    policy = RetryPolicy(attempts=5, first_delay=1.0, max_delay=10.0)
    assert [policy.delay(n, None) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert policy.delay(1, 3.5) == 3.5
    assert policy.delay(1, 3600.0) == 10.0  # a provider asking for an hour does not stall a turn


async def test_usage_is_summed_over_the_turns_steps_and_carried_on_turn_completed(store):
    def script(request):
        if assistant_count(request) == 0:
            return reply(
                "",
                call("lookup", {}, id="c1"),
                usage=Usage(input_tokens=100, output_tokens=10, cache_creation_input_tokens=900),
            )
        return reply(
            "done", usage=Usage(input_tokens=20, output_tokens=5, cache_read_input_tokens=900)
        )

    sink = RecordingSink()
    agent = Agent(name="a", model=ScriptedModel(script), tools=[lookup])
    async with AgentRuntime(store, agent, sink=sink) as runtime:
        done = await runtime.session("a", "s1").turn("go")

    expected = Usage(
        input_tokens=120,
        output_tokens=15,
        cache_read_input_tokens=900,
        cache_creation_input_tokens=900,
    )
    assert done.usage == expected
    [completed] = [e for e in sink.events if e.type == "turn.completed"]
    assert completed.usage == expected
    stored = await store.load(SessionKey("a", "s1"))
    assert stored.turns[done.turn_id].result.usage == expected
