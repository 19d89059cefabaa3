"""Rules 19-21: cancel, replace and reset stop or retire work without breaking the transcript.

Each cancel boundary is shown on a turn held exactly there (a tool waiting on an
event, a model reply waiting mid-stream), and the next model call is checked
the way the Messages API checks it: a call left without a result would be
refused, and from then on every later request of the thread too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    AgentSession,
    AnthropicModel,
    AnthropicSettings,
    AssistantMessage,
    Cancelled,
    Completed,
    Interrupted,
    MemoryStore,
    ModelRequest,
    SQLiteStore,
    Suspended,
    ToolContext,
    ToolMessage,
    TurnInput,
    UserMessage,
    tool,
)
from agent.core.hitl import InboundEvent
from agent.core.records import Commit, SessionKey
from agent.errors import (
    ConfigError,
    ResumeConflictError,
    RuntimeClosedError,
    SessionSuspendedError,
    StoreError,
    TurnCancelledError,
    UnknownTurnError,
)
from agent.models.anthropic.wire import api_messages
from agent.testing import RecordingSink, ScriptedModel, call, reply
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply

from .wire_checks import assert_valid_api_messages

KEY = SessionKey("a", "s1")
SPEAKER = InboundEvent(source="slack", user="U1", attested=True, data={})
WAIT = 5.0


class Gates:
    """Tools that report when they are entered and wait until they are let go."""

    def __init__(self) -> None:
        self.entered: dict[str, asyncio.Event] = {}
        self.release: dict[str, asyncio.Event] = {}
        self.ran: list[str] = []

    def tool(self, name: str) -> Any:
        entered = self.entered.setdefault(name, asyncio.Event())
        release = self.release.setdefault(name, asyncio.Event())

        async def run(ctx: ToolContext) -> dict[str, Any]:
            entered.set()
            await release.wait()
            self.ran.append(name)
            return {"done": name}

        run.__name__ = name
        run.__doc__ = f"The {name} step."
        return tool(run)


@tool
async def post(ctx: ToolContext) -> dict[str, Any]:
    """Post once someone approves."""
    return {"posted": await ctx.request_input(id="ok", prompt="Post?", ttl=3600)}


def held(release: asyncio.Event, text: str = "done") -> ScriptedModel:
    """A model that answers only once ``release`` is set."""

    async def script(request: ModelRequest) -> Any:
        await release.wait()
        return reply(text)

    return ScriptedModel(script)


def batch_then_done(*names: str) -> Callable[[ModelRequest], Any]:
    """The first reply of a turn calls ``names`` as one batch; the next one answers."""

    def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            return reply(f"done after {len(names)} calls")
        return reply("", *(call(n, id=f"{n}-{last.turn_id}") for n in names))

    return script


async def runtime_with(
    store: Any, model: Any, tools: Any = (), sink: Any = None, **agent: Any
) -> AgentRuntime:
    runtime = AgentRuntime(store, Agent(name="a", model=model, tools=tools, **agent), sink=sink)
    await runtime.start()
    return runtime


async def checked_wire(store: Any) -> list[dict[str, Any]]:
    """The stored transcript as the API would get it, checked as the API checks it."""
    wire = api_messages(list((await store.load(KEY)).transcript))
    assert_valid_api_messages(wire)
    return wire


async def wait_for(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), WAIT)


@dataclass
class HeldTurn:
    """A session whose first turn is held inside its one tool call, ``slow``."""

    gates: Gates
    model: ScriptedModel
    runtime: AgentRuntime
    session: AgentSession
    turn_id: str


async def held_turn(store: Any, sink: Any = None) -> HeldTurn:
    gates = Gates()
    model = ScriptedModel(batch_then_done("slow"))
    runtime = await runtime_with(store, model, [gates.tool("slow")], sink)
    session = runtime.session("a", "s1")
    turn_id = await session.start("go")
    await wait_for(gates.entered["slow"])
    return HeldTurn(gates, model, runtime, session, turn_id)


# -- boundaries --------------------------------------------------------------------------


async def test_a_queued_turn_cancelled_before_it_starts_writes_no_message(store):
    sink = RecordingSink()
    held = await held_turn(store, sink)
    gates, model, runtime, session = held.gates, held.model, held.runtime, held.session
    first = held.turn_id
    queued = await session.start("second")

    assert await session.cancel(queued) is True
    assert await session.result(queued) == Cancelled(turn_id=queued, reason="requested")
    # it ended at once, while the turn ahead of it still runs
    assert (await session.turns())[0].status == "running"
    gates.release["slow"].set()
    assert isinstance(await session.result(first), Completed)
    stored = await store.load(KEY)
    assert [m.turn_id for m in stored.transcript].count(queued) == 0
    assert sink.types(queued) == ["turn.cancelled"]
    assert all(r.turn_id == first for r in model.requests)
    await runtime.close()


async def test_a_turn_cancelled_right_after_it_was_admitted_never_asks_the_model(store):
    model = ScriptedModel(lambda request: reply("never"))
    sink = RecordingSink()
    runtime = await runtime_with(store, model, sink=sink)
    session = runtime.session("a", "s1")

    turn_id = await session.start("hello")  # opened at admission: nothing was ahead of it
    assert await session.cancel(turn_id) is True

    assert await session.result(turn_id) == Cancelled(turn_id=turn_id, reason="requested")
    assert not model.requests
    assert sink.types(turn_id)[-1] == "turn.cancelled"
    assert await session.status() == "idle"
    await runtime.close()


async def test_a_cancel_while_a_tool_runs_stops_before_the_next_model_call(store):
    held = await held_turn(store)
    gates, model, runtime, session = held.gates, held.model, held.runtime, held.session
    turn_id = held.turn_id

    assert await session.cancel(turn_id) is True
    gates.release["slow"].set()  # a running tool finishes; what it did is committed

    assert await session.result(turn_id) == Cancelled(turn_id=turn_id, reason="requested")
    assert gates.ran == ["slow"]
    assert len(model.requests) == 1
    [result] = [m for m in (await store.load(KEY)).transcript if isinstance(m, ToolMessage)]
    assert result.result == {"done": "slow"}
    assert not result.is_error
    await runtime.close()


async def test_a_cancel_between_calls_of_a_batch_closes_the_rest_and_the_next_call_is_valid(
    store,
):
    gates = Gates()
    sink = RecordingSink()
    model = ScriptedModel(batch_then_done("first", "second", "third"))
    tools = [gates.tool("first"), gates.tool("second"), gates.tool("third")]
    # one call at a time, so the cancel lands between calls (a batch of concurrent calls
    # is cancelled in test_parallel_calls.py)
    runtime = await runtime_with(store, model, tools, sink, max_parallel_calls=1)
    session = runtime.session("a", "s1")
    turn_id = await session.start("go")
    await wait_for(gates.entered["first"])

    await session.cancel(turn_id)
    gates.release["first"].set()
    assert isinstance(await session.result(turn_id), Cancelled)

    results = {
        m.call_id: m for m in (await store.load(KEY)).transcript if isinstance(m, ToolMessage)
    }
    assert results[f"first-{turn_id}"].result == {"done": "first"}
    for name in ("second", "third"):
        closing = results[f"{name}-{turn_id}"]
        assert closing.result == {"cancelled": True}
        assert closing.is_error
    assert gates.ran == ["first"]
    assert [e.name for e in sink.events if e.type == "action.requested"] == ["first"]

    # the thread goes on: the next model call carries a result for every call
    gates.release["second"].set()
    gates.release["third"].set()
    done = await session.turn("and now?")
    assert done.text == "done after 3 calls"
    wire = await checked_wire(store)
    results_sent = [b for b in wire[2]["content"] if b["type"] == "tool_result"]
    assert len(results_sent) == 3
    await runtime.close()


async def test_a_cancel_mid_stream_aborts_the_model_request_and_commits_nothing(
    sqlite_store: SQLiteStore,
):
    async with FakeAnthropic() as api:
        api.queue(Hang(Reply.text("A long answer that never ends"), after_events=6))
        api.queue(Reply.text("Fresh answer."))
        settings = AnthropicSettings(api_key="test-key", base_url=api.base_url, max_retries=0)
        model = AnthropicModel(settings)
        sink = RecordingSink()
        runtime = await runtime_with(sqlite_store, model, sink=sink)
        session = runtime.session("a", "s1")
        turn_id = await session.start("Tell me everything.")
        await wait_for(api.hung)
        assert any(e.type == "message.delta" for e in sink.events)

        await session.cancel(turn_id)
        result = await asyncio.wait_for(session.result(turn_id), WAIT)

        assert result == Cancelled(turn_id=turn_id, reason="requested")
        for _ in range(500):  # the server notices the closed connection on its own time
            if api.abandoned:
                break
            await asyncio.sleep(0.01)
        assert api.abandoned == 1
        transcript = (await sqlite_store.load(KEY)).transcript
        assert not any(isinstance(m, AssistantMessage) for m in transcript)
        assert sink.types(turn_id)[-1] == "turn.cancelled"

        # the next turn's request is one the real API accepts (the fake refuses what it would)
        done = await session.turn("Just the short version.")
        assert done.text == "Fresh answer."
        assert len(api.requests) == 2
        assert api.requests[1]["messages"][0]["role"] == "user"
        await runtime.close()
        await model.aclose()


async def test_a_cancelled_batch_is_accepted_by_the_messages_api_on_the_next_turn(
    sqlite_store: SQLiteStore,
):
    gates = Gates()
    async with FakeAnthropic() as api:
        two_calls = Reply(
            [
                {"type": "tool_use", "id": "toolu_a", "name": "first", "input": {}},
                {"type": "tool_use", "id": "toolu_b", "name": "second", "input": {}},
            ],
            stop_reason="tool_use",
        )
        api.queue(two_calls, Reply.text("Starting over."))
        settings = AnthropicSettings(api_key="test-key", base_url=api.base_url, max_retries=0)
        model = AnthropicModel(settings)
        runtime = await runtime_with(
            sqlite_store, model, [gates.tool("first"), gates.tool("second")], max_parallel_calls=1
        )
        session = runtime.session("a", "s1")
        turn_id = await session.start("Do both.")
        await wait_for(gates.entered["first"])
        await session.cancel(turn_id)
        gates.release["first"].set()
        assert isinstance(await session.result(turn_id), Cancelled)

        done = await session.turn("Never mind, start over.")

        assert done.text == "Starting over."
        sent = api.requests[-1]["messages"]
        results = {b["tool_use_id"]: b for b in sent[2]["content"] if b["type"] == "tool_result"}
        assert set(results) == {"toolu_a", "toolu_b"}
        assert results["toolu_b"]["is_error"] is True
        assert json.loads(results["toolu_b"]["content"]) == {"cancelled": True}
        await runtime.close()
        await model.aclose()


async def test_a_parked_turn_can_be_cancelled_and_its_request_is_withdrawn(store):
    model = ScriptedModel(batch_then_done("post"))
    runtime = await runtime_with(store, model, [post])
    session = runtime.session("a", "s1")
    turn_id = await session.start(TurnInput(text="post", user="U1", event=SPEAKER))
    assert isinstance(await session.result(turn_id), Suspended)

    assert await session.cancel(turn_id) is True

    assert await session.result(turn_id) == Cancelled(turn_id=turn_id, reason="requested")
    assert await session.pending() == ()
    assert await session.status() == "idle"
    assert not runtime._expiries  # the request's expiry timer went with it
    with pytest.raises(ResumeConflictError):
        await session.resume(turn_id, "ok", True, by="U1")
    closing = (await store.load(KEY)).transcript[-1]
    assert isinstance(closing, ToolMessage)
    assert closing.result == {"cancelled": True}
    # the session takes new turns again, on a transcript the model's API accepts
    after = await session.start(TurnInput(text="post again", user="U1", event=SPEAKER))
    assert isinstance(await session.result(after), Suspended)
    await checked_wire(store)
    await runtime.close()


async def test_cancel_says_whether_there_was_anything_to_cancel(store):
    runtime = await runtime_with(store, ScriptedModel(lambda request: reply("hi")))
    session = runtime.session("a", "s1")
    done = await session.turn("hello")

    assert await session.cancel(done.turn_id) is False
    assert await session.result(done.turn_id) == done
    with pytest.raises(UnknownTurnError):
        await session.cancel("no-such-turn")
    await runtime.close()


async def test_turn_raises_when_its_turn_is_cancelled(store):
    runtime = await runtime_with(store, held(asyncio.Event()))
    session = runtime.session("a", "s1")
    waiting = asyncio.ensure_future(session.turn("hello", turn_id="t1"))
    await asyncio.sleep(0.05)
    await session.cancel("t1", reason="operator")

    with pytest.raises(TurnCancelledError, match="operator"):
        await asyncio.wait_for(waiting, WAIT)
    await runtime.close()


# -- replace -----------------------------------------------------------------------------


async def test_replace_cancels_the_running_and_the_queued_turns_then_runs_the_new_one(store):
    release = asyncio.Event()
    asked = asyncio.Event()
    sink = RecordingSink()

    async def script(request: ModelRequest) -> Any:
        if request.turn_id == "old":
            asked.set()
            await release.wait()  # mid-reply when the newer message arrives
        return reply(f"answer to {request.messages[-1].text}")

    model = ScriptedModel(script)
    runtime = await runtime_with(store, model, sink=sink)
    session = runtime.session("a", "s1")
    await session.start("old question", turn_id="old")
    await wait_for(asked)
    await session.start("queued question", turn_id="queued")

    new = await session.start("newer question", turn_id="new", replace=True)

    assert await session.result("old") == Cancelled(turn_id="old", reason="replaced")
    assert await session.result("queued") == Cancelled(turn_id="queued", reason="replaced")
    done = await session.result(new)
    assert isinstance(done, Completed)
    assert done.text == "answer to newer question"
    assert [r.turn_id for r in model.requests] == ["old", "new"]
    stored = (await store.load(KEY)).transcript
    assert [m.turn_id for m in stored if isinstance(m, UserMessage)] == ["old", "new"]
    assert [m.turn_id for m in stored if isinstance(m, AssistantMessage)] == ["new"]
    cancelled = [e for e in sink.events if e.type == "turn.cancelled"]
    assert sorted((e.turn_id, e.reason) for e in cancelled) == [
        ("old", "replaced"),
        ("queued", "replaced"),
    ]
    await checked_wire(store)
    await runtime.close()


class LateRequests:
    """A store whose writes asking a running turn to stop reach the disk late.

    As on PostgreSQL, where the request and the run's own ending go over two pooled
    connections and either may commit first. As each cancelled ending is about to be
    written, it notes whether the turns that replaced it were on disk by then: a
    crash between the two writes leaves exactly what the disk held.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.on_disk_before_ending: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        if commit.cancels:
            await asyncio.sleep(0.2)
        if any(t.status == "cancelled" for t in commit.turns):
            self.on_disk_before_ending.append(list((await self._inner.load(key)).turns))
        await self._inner.commit(key, commit)


