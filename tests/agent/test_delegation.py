"""Issue 22, point 1: delegation to a sub-agent, as a tracked, durable child turn.

The lead agent hands a task to the researcher, a second mounted agent. The child
is a turn of the session ``<parent session>/<call id>``, recorded on the parent's
call, its events forwarded into the parent's stream tagged with ``via``; the
parent's call completes with the child's reply. A child that asks a person makes
the parent wait on a mirror of its request; answering it answers the child, as
the child's request says. A stop of the parent reaches the child; a child may
delegate further, up to a depth; the child's own policy applies.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from agent import (
    Agent,
    AgentRuntime,
    AgentSession,
    AnswerCheck,
    Cancelled,
    Completed,
    FatalToolError,
    InboundEvent,
    Interrupted,
    ResumeAuthorizationError,
    ResumeConflictError,
    SurfacePolicy,
    Suspended,
    ToolContext,
    ToolMessage,
    TurnEvent,
    TurnInput,
    TurnPolicy,
    delegate_tool,
    grant_answer,
    is_terminal,
    tool,
)
from agent.core.records import SessionKey
from agent.testing import RecordingSink, ScriptedModel, call, reply

WAIT = 10.0
SPEAKER = InboundEvent(source="slack", user="U1", attested=True, data={"channel": "C1"})
OPENING = TurnInput(text="find the launch date", user="U1", event=SPEAKER)


async def ending(session: AgentSession, turn_id: str) -> asyncio.Future[TurnEvent]:
    """Resolves with the next event that ends ``turn_id``'s stream (subscribed now)."""
    ended: asyncio.Future[TurnEvent] = asyncio.get_running_loop().create_future()

    def see(event: TurnEvent) -> None:
        if is_terminal(event) and not ended.done():
            ended.set_result(event)

    stop = await session.observe(see, turn_id=turn_id)
    ended.add_done_callback(lambda _: stop())
    return ended


async def then_result(session: AgentSession, turn_id: str, ended: Any) -> Any:
    await asyncio.wait_for(ended, WAIT)
    return await session.result(turn_id)


def results_of(request: Any) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


def lead_script(request: Any) -> Any:
    """Delegate once, then report what came back."""
    done = results_of(request)
    if not done:
        return reply("Asking the researcher.", call("research", {"task": "launch date?"}, id="c1"))
    return reply(f"lead: {done[-1].result}")


def researcher(tools: list[Any], script: Any = None, **options: Any) -> Agent:
    def default(request: Any) -> Any:
        done = results_of(request)
        if not done and tools:
            return reply("", call(tools[0].name, {}, id="r1"))
        return reply(f"found {done[-1].result if done else 'nothing'}")

    return Agent(name="researcher", model=ScriptedModel(script or default), tools=tools, **options)


def lead(**options: Any) -> Agent:
    return Agent(
        name="lead",
        model=ScriptedModel(lead_script),
        tools=[delegate_tool("researcher", name="research")],
        **options,
    )


@tool
async def look_up() -> str:
    """Look the date up."""
    return "May 4"


async def test_a_delegated_task_runs_as_a_child_turn_whose_reply_completes_the_call(store):
    sink = RecordingSink()
    async with AgentRuntime(store, [lead(), researcher([look_up])], sink=sink) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        seen = [event async for event in session.stream(turn_id)]
        done = await session.result(turn_id)
        child = runtime.session("researcher", "s1/c1")
        [record] = await child.turns()

    assert done == Completed(turn_id=turn_id, text="lead: found May 4")
    # the child is a turn of its own session, addressed from the parent's turn and call
    assert record.turn_id == f"{turn_id}/c1"
    assert record.status == "completed"
    link = record.input.parent
    assert link is not None
    assert (link.agent, link.session_id, link.turn_id, link.call_id, link.depth) == (
        "lead",
        "s1",
        turn_id,
        "c1",
        1,
    )
    assert record.input.text == "launch date?"
    assert record.input.by == "agent:lead"
    # recorded on the parent's call
    steps = await store.load_steps(SessionKey("lead", "s1"), turn_id)
    assert steps["child:c1:0"] == {
        "agent": "researcher",
        "session_id": "s1/c1",
        "turn_id": f"{turn_id}/c1",
    }
    # the child's events reach the parent's stream, tagged, and end nothing there
    forwarded = [e for e in seen if e.via is not None]
    assert {(e.agent, e.session, e.turn_id, e.via) for e in forwarded} == {
        ("researcher", "s1/c1", f"{turn_id}/c1", turn_id)
    }
    assert [e.type for e in forwarded] == [
        "turn.started",
        "action.requested",
        "action.completed",
        "message.delta",
        "message.completed",
        "turn.completed",
    ]
    assert seen[-1].type == "turn.completed"
    assert seen[-1].turn_id == turn_id
    assert seen[-1].via is None
    # the host's sinks see the child's events once, from its own session, untagged
    child_events = [e for e in sink.events if e.agent == "researcher"]
    assert child_events
    assert all(e.via is None for e in child_events)
    started = next(e for e in child_events if e.type == "turn.started")
    assert started.parent == turn_id
    assert started.trigger == "proactive"


