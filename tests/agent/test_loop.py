"""Rules 1-3 and 6: the loop, the transcript and step memo, abnormal stops."""

from __future__ import annotations

import pytest

from agent import (
    Agent,
    AgentRuntime,
    AssistantMessage,
    Failed,
    ToolMessage,
    UserMessage,
    tool,
)
from agent.core.events import TURN_EVENT_ADAPTER
from agent.core.records import SessionKey
from agent.testing import RecordingSink, ScriptedModel, call, reply
from tests.agent.helpers import assistant_count


@tool
def lookup(city: str) -> dict[str, str]:
    """Look up the weather in a city."""
    return {"city": city, "weather": "sunny"}


def two_step_script(request):
    if assistant_count(request) == 0:
        return reply("checking", call("lookup", {"city": "Paris"}, id="c1"))
    return reply(f"It is {request.messages[-1].result['weather']}.")


async def test_turn_loops_model_tool_model_until_a_reply_asks_for_no_tool(store):
    model = ScriptedModel(two_step_script)
    async with AgentRuntime(store, Agent(name="a", model=model, tools=[lookup])) as runtime:
        done = await runtime.session("a", "s1").turn("weather?")

    assert done.text == "It is sunny."
    assert len(model.requests) == 2
    assert [t.name for t in model.requests[0].tools] == ["lookup"]
    stored = await store.load(SessionKey("a", "s1"))
    assert [m.role for m in stored.transcript] == ["user", "assistant", "tool", "assistant"]
    assert isinstance(stored.transcript[2], ToolMessage)
    assert stored.transcript[2].result == {"city": "Paris", "weather": "sunny"}
    assert stored.status == "idle"


async def test_steps_are_memoised_under_model_and_tool_ids(store):
    model = ScriptedModel(two_step_script)
    async with AgentRuntime(store, Agent(name="a", model=model, tools=[lookup])) as runtime:
        done = await runtime.session("a", "s1").turn("weather?")

    steps = await store.load_steps(SessionKey("a", "s1"), done.turn_id)
    # model:1 is the reply at transcript index 1; tool:1:c1 is the call that reply made
    assert set(steps) == {"model:1", "tool:1:c1", "model:3"}
    # each memo points at the message it committed with: results are stored once; a
    # reply with calls records each call's kind, for a replay to read (see kinds)
    assert steps == {
        "model:1": {"message": 1, "kinds": {"c1": "local"}},
        "tool:1:c1": {"message": 2, "is_error": False},
        "model:3": {"message": 3},
    }


async def test_model_step_commits_memo_and_message_together(sqlite_store):
    model = ScriptedModel(two_step_script)
    async with AgentRuntime(sqlite_store, Agent(name="a", model=model, tools=[lookup])) as runtime:
        await runtime.session("a", "s1").turn("weather?")

    messages = await sqlite_store.dump_table("messages")
    steps = await sqlite_store.dump_table("steps")
    assert sorted(r[-1] for r in messages) == [0, 1, 2, 3]  # (id, ..., session, idx)
    assert sorted(r[2] for r in steps) == ["model:1", "model:3", "tool:1:c1"]