async def test_a_replaced_turn_never_ends_on_disk_before_the_turn_that_replaced_it(store):
    release = asyncio.Event()
    asked = asyncio.Event()

    async def script(request: ModelRequest) -> Any:
        if request.turn_id == "old":
            asked.set()
            await release.wait()  # mid-reply when the newer message arrives
        return reply("answer")

    late = LateRequests(store)
    runtime = await runtime_with(late, ScriptedModel(script))
    session = runtime.session("a", "s1")
    await session.start("old question", turn_id="old")
    await wait_for(asked)

    await session.start("newer question", turn_id="new", replace=True)

    assert await session.result("old") == Cancelled(turn_id="old", reason="replaced")
    assert isinstance(await session.result("new"), Completed)
    assert late.on_disk_before_ending == [["old", "new"]]
    await runtime.close()


async def test_a_redelivered_replacing_turn_does_not_cancel_itself(store):
    release = asyncio.Event()
    runtime = await runtime_with(store, held(release))
    session = runtime.session("a", "s1")
    await session.start("hi", turn_id="ev1", replace=True)
    await asyncio.sleep(0.02)
    await session.start("hi", turn_id="ev1", replace=True)  # a Slack retry of the same event
    release.set()

    assert isinstance(await session.result("ev1"), Completed)
    await runtime.close()