async def test_ctx_delegate_in_a_tool_starts_one_child_per_call_in_order_and_returns_output(
    store,
):
    class Date(BaseModel):
        day: str

    def answer_with_output(request: Any) -> Any:
        if not results_of(request):
            return reply("", call("final_result", {"day": request.messages[0].text}, id="o1"))
        return reply("done")

    dated = Agent(name="dated", model=ScriptedModel(answer_with_output), output_type=Date)

    @tool
    async def compare(ctx: ToolContext) -> list[Any]:
        """Ask twice and compare."""
        return [await ctx.delegate("dated", "May 4"), await ctx.delegate("dated", "May 5")]

    def script(request: Any) -> Any:
        done = results_of(request)
        if not done:
            return reply("", call("compare", id="c7"))
        return reply(f"got {done[-1].result}")

    boss = Agent(name="boss", model=ScriptedModel(script), tools=[compare])
    async with AgentRuntime(store, [boss, dated]) as runtime:
        done = await runtime.session("boss", "s1").turn("compare")
        first = await runtime.session("dated", "s1/c7").turns()
        second = await runtime.session("dated", "s1/c7.1").turns()

    assert done.text == "got [{'day': 'May 4'}, {'day': 'May 5'}]"
    assert [t.turn_id for t in first] == [f"{done.turn_id}/c7"]
    assert [t.turn_id for t in second] == [f"{done.turn_id}/c7.1"]


def approving_tool(ran: list[str]) -> Any:
    @tool
    async def publish(ctx: ToolContext) -> str:
        """Publish the finding once someone approves."""
        approved = await ctx.request_input(
            id="publish", prompt="Publish the date?", schema={"type": "boolean"}
        )
        ran.append(f"publish:{approved}")
        return "published" if approved else "kept"

    return publish


async def test_a_child_that_asks_suspends_its_parent_on_a_mirror_answered_as_the_child_says(
    store,
):
    ran: list[str] = []
    child_agent = researcher([approving_tool(ran)])
    model_of_child = child_agent.model
    assert isinstance(model_of_child, ScriptedModel)
    sink = RecordingSink()
    async with AgentRuntime(store, [lead(), child_agent], sink=sink) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        parked = await session.result(turn_id)
        child = runtime.session("researcher", "s1/c1")
        child_turn = f"{turn_id}/c1"

        assert isinstance(parked, Suspended)
        [mirror] = await session.pending()
        assert mirror.child is not None
        assert (mirror.child.agent, mirror.child.session_id, mirror.child.turn_id) == (
            "researcher",
            "s1/c1",
            child_turn,
        )
        assert mirror.child.input_id == "publish"
        assert mirror.call_id == "c1"
        assert mirror.prompt == "Publish the date?"
        assert mirror.tool == "publish"
        [asked] = await child.pending()
        assert asked.answerers == mirror.answerers  # the parent's speaker, attested
        # the child's input.requested carries the child's turn id
        requested = [e for e in sink.events if e.type == "input.requested"]
        assert {e.turn_id for e in requested} == {turn_id, child_turn}

        # answered as the child's request says: the speaker, not someone else
        with pytest.raises(ResumeAuthorizationError):
            await session.resume(turn_id, mirror.id, True, by="U2")
        child_requests = len(model_of_child.requests)
        await session.resume(turn_id, mirror.id, True, by="U1")
        done = await asyncio.wait_for(session.result(turn_id), WAIT)
        with pytest.raises(ResumeConflictError, match="already answered by U1"):
            await session.resume(turn_id, mirror.id, False, by="U1")

    assert done == Completed(turn_id=turn_id, text="lead: found published")
    assert ran == ["publish:True"]
    # the child's committed model step was not asked again: one more request, for its reply
    assert len(model_of_child.requests) == child_requests + 1
    assert await session.pending() == ()