async def test_second_turn_sees_the_whole_thread(store):
    model = ScriptedModel(lambda r: reply(f"seen {len(r.messages)}"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        session = runtime.session("a", "s1")
        first = await session.turn("one")
        second = await session.turn("two")

    assert (first.text, second.text) == ("seen 1", "seen 3")


@pytest.mark.parametrize("stop_reason", ["max_tokens", "refusal", "model_context_window_exceeded"])
async def test_abnormal_stop_with_no_content_fails_before_commit(store, stop_reason):
    model = ScriptedModel(lambda r: reply(stop_reason=stop_reason))
    sink = RecordingSink()
    async with AgentRuntime(store, Agent(name="a", model=model), sink=sink) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start("hello")
        result = await session.result(turn_id)

    assert isinstance(result, Failed)
    assert (result.phase, result.step) == ("model", "model:1")
    assert stop_reason in result.error
    stored = await store.load(SessionKey("a", "s1"))
    assert [m.role for m in stored.transcript] == ["user"]
    assert await store.load_steps(SessionKey("a", "s1"), turn_id) == {}
    assert sink.types()[-1] == "turn.failed"


async def test_abnormal_stop_with_content_commits(store):
    model = ScriptedModel(lambda r: reply("half an answer", stop_reason="max_tokens"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        done = await runtime.session("a", "s1").turn("hello")

    assert done.text == "half an answer"
    stored = await store.load(SessionKey("a", "s1"))
    last = stored.transcript[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == "max_tokens"


async def test_model_that_raises_fails_the_turn_in_model_phase(store):
    def broken(request):
        raise ConnectionError("upstream went away")

    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(broken))) as runtime:
        session = runtime.session("a", "s1")
        result = await session.result(await session.start("hello"))

    assert isinstance(result, Failed)
    assert result.error == "ConnectionError: upstream went away"
    assert (result.phase, result.step) == ("model", "model:1")


async def test_repeated_tool_call_ids_fail_the_model_step(store):
    model = ScriptedModel(lambda r: reply("", call("lookup", id="x"), call("lookup", id="x")))
    async with AgentRuntime(store, Agent(name="a", model=model, tools=[lookup])) as runtime:
        session = runtime.session("a", "s1")
        result = await session.result(await session.start("hello"))

    assert isinstance(result, Failed)
    assert "repeated a tool call id" in result.error


async def test_events_are_typed_ordered_and_json_round_trip(store):
    sink = RecordingSink()
    model = ScriptedModel(two_step_script, chunk=4)
    async with AgentRuntime(
        store, Agent(name="a", model=model, tools=[lookup]), sink=sink
    ) as runtime:
        done = await runtime.session("a", "s1").turn("weather?")

    events = sink.events
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {(e.agent, e.session, e.turn_id) for e in events} == {("a", "s1", done.turn_id)}
    kinds = [t for t in sink.types() if t != "message.delta"]
    assert kinds == [
        "turn.started",
        "message.completed",
        "action.requested",
        "action.completed",
        "message.completed",
        "turn.completed",
    ]
    assert events[0].trigger == "inbound"
    deltas = "".join(e.text for e in events if e.type == "message.delta")
    assert deltas == "checkingIt is sunny."
    for event in events:
        assert TURN_EVENT_ADAPTER.validate_json(TURN_EVENT_ADAPTER.dump_json(event)) == event


async def test_opening_message_records_the_speaker(store):
    from agent import TurnInput

    model = ScriptedModel(lambda r: reply("hi"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        await runtime.session("a", "s1").turn(TurnInput(text="hello", user="U1"))

    stored = await store.load(SessionKey("a", "s1"))
    assert stored.transcript[0] == UserMessage(
        turn_id=stored.transcript[0].turn_id, text="hello", user="U1"
    )


async def test_proactive_turn_opens_with_a_trigger_message(store):
    from agent import TriggerMessage, TurnInput

    sink = RecordingSink()
    model = ScriptedModel(lambda r: reply("summary"))
    async with AgentRuntime(store, Agent(name="a", model=model), sink=sink) as runtime:
        seed = TurnInput(text="summarize today", trigger="proactive", by="schedule:daily")
        done = await runtime.session("a", "s1").turn(seed)

    stored = await store.load(SessionKey("a", "s1"))
    assert stored.transcript[0] == TriggerMessage(
        turn_id=done.turn_id, text="summarize today", by="schedule:daily"
    )
    assert sink.events[0].trigger == "proactive"
    assert model.requests[0].messages[0].role == "trigger"


async def test_thinking_streams_as_reasoning_and_is_kept_with_its_signature(store):
    from agent import ThinkingBlock

    sink = RecordingSink()
    model = ScriptedModel(
        lambda r: reply(
            "answer",
            thinking="let me think",
        ),
        chunk=5,
    )
    async with AgentRuntime(store, Agent(name="a", model=model), sink=sink) as runtime:
        await runtime.session("a", "s1").turn("hello")

    reasoning = "".join(e.text for e in sink.events if e.type == "reasoning.delta")
    assert reasoning == "let me think"
    stored = await store.load(SessionKey("a", "s1"))
    last = stored.transcript[-1]
    assert last.content[0] == ThinkingBlock(thinking="let me think", signature="scripted")
    assert last.usage is not None
    assert last.usage.input_tokens == 10


async def test_each_step_is_one_transaction_holding_its_memo_and_its_message(sqlite_store):
    statements: list[str] = []
    await sqlite_store.set_trace_callback(statements.append)
    model = ScriptedModel(two_step_script)
    async with AgentRuntime(sqlite_store, Agent(name="a", model=model, tools=[lookup])) as runtime:
        await runtime.session("a", "s1").turn("weather?")
    await sqlite_store.set_trace_callback(None)

    transactions: list[list[str]] = []
    for sql in statements:
        word = sql.split()[0].upper()
        if word == "BEGIN":
            transactions.append([])
        elif word == "INSERT" and transactions:
            transactions[-1].append(sql.split()[2])  # the table
    step_transactions = [t for t in transactions if "steps" in t]
    # model:1, tool:1:c1, model:3: each alone in its transaction, beside its one message;
    # the final reply also marks the turn completed in that same transaction
    assert [sorted(t) for t in step_transactions] == [
        ["messages", "steps"],
        ["messages", "steps"],
        ["messages", "steps", "turns"],
    ]