async def test_replace_leaves_a_parked_approval_alone(store):
    runtime = await runtime_with(store, ScriptedModel(batch_then_done("post")), [post])
    session = runtime.session("a", "s1")
    parked = await session.start(TurnInput(text="post", user="U1", event=SPEAKER))
    assert isinstance(await session.result(parked), Suspended)

    with pytest.raises(SessionSuspendedError):
        await session.start("something newer", replace=True)

    assert (await session.pending()) != ()
    assert [t.status for t in await session.turns()] == ["suspended"]
    await session.resume(parked, "ok", True, by="U1")
    assert isinstance(await session.result(parked), Completed)
    await runtime.close()


# -- reset -------------------------------------------------------------------------------


async def test_reset_archives_the_history_with_a_parked_approval_and_starts_afresh(
    sqlite_store: SQLiteStore,
):
    def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.text == "post":
            return reply("", call("post", id=f"c-{last.turn_id}"))
        return reply(f"{len(request.messages)} messages in view")

    model = ScriptedModel(script)
    runtime = await runtime_with(sqlite_store, model, [post])
    session = runtime.session("a", "s1")
    first = await session.turn("hello")
    parked = await session.start(TurnInput(text="post", user="U1", event=SPEAKER))
    assert isinstance(await session.result(parked), Suspended)

    reset = await session.reset()

    assert (reset.previous_session, reset.generation) == ("s1#g0", 1)
    assert await session.status() == "new"
    assert await session.turns() == []
    assert await session.pending() == ()
    assert not runtime._expiries
    for table in ("messages", "steps", "turns"):
        assert await sqlite_store.dump_table(table) == [], table
    archive = await session.archived(0)
    assert archive is not None
    assert archive.turns[first.turn_id].status == "completed"
    assert archive.turns[parked].result == Cancelled(turn_id=parked, reason="reset")
    assert [m.role for m in archive.transcript] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert archive.transcript[-1].result == {"cancelled": True}
    assert f"model:{1}" in archive.steps[first.turn_id]
    with pytest.raises(ResumeConflictError):
        await session.resume(parked, "ok", True, by="U1")
    with pytest.raises(UnknownTurnError, match="archived by a reset"):
        await session.result(parked)

    done = await session.turn("hello again")
    assert done.text == "1 messages in view"
    assert await session.archived(1) is None
    await runtime.close()

    # the archive and the new generation outlive the process
    reopened = await runtime_with(sqlite_store, model, [post])
    again = reopened.session("a", "s1")
    assert [t.turn_id for t in await again.turns()] == [done.turn_id]
    assert (await again.archived(0)).transcript == archive.transcript
    assert await again.start("hello", turn_id=first.turn_id) == first.turn_id  # a redelivery
    assert [t.turn_id for t in await again.turns()] == [done.turn_id]
    await reopened.close()