async def test_answering_the_child_itself_runs_the_parent_on(store):
    ran: list[str] = []
    async with AgentRuntime(store, [lead(), researcher([approving_tool(ran)])]) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        child = runtime.session("researcher", "s1/c1")

        runs_on = await ending(session, turn_id)
        await child.resume(f"{turn_id}/c1", "publish", False, by="U1")
        done = await then_result(session, turn_id, runs_on)

    assert done == Completed(turn_id=turn_id, text="lead: found kept")
    assert ran == ["publish:False"]


async def test_a_parent_found_waiting_on_a_child_that_moved_on_runs_on_at_start(store):
    ran: list[str] = []
    agents = [lead(), researcher([approving_tool(ran)])]
    async with AgentRuntime(store, agents) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
    # the child is answered by a process that mounts only the researcher: nothing can
    # tell the parent then
    async with AgentRuntime(store, agents[1:]) as alone:
        child = alone.session("researcher", "s1/c1")
        await child.resume(f"{turn_id}/c1", "publish", True, by="U1")
        assert isinstance(await child.result(f"{turn_id}/c1"), Completed)
    async with AgentRuntime(store, agents) as runtime:
        done = await asyncio.wait_for(runtime.session("lead", "s1").result(turn_id), WAIT)

    assert done == Completed(turn_id=turn_id, text="lead: found published")
    assert ran == ["publish:True"]


@pytest.mark.parametrize("how", ["requested", "replaced"])
async def test_cancelling_or_replacing_a_parent_cancels_its_running_child(store, how):
    started = asyncio.Event()

    @tool
    async def dig() -> str:
        """Dig for a long time."""
        started.set()
        await asyncio.sleep(60)
        return "deep"

    agents = [lead(tool_cancel_grace=5.0), researcher([dig], tool_cancel_grace=0.05)]
    async with AgentRuntime(store, agents) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        await asyncio.wait_for(started.wait(), WAIT)
        if how == "requested":
            assert await session.cancel(turn_id) is True
        else:
            await session.start(TurnInput(text="never mind", event=SPEAKER), replace=True)
        done = await asyncio.wait_for(session.result(turn_id), WAIT)
        child = await runtime.session("researcher", "s1/c1").result(f"{turn_id}/c1")

    assert done == Cancelled(turn_id=turn_id, reason=how)
    assert child == Cancelled(turn_id=f"{turn_id}/c1", reason=how)


async def test_the_time_limit_of_a_parent_reaches_its_child(store):
    @tool
    async def dig() -> str:
        """Dig for a long time."""
        await asyncio.sleep(60)
        return "deep"

    agents = [lead(max_turn_seconds=0.3), researcher([dig], tool_cancel_grace=0.05)]
    async with AgentRuntime(store, agents) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        done = await asyncio.wait_for(session.result(turn_id), WAIT)
        child = await runtime.session("researcher", "s1/c1").result(f"{turn_id}/c1")

    assert isinstance(done, Interrupted)
    assert done.reason == "timeout"
    assert isinstance(child, Interrupted)
    assert child.reason == "timeout"


async def test_cancelling_or_resetting_a_parent_that_waits_on_its_child_cancels_the_child(store):
    async with AgentRuntime(store, [lead(), researcher([approving_tool([])])]) as runtime:
        session = runtime.session("lead", "s1")
        first = await session.start(OPENING)
        assert isinstance(await session.result(first), Suspended)
        child = runtime.session("researcher", "s1/c1")

        child_ends = await ending(child, f"{first}/c1")
        assert await session.cancel(first) is True
        cancelled = await then_result(child, f"{first}/c1", child_ends)
        assert cancelled == Cancelled(turn_id=f"{first}/c1", reason="requested")

        other = runtime.session("lead", "s2")
        second = await other.start(OPENING, turn_id="t2")
        assert isinstance(await other.result(second), Suspended)
        other_child = runtime.session("researcher", "s2/c1")
        child_ends = await ending(other_child, "t2/c1")
        await other.reset()
        reset = await then_result(other_child, "t2/c1", child_ends)

    assert reset == Cancelled(turn_id="t2/c1", reason="reset")


