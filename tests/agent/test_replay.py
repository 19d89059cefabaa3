"""Rules 4, 5 and 7: replay by turn id, no deltas for cached steps, recovery at start-up.

These stop a runtime in the middle of a turn (closing it cancels its tasks where
they stand, as a deploy would) and bring a new runtime up on the same store. The
SIGKILL version of the same story, with real processes, is test_crash_recovery.
"""

from __future__ import annotations

import asyncio

import pytest

from agent import Agent, AgentRuntime, Completed, ToolContext, ToolMessage, tool
from agent.core.records import SessionKey
from agent.testing import RecordingSink, ScriptedModel, call, reply
from tests.agent.helpers import assistant_count

KEY = SessionKey("a", "s1")


class Gate:
    """Lets a test hold a model or a tool at a point until the runtime is closed."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()

    async def hold(self) -> None:
        self.reached.set()
        await self.opened.wait()


async def test_start_with_a_finished_turn_id_replays_without_a_second_opening(store):
    model = ScriptedModel(lambda r: reply("hi"))
    async with AgentRuntime(store, Agent(name="a", model=model)) as runtime:
        session = runtime.session("a", "s1")
        first = await session.turn("hello", turn_id="evt-1")
        again = await session.turn("hello", turn_id="evt-1")

    assert first == again
    assert len(model.requests) == 1
    stored = await store.load(KEY)
    assert [m.role for m in stored.transcript] == ["user", "assistant"]
    assert len(stored.turns) == 1


async def test_duplicate_start_while_running_joins_the_same_turn(store):
    gate = Gate()

    async def script(request):
        await gate.hold()
        return reply("hi")

    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(script))) as runtime:
        session = runtime.session("a", "s1")
        await session.start("hello", turn_id="evt-1")
        await gate.reached.wait()
        await session.start("hello", turn_id="evt-1")  # a Slack retry of the same event
        gate.opened.set()
        result = await session.result("evt-1")

    assert isinstance(result, Completed)
    stored = await store.load(KEY)
    assert [m.role for m in stored.transcript] == ["user", "assistant"]


async def test_stopped_turn_resumes_from_its_last_checkpoint_on_start_up(store):
    runs: list[str] = []
    gate = Gate()

    @tool
    def note(text: str) -> str:
        """Write a note."""
        runs.append(text)
        return "noted"

    async def script(request):
        n = assistant_count(request)
        if n == 0:
            return reply("first", call("note", {"text": "one"}, id="c1"))
        if n == 1 and request.step == "model:3" and not gate.opened.is_set():
            await gate.hold()  # the process "dies" while the model thinks
        return reply("done")

    first_model = ScriptedModel(script)
    agent = Agent(name="a", model=first_model, tools=[note])
    async with AgentRuntime(store, agent) as runtime:
        await runtime.session("a", "s1").start("go", turn_id="t1")
        await gate.reached.wait()

    gate.opened.set()
    second_model = ScriptedModel(script)
    sink = RecordingSink()
    async with AgentRuntime(
        store, Agent(name="a", model=second_model, tools=[note]), sink=sink
    ) as runtime:
        result = await runtime.session("a", "s1").result("t1")

    assert result == Completed(turn_id="t1", text="done")
    assert runs == ["one"]  # the committed tool step did not run again
    assert [r.step for r in second_model.requests] == ["model:3"]  # committed model:1 skipped
    # no deltas for the cached reply "first"; only the new reply streams
    deltas = "".join(e.text for e in sink.events if e.type == "message.delta")
    assert deltas == "done"
    assert sink.types()[0] == "turn.started"
    stored = await store.load(KEY)
    assert [m.role for m in stored.transcript] == ["user", "assistant", "tool", "assistant"]


async def test_crash_mid_batch_resumes_only_the_calls_still_owed(store):
    ran: list[str] = []
    gate = Gate()
    others_done = _AfterResults({"c-a", "c-c"})

    @tool
    async def fetch(name: str, ctx: ToolContext) -> str:
        """Fetch a thing."""
        ran.append(f"{name}:{ctx.idempotency_key}")
        if name == "b" and not gate.opened.is_set():
            await gate.hold()
        return name.upper()

    def script(request):
        if assistant_count(request) == 0:
            calls = [call("fetch", {"name": x}, id=f"c-{x}") for x in "abc"]
            return reply("", *calls)
        return reply(
            ",".join(str(m.result) for m in request.messages if isinstance(m, ToolMessage))
        )

    agent = Agent(name="a", model=ScriptedModel(script), tools=[fetch])
    async with AgentRuntime(store, agent, sink=others_done) as rt:
        await rt.session("a", "s1").start("go", turn_id="t1")
        await gate.reached.wait()
        await others_done.wait()  # a and c ended around b, which is still in flight

    # c's result committed before b's: it waits as its step's memo, out of the transcript
    steps = await store.load_steps(KEY, "t1")
    assert steps["tool:1:c-c"] == {"result": "C", "is_error": False}
    assert [m.role for m in (await store.load(KEY)).transcript] == ["user", "assistant", "tool"]

    gate.opened.set()
    async with AgentRuntime(
        store, Agent(name="a", model=ScriptedModel(script), tools=[fetch])
    ) as rt:
        result = await rt.session("a", "s1").result("t1")

    # the results reach the model in call order, whatever order the calls ended in
    assert result == Completed(turn_id="t1", text="A,B,C")
    names = [r.split(":")[0] for r in ran]
    assert names == ["a", "b", "c", "b"]  # a and c committed before the stop; b was in flight
    keys_of_b = {r.split(":")[1] for r in ran if r.startswith("b:")}
    assert len(keys_of_b) == 1  # at-least-once, with the same idempotency key


class _AfterResults(RecordingSink):
    """Records events; `wait` returns once each of ``call_ids`` has its result."""

    def __init__(self, call_ids: set[str]) -> None:
        super().__init__()
        self._waiting = set(call_ids)
        self._done = asyncio.Event()

    def emit(self, event) -> None:
        super().emit(event)
        if event.type == "action.completed":
            self._waiting.discard(event.call_id)
            if not self._waiting:
                self._done.set()

    async def wait(self) -> None:
        await self._done.wait()


async def test_start_up_recovers_queued_turns_in_order(store):
    gate = Gate()

    async def script(request):
        text = request.messages[-1].text
        if text == "first" and not gate.opened.is_set():
            await gate.hold()
        return reply(f"re: {text}")

    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(script))) as runtime:
        session = runtime.session("a", "s1")
        await session.start("first", turn_id="t1")
        await gate.reached.wait()
        await session.start("second", turn_id="t2")
        assert [t.status for t in await session.turns()] == ["running", "queued"]

    gate.opened.set()
    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(script))) as runtime:
        session = runtime.session("a", "s1")
        second = await session.result("t2")
        first = await session.result("t1")

    assert (first.text, second.text) == ("re: first", "re: second")
    stored = await store.load(KEY)
    texts = [getattr(m, "text", None) for m in stored.transcript]
    assert texts == ["first", "re: first", "second", "re: second"]


async def test_recovery_counts_and_skips_agents_not_mounted(store, caplog):
    gate = Gate()

    async def script(request):
        if not gate.opened.is_set():
            await gate.hold()
        return reply("ok")

    async with AgentRuntime(store, Agent(name="a", model=ScriptedModel(script))) as runtime:
        await runtime.session("a", "s1").start("hi")
        await gate.reached.wait()

    gate.opened.set()
    elsewhere = AgentRuntime(store, Agent(name="other", model=ScriptedModel(script)))
    assert await elsewhere.start() == 0
    await elsewhere.close()
    assert "no agent 'a' is mounted" in caplog.text

    runtime = AgentRuntime(store, Agent(name="a", model=ScriptedModel(script)))
    assert await runtime.start() == 1
    session = runtime.session("a", "s1")
    [record] = await session.turns()
    assert isinstance(await session.result(record.turn_id), Completed)
    await runtime.close()


async def test_closing_the_runtime_releases_callers_awaiting_a_turn(store):
    from agent import RuntimeClosedError

    gate = Gate()

    async def script(request):
        await gate.hold()
        return reply("never")

    runtime = AgentRuntime(store, Agent(name="a", model=ScriptedModel(script)))
    await runtime.start()
    session = runtime.session("a", "s1")
    waiting = asyncio.create_task(session.result(await session.start("hi", turn_id="t1")))
    await gate.reached.wait()
    await runtime.close()

    with pytest.raises(RuntimeClosedError, match="resumes from its last checkpoint"):
        await waiting
    assert (await store.load(KEY)).turns["t1"].status == "running"