async def test_while_a_reset_is_pending_resume_refuses_and_new_turns_queue_behind_it(store):
    gates = Gates()
    sink = RecordingSink()
    seen: list[tuple[str, list[str]]] = []  # each request's turn, and its messages' turns
    scripted = batch_then_done("slow")

    def script(request: ModelRequest) -> Any:
        seen.append((request.turn_id, [m.turn_id for m in request.messages]))
        return scripted(request)

    model = ScriptedModel(script)
    runtime = await runtime_with(store, model, [gates.tool("slow")], sink)
    session = runtime.session("a", "s1")
    running = await session.start("go")
    await wait_for(gates.entered["slow"])

    ending = asyncio.ensure_future(session.result(running))
    resetting = asyncio.ensure_future(session.reset())
    await asyncio.sleep(0.02)
    assert not resetting.done()  # the running tool has not reached a boundary yet
    with pytest.raises(ResumeConflictError, match="being reset"):
        await session.resume(running, "ok", True, by="U1")
    behind = await session.start("after the reset")
    gates.release["slow"].set()

    reset = await asyncio.wait_for(resetting, WAIT)
    assert reset.generation == 1
    assert await ending == Cancelled(turn_id=running, reason="reset")
    assert isinstance(await session.result(behind), Completed)
    behind_first = next(turns for turn, turns in seen if turn == behind)
    assert behind_first == [behind]  # it ran on the empty transcript
    archive = await session.archived(0)
    assert archive is not None
    assert set(archive.turns) == {running}
    assert [t.turn_id for t in await session.turns()] == [behind]
    await runtime.close()