async def test_a_child_may_delegate_further_up_to_the_depth_allowed(store):
    def script(request: Any) -> Any:
        done = results_of(request)
        if not done:
            return reply("", call("deeper", {"task": "again"}, id="d"))
        return reply(f"level {request.session_id}: {done[-1].result}")

    nested = Agent(
        name="nested",
        model=ScriptedModel(script),
        tools=[delegate_tool("nested", name="deeper")],
        max_delegation_depth=2,
    )
    async with AgentRuntime(store, nested) as runtime:
        done = await runtime.session("nested", "s1").turn("go")

    # s1 delegates to s1/d, which delegates to s1/d/d; that one may not go further
    assert done.text == (
        "level s1: level s1/d: level s1/d/d: {'error': 'ToolError: cannot delegate to "
        "nested: it would be 3 delegations deep, and agent nested allows 2'}"
    )


async def test_a_child_runs_under_its_own_policy_and_never_reaches_what_the_parent_denies(store):
    offered: list[set[str]] = []

    @tool
    async def post() -> str:
        """Post somewhere."""
        return "posted"

    @tool
    async def wipe() -> str:
        """Wipe something."""
        return "wiped"

    @tool
    async def read() -> str:
        """Read something."""
        return "read"

    def script(request: Any) -> Any:
        offered.append({spec.name for spec in request.tools})
        done = results_of(request)
        if not done:
            return reply("", call("post", id="p"), call("wipe", id="w"), call("read", id="r"))
        return reply(" ".join(str(m.result) for m in done))

    child = Agent(
        name="researcher",
        model=ScriptedModel(script),
        tools=[post, wipe, read],
        instructions="You research.",
        surfaces={"slack": SurfacePolicy(deny_tools=("post",))},
    )
    policy = TurnPolicy(source="slack", place="C1", system="You lead.", deny_tools=("wipe",))
    async with AgentRuntime(store, [lead(), child]) as runtime:
        session = runtime.session("lead", "s1")
        opening = TurnInput(text="go", user="U1", event=SPEAKER, policy=policy)
        turn_id = await session.start(opening)
        done = await asyncio.wait_for(session.result(turn_id), WAIT)
        [record] = await runtime.session("researcher", "s1/c1").turns()

    assert record.input.policy == TurnPolicy(
        source="slack", place="C1", system="You research.", deny_tools=("post", "wipe")
    )
    assert offered[0] == {"read"}
    assert isinstance(done, Completed)
    assert done.text == (
        "lead: {'error': 'ToolError: unknown tool: post'} "
        "{'error': 'ToolError: unknown tool: wipe'} read"
    )


async def test_a_child_that_fails_or_an_agent_not_mounted_gives_the_call_an_error(store):
    @tool
    async def search() -> str:
        """Search the index."""
        raise FatalToolError("the index is down")

    def searching(request: Any) -> Any:
        return reply("", call("search", id="s"))

    def script(request: Any) -> Any:
        done = results_of(request)
        if not done:
            return reply(
                "",
                call("research", {"task": "x"}, id="c1"),
                call("ask_nobody", {"task": "y"}, id="c2"),
            )
        return reply(" | ".join(str(m.result["error"]) for m in done))

    boss = Agent(
        name="lead",
        model=ScriptedModel(script),
        tools=[delegate_tool("researcher", name="research"), delegate_tool("nobody")],
    )
    failing = Agent(name="researcher", model=ScriptedModel(searching), tools=[search])
    async with AgentRuntime(store, [boss, failing]) as runtime:
        done = await runtime.session("lead", "s1").turn("go")

    first, second = done.text.split(" | ")
    assert first.startswith("ToolError: agent researcher failed:")
    assert "index is down" in first
    assert second == "ToolError: no agent named 'nobody' is mounted to delegate to"


async def test_two_delegations_of_one_batch_each_wait_on_their_child(store):
    ran: list[str] = []

    def script(request: Any) -> Any:
        done = results_of(request)
        if not done:
            return reply(
                "",
                call("research", {"task": "a"}, id="c1"),
                call("research", {"task": "b"}, id="c2"),
            )
        return reply(" ".join(str(m.result) for m in done))

    boss = Agent(
        name="lead",
        model=ScriptedModel(script),
        tools=[delegate_tool("researcher", name="research")],
    )
    async with AgentRuntime(store, [boss, researcher([approving_tool(ran)])]) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        pending = await session.pending()
        assert [(r.call_id, r.child.session_id if r.child else None) for r in pending] == [
            ("c1", "s1/c1"),
            ("c2", "s1/c2"),
        ]
        await session.resume(turn_id, pending[1].id, True, by="U1")
        assert [r.id for r in await session.pending()] == [pending[0].id]
        await session.resume(turn_id, pending[0].id, False, by="U1")
        done = await asyncio.wait_for(session.result(turn_id), WAIT)

    assert done == Completed(turn_id=turn_id, text="found kept found published")
    assert sorted(ran) == ["publish:False", "publish:True"]


