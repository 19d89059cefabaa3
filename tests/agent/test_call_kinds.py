"""Issue 22, point 6: a call's kind is recorded with the reply that made it, and a replay obeys it.

A tool may require a person's approval before each call (``requires_approval``);
the engine asks on the call's behalf, before a local call's transaction opens or
a remote call starts. Each call's kind (local, remote, asks, unknown) is
resolved once, when the reply that makes it commits, and kept in that step's
memo. A process that replays the turn reads the kind from there, so a call
recorded as asking is asked for even where the tool is now declared without
approval: it is never run unapproved.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path
from typing import Any

from agent import (
    Agent,
    AgentRuntime,
    Completed,
    InboundEvent,
    SQLiteStore,
    Suspended,
    ToolMessage,
    TurnInput,
    tool,
)
from agent.core.records import SessionKey
from agent.testing import ScriptedModel, call, reply
from tests.agent.fixtures.make_before_parallel import CRASHED, CRASHED_TURN, make_agent

BEFORE_PARALLEL = Path(__file__).resolve().parent / "fixtures" / "before_parallel.sqlite"

KEY = SessionKey("a", "s1")
WAIT = 10.0
SPEAKER = InboundEvent(source="slack", user="U1", attested=True)
OPENING = TurnInput(text="deploy it", user="U1", event=SPEAKER)


def script(*calls: Any) -> Any:
    def answer(request: Any) -> Any:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return reply("Deploying.", *calls)
        return reply("; ".join(f"{m.call_id}: {m.result}" for m in results))

    return answer


def deploy_tool(ran: list[str], *, local: bool, requires_approval: bool) -> Any:
    if local:

        def deploy(env: str) -> str:
            """Deploy to an environment (local)."""
            ran.append(env)
            return f"deployed {env}"

    else:

        async def deploy(env: str) -> str:  # type: ignore[misc]
            """Deploy to an environment (remote)."""
            ran.append(env)
            return f"deployed {env}"

    return tool(requires_approval=requires_approval)(deploy)


def agent_with(*tools: Any, calls: Any, **fields: Any) -> Agent:
    return Agent(name="a", model=ScriptedModel(script(*calls)), tools=list(tools), **fields)


async def test_a_call_that_requires_approval_waits_for_a_yes_and_then_runs_once(store):
    ran: list[str] = []
    deploy = deploy_tool(ran, local=True, requires_approval=True)
    agent = agent_with(deploy, calls=[call("deploy", {"env": "prod"}, id="c1")])
    async with AgentRuntime(store, agent) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start(OPENING)
        parked = await session.result(turn_id)
        assert isinstance(parked, Suspended)
        assert ran == []  # nothing runs before the answer
        request = parked.request
        assert (request.id, request.call_id, request.tool) == ("approve:c1", "c1", "deploy")
        assert request.prompt == 'Allow deploy to run with {"env":"prod"}?'
        assert request.schema == {"type": "boolean"}
        assert request.answerers is not None
        assert request.answerers.user == "U1"

        await session.resume(turn_id, "approve:c1", True, by="U1")
        done = await session.result(turn_id)

    assert done == Completed(turn_id=turn_id, text="c1: deployed prod")
    assert ran == ["prod"]
    steps = await store.load_steps(KEY, turn_id)
    assert steps["model:1"]["kinds"] == {"c1": "asks"}


async def test_a_declined_call_does_not_run_and_the_model_is_told(store):
    ran: list[str] = []
    deploy = deploy_tool(ran, local=False, requires_approval=True)
    agent = agent_with(deploy, calls=[call("deploy", {"env": "prod"}, id="c1")])
    async with AgentRuntime(store, agent) as runtime:
        session = runtime.session("a", "s1")
        turn_id = await session.start(OPENING)
        assert isinstance(await session.result(turn_id), Suspended)
        await session.resume(turn_id, "approve:c1", False, by="U1")
        done = await session.result(turn_id)

    assert ran == []
    [result] = [m for m in (await store.load(KEY)).transcript if isinstance(m, ToolMessage)]
    assert result.is_error
    assert result.result == {"denied": True, "error": "not run: U1 declined this call"}
    assert isinstance(done, Completed)


async def test_a_call_recorded_as_asking_is_asked_for_where_the_tool_no_longer_requires_it(store):
    ran: list[str] = []
    held = asyncio.Event()

    @tool
    async def warm_up() -> str:
        """Warm the caches first (remote)."""
        held.set()
        await asyncio.Event().wait()  # until the runtime closes under it
        return "warm"

    calls = [call("warm_up", id="c0"), call("deploy", {"env": "prod"}, id="c1")]
    gated = deploy_tool(ran, local=False, requires_approval=True)
    # the first process records the reply, with c1 as asking, and stops in c0
    first = agent_with(warm_up, gated, calls=calls, max_parallel_calls=1)
    async with AgentRuntime(store, first) as runtime:
        await runtime.session("a", "s1").start(OPENING, turn_id="t1")
        await asyncio.wait_for(held.wait(), WAIT)
    assert (await store.load_steps(KEY, "t1"))["model:1"]["kinds"] == {"c0": "remote", "c1": "asks"}

    @tool(name="warm_up")
    async def warm_up_now() -> str:
        """Warm the caches first (remote)."""
        return "warm"

    # the next process declares deploy as a plain local tool, with no approval at all
    ungated = deploy_tool(ran, local=True, requires_approval=False)
    second = agent_with(warm_up_now, ungated, calls=calls)
    async with AgentRuntime(store, second) as runtime:
        session = runtime.session("a", "s1")
        parked = await asyncio.wait_for(session.result("t1"), WAIT)
        assert isinstance(parked, Suspended)
        assert parked.request.id == "approve:c1"
        assert ran == []  # the recorded kind, not this process's declaration, decided
        await session.resume("t1", "approve:c1", True, by="U1")
        done = await session.result("t1")

    assert done == Completed(turn_id="t1", text="c0: warm; c1: deployed prod")
    assert ran == ["prod"]


async def test_a_call_of_a_tool_this_process_does_not_declare_is_not_run(store):
    held = asyncio.Event()

    @tool
    async def warm_up() -> str:
        """Warm the caches first (remote)."""
        held.set()
        await asyncio.Event().wait()
        return "warm"

    ran: list[str] = []
    calls = [call("warm_up", id="c0"), call("deploy", {"env": "prod"}, id="c1")]
    first = agent_with(
        warm_up,
        deploy_tool(ran, local=False, requires_approval=False),
        calls=calls,
        max_parallel_calls=1,
    )
    async with AgentRuntime(store, first) as runtime:
        await runtime.session("a", "s1").start(OPENING, turn_id="t1")
        await asyncio.wait_for(held.wait(), WAIT)

    @tool(name="warm_up")
    async def warm_up_now() -> str:
        """Warm the caches first (remote)."""
        return "warm"

    async with AgentRuntime(store, agent_with(warm_up_now, calls=calls)) as runtime:
        done = await asyncio.wait_for(runtime.session("a", "s1").result("t1"), WAIT)

    assert ran == []
    assert done == Completed(
        turn_id="t1", text="c0: warm; c1: {'error': 'ToolError: unknown tool: deploy'}"
    )


async def test_a_reply_recorded_before_kinds_were_kept_consults_the_tools_as_declared(tmp_path):
    # the fixture's reply was committed before kinds were recorded: its memo has none
    path = tmp_path / "before_parallel.sqlite"
    shutil.copyfile(BEFORE_PARALLEL, path)
    ran: list[str] = []
    old = make_agent(ran)
    [lookup] = old.tools
    gated = dataclasses.replace(lookup, requires_approval=True)
    agent = Agent(name=old.name, model=old.model, instructions=old.instructions, tools=[gated])
    store = await SQLiteStore.open(str(path))
    try:
        assert "kinds" not in (await store.load_steps(CRASHED, CRASHED_TURN))["model:1"]
        async with AgentRuntime(store, agent) as runtime:
            parked = await asyncio.wait_for(
                runtime.session(old.name, CRASHED.session_id).result(CRASHED_TURN), WAIT
            )
    finally:
        await store.close()

    # the owed call is asked for, as the tool is declared now, and does not run meanwhile
    assert isinstance(parked, Suspended)
    assert (parked.request.id, parked.request.tool) == ("approve:c2", "lookup")
    assert ran == []