async def test_a_reset_pending_when_the_process_stopped_is_carried_out_at_the_next_start(
    sqlite_store: SQLiteStore,
):
    held = await held_turn(sqlite_store)
    gates, model, runtime, session = held.gates, held.model, held.runtime, held.session
    running = held.turn_id
    resetting = asyncio.ensure_future(session.reset())
    await asyncio.sleep(0.02)
    await runtime.close()  # as a crash would: the tool never returned
    with pytest.raises(RuntimeClosedError):
        await resetting
    [(session_row)] = await sqlite_store.dump_table("sessions")
    assert session_row[5] == 1  # reset_through: pending, on disk

    gates = Gates()
    reopened = await runtime_with(sqlite_store, model, [gates.tool("slow")])
    again = reopened.session("a", "s1")
    for _ in range(200):
        if await again.status() == "new":
            break
        await asyncio.sleep(0.01)

    assert await again.status() == "new"
    assert await again.turns() == []
    archive = await again.archived(0)
    assert archive is not None
    assert archive.turns[running].result == Cancelled(turn_id=running, reason="reset")
    assert not gates.entered["slow"].is_set()  # the cancelled call was not made again
    assert len(model.requests) == 1
    await reopened.close()


async def test_a_reset_of_an_idle_session_returns_at_once_and_two_resets_number_on(store):
    runtime = await runtime_with(store, ScriptedModel(lambda request: reply("hi")))
    session = runtime.session("a", "s1")
    await session.turn("one")
    assert (await session.reset()).previous_session == "s1#g0"
    await session.turn("two")
    second = await session.reset()

    assert (second.previous_session, second.generation) == ("s1#g1", 2)
    archive = await session.archived(1)
    assert archive is not None
    assert [m.role for m in archive.transcript] == ["user", "assistant"]
    await runtime.close()