async def test_a_childs_request_that_expires_lets_the_parent_run_on(store):
    @tool
    async def publish(ctx: ToolContext) -> str:
        """Publish once someone approves, within a moment."""
        approved = await ctx.request_input(
            id="publish", prompt="Publish?", schema={"type": "boolean"}, ttl=0.2
        )
        return "published" if approved else "not approved in time"

    async with AgentRuntime(store, [lead(), researcher([publish])]) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        runs_on = await ending(session, turn_id)
        done = await then_result(session, turn_id, runs_on)

    assert done == Completed(turn_id=turn_id, text="lead: found not approved in time")


async def test_a_childs_policy_request_is_granted_by_the_child_agents_own_hook(store):
    @tool
    async def deploy(ctx: ToolContext) -> str:
        """Deploy once the on-call approves."""
        approved = await ctx.request_input(
            id="deploy", prompt="Deploy?", answerers={"policy": "on-call", "scope": "prod"}
        )
        return "deployed" if approved else "held"

    granted_to: list[str | None] = []

    def on_call(check: AnswerCheck) -> bool:
        granted_to.append(check.by)
        return check.by == "U9"

    async with AgentRuntime(
        store, [lead(), researcher([deploy], authorize_answer=on_call)]
    ) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        [mirror] = await session.pending()

        # the lead has no hook of its own: the child agent's decides, for the child's turn
        with pytest.raises(ResumeAuthorizationError):
            await grant_answer(session, turn_id=turn_id, input_id=mirror.id, by="U1")
        grant = await grant_answer(session, turn_id=turn_id, input_id=mirror.id, by="U9")
        assert grant is not None
        assert (grant.turn_id, grant.input_id) == (f"{turn_id}/c1", "deploy")
        with pytest.raises(ResumeAuthorizationError):
            await session.resume(turn_id, mirror.id, True, by="U9")  # no grant, no answer
        await session.resume(turn_id, mirror.id, True, by="U9", granted=grant)
        done = await asyncio.wait_for(session.result(turn_id), WAIT)
        answer = await session.answer_of(turn_id, mirror.id)

    assert granted_to == ["U1", "U9"]
    assert done == Completed(turn_id=turn_id, text="lead: found deployed")
    # how the mirror was settled is how the child's request was
    assert answer is not None
    assert (answer.value, answer.by, answer.request.id) == (True, "U9", "deploy")


async def test_a_grandchilds_request_is_answered_from_the_top_and_every_level_runs_on(store):
    ran: list[str] = []

    def middle_script(request: Any) -> Any:
        done = results_of(request)
        if not done:
            return reply("", call("research", {"task": "go deeper"}, id="m1"))
        return reply(f"middle: {done[-1].result}")

    middle = Agent(
        name="middle",
        model=ScriptedModel(middle_script),
        tools=[delegate_tool("researcher", name="research")],
    )
    top = Agent(
        name="lead",
        model=ScriptedModel(lead_script),
        tools=[delegate_tool("middle", name="research")],
    )
    async with AgentRuntime(store, [top, middle, researcher([approving_tool(ran)])]) as runtime:
        session = runtime.session("lead", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        [mirror] = await session.pending()
        # the top's mirror stands for the middle's, which stands for the researcher's
        assert mirror.child is not None
        assert (mirror.child.agent, mirror.child.session_id) == ("middle", "s1/c1")
        [middle_mirror] = await runtime.session("middle", "s1/c1").pending()
        assert middle_mirror.child is not None
        assert (middle_mirror.child.agent, middle_mirror.child.session_id) == (
            "researcher",
            "s1/c1/m1",
        )
        assert middle_mirror.child.turn_id == f"{turn_id}/c1/m1"

        await session.resume(turn_id, mirror.id, True, by="U1")
        done = await asyncio.wait_for(session.result(turn_id), WAIT)
        answer = await session.answer_of(turn_id, mirror.id)

    assert done == Completed(turn_id=turn_id, text="lead: middle: found published")
    assert ran == ["publish:True"]
    assert answer is not None
    assert (answer.value, answer.by, answer.request.id) == (True, "U1", "publish")