# -- time limit --------------------------------------------------------------------------


async def test_a_turn_over_its_time_limit_is_interrupted_and_the_next_turn_runs(store):
    never = asyncio.Event()

    async def script(request: ModelRequest) -> Any:
        if request.turn_id == "stuck":
            await never.wait()  # a model that never answers
        return reply("quick")

    sink = RecordingSink()
    runtime = await runtime_with(store, ScriptedModel(script), sink=sink, max_turn_seconds=0.2)
    session = runtime.session("a", "s1")
    await session.start("hello", turn_id="stuck")
    await session.start("next", turn_id="next")

    assert await asyncio.wait_for(session.result("stuck"), WAIT) == Interrupted(
        turn_id="stuck", reason="timeout", detail="it ran longer than a turn may"
    )
    assert isinstance(await asyncio.wait_for(session.result("next"), WAIT), Completed)
    assert [e.reason for e in sink.events if e.type == "turn.interrupted"] == ["timeout"]
    assert not [e for e in sink.events if e.type == "turn.cancelled"]
    assert (await store.load(KEY)).turns["stuck"].status == "interrupted"
    await runtime.close()


async def test_a_tool_that_outlasts_the_time_limit_finishes_then_the_turn_ends(store):
    @tool
    async def slow() -> str:
        """Takes longer than the turn may."""
        await asyncio.sleep(0.3)
        return "finished"

    model = ScriptedModel(batch_then_done("slow"))
    runtime = await runtime_with(store, model, [slow], max_turn_seconds=0.1)
    session = runtime.session("a", "s1")

    result = await asyncio.wait_for(session.result(await session.start("go")), WAIT)

    assert isinstance(result, Interrupted)
    assert result.reason == "timeout"
    [done] = [m for m in (await store.load(KEY)).transcript if isinstance(m, ToolMessage)]
    assert done.result == "finished"
    assert len(model.requests) == 1
    await runtime.close()


def test_a_time_limit_must_be_positive():
    with pytest.raises(ConfigError, match="max_turn_seconds"):
        Agent(name="a", model=ScriptedModel(lambda r: reply("x")), max_turn_seconds=0)


async def test_a_park_whose_cancel_was_stored_as_it_was_written_ends_at_the_next_start(
    sqlite_store: SQLiteStore,
):
    model = ScriptedModel(batch_then_done("post"))
    runtime = await runtime_with(sqlite_store, model, [post])
    session = runtime.session("a", "s1")
    parked = await session.start(TurnInput(text="post", user="U1", event=SPEAKER))
    assert isinstance(await session.result(parked), Suspended)
    await runtime.close()
    # what a stop leaves when a cancel lands while the park is being written: the park,
    # and beside it the stored request that its run did not live to carry out
    await sqlite_store.commit(KEY, Commit(cancels=((parked, "requested"),)))

    reopened = await runtime_with(sqlite_store, model, [post])
    again = reopened.session("a", "s1")

    assert await again.result(parked) == Cancelled(turn_id=parked, reason="requested")
    assert await again.status() == "idle"
    assert (await sqlite_store.load(KEY)).transcript[-1].result == {"cancelled": True}
    after = await again.start(TurnInput(text="post again", user="U1", event=SPEAKER))
    assert isinstance(await again.result(after), Suspended)
    await reopened.close()


class CancelsDoNotLand(MemoryStore):
    """A memory store whose disk fails every write that would cancel a turn."""

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        if commit.cancels or any(t.status == "cancelled" for t in commit.turns):
            raise StoreError("disk I/O error")
        await super().commit(key, commit)


async def test_a_cancel_whose_write_fails_leaves_every_turn_as_it_was():
    gates = Gates()
    order: list[str] = []
    scripted = batch_then_done("slow")

    def script(request: ModelRequest) -> Any:
        order.append(request.turn_id)
        return scripted(request)

    runtime = await runtime_with(CancelsDoNotLand(), ScriptedModel(script), [gates.tool("slow")])
    session = runtime.session("a", "s1")
    for turn_id in ("A", "B", "C"):
        await session.start(turn_id, turn_id=turn_id)
    await wait_for(gates.entered["slow"])

    with pytest.raises(StoreError):
        await session.cancel("C")
    with pytest.raises(StoreError):
        await session.cancel("A")
    with pytest.raises(StoreError):
        await session.start("D", turn_id="D", replace=True)
    gates.release["slow"].set()

    # nothing was cancelled, and the turns still run one at a time in admission order
    for turn_id in ("A", "B", "C"):
        assert isinstance(await asyncio.wait_for(session.result(turn_id), WAIT), Completed)
    assert list(dict.fromkeys(order)) == ["A", "B", "C"]
    assert [t.turn_id for t in await session.turns()] == ["A", "B", "C"]
    await runtime.close()


async def test_a_reset_asked_while_one_is_pending_also_covers_the_turns_admitted_since(store):
    held = await held_turn(store)
    gates, model, runtime, session = held.gates, held.model, held.runtime, held.session
    running = held.turn_id
    first = asyncio.ensure_future(session.reset())
    await asyncio.sleep(0.02)
    between = await session.start("admitted between the two resets")
    ended = asyncio.ensure_future(session.result(between))
    second = asyncio.ensure_future(session.reset())
    await asyncio.sleep(0.02)
    gates.release["slow"].set()

    assert await asyncio.wait_for(first, WAIT) == await asyncio.wait_for(second, WAIT)
    assert await ended == Cancelled(turn_id=between, reason="reset")
    archive = await session.archived(0)
    assert archive is not None
    assert set(archive.turns) == {running, between}
    assert await session.turns() == []
    assert [r.turn_id for r in model.requests] == [running]
    await runtime.close()
