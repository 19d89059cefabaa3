"""One process of the delegation crash test: a turn that delegates, killed in its child.

Run by ``test_delegation_crash.py`` as a child process::

    python delegation_crash_child.py DATABASE LOG_PATH PHASE

The ``lead`` agent's turn ``TURN_ID`` delegates its task to the ``researcher``
agent (a child turn). The researcher first writes a row (``W``, a local call:
inside its step's transaction), then calls ``slow`` (``S``, remote), then
answers. ``PHASE`` is one of:

* ``child_tool``: ``S`` prints ``IN_CHILD_TOOL`` and waits for the SIGKILL;
* ``child_model``: the researcher's model, asked after ``W`` committed, prints
  ``IN_CHILD_MODEL`` mid-stream and waits for the SIGKILL;
* ``recover``: enter a fresh runtime (its start-up resumes both turns), wait
  for the lead's turn to end and print ``RESULT <json>``.

Every tool run and model call is appended to ``LOG_PATH`` (fsynced) as
``run <call> <pid>`` or ``model <agent> <step> <pid>``, so the parent counts
them across the SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agent import (
    Agent,
    AgentRuntime,
    Completed,
    ModelReply,
    ModelRequest,
    ToolContext,
    ToolMessage,
    delegate_tool,
    tool,
)
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_log import append_line
from tests.agent.child_store import open_child_store

SESSION = "s-delegation-crash"
TURN_ID = "turn-delegation-crash"
CHILD_SESSION = f"{SESSION}/L1"
CHILD_TURN = f"{TURN_ID}/L1"
PHASES = ("child_tool", "child_model", "recover")
LINGER_SECONDS = 120.0  # the parent kills us long before; this only bounds an orphan
WAIT_SECONDS = 20.0


class Child:
    def __init__(self, log_path: str, phase: str) -> None:
        self.log_path, self.phase = log_path, phase

    def log(self, line: str) -> None:
        append_line(self.log_path, f"{line} {os.getpid()}")

    async def lead_script(self, request: ModelRequest) -> ModelReply:
        self.log(f"model lead {request.step}")
        results = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        if results:
            return reply(f"lead: {results[-1]}")
        return reply("Asking.", call("research", {"task": "dig"}, id="L1"))

    async def researcher_script(self, request: ModelRequest) -> ModelReply:
        self.log(f"model researcher {request.step}")
        results = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return reply("", call("write", id="W"))
        if len(results) == 1:
            if self.phase == "child_model":
                print("IN_CHILD_MODEL", flush=True)
                await asyncio.sleep(LINGER_SECONDS)  # until the SIGKILL
            return reply("", call("slow", id="S"))
        return reply(f"found {'+'.join(str(r) for r in results)}")

    def write(self, ctx: ToolContext) -> str:
        """Write a row (local: inside the step's transaction)."""
        self.log(f"run {ctx.call_id}")
        ctx.store.execute("create table if not exists child_rows (call_id text not null)")
        ctx.store.execute(f"insert into child_rows (call_id) values ('{ctx.call_id}')")
        return "wrote"

    async def slow(self, ctx: ToolContext) -> str:
        """Take a long time (remote)."""
        self.log(f"run {ctx.call_id}")
        if self.phase == "child_tool":
            print("IN_CHILD_TOOL", flush=True)
            await asyncio.Event().wait()  # until the SIGKILL
        return "dug"

    def agents(self) -> list[Agent]:
        lead = Agent(
            name="lead",
            model=ScriptedModel(self.lead_script),
            tools=[delegate_tool("researcher", name="research")],
        )
        researcher = Agent(
            name="researcher",
            model=ScriptedModel(self.researcher_script),
            tools=[tool(self.write), tool(self.slow)],
        )
        return [lead, researcher]


async def main(database: str, log_path: str, phase: str) -> None:
    if phase not in PHASES:
        raise SystemExit(f"unknown phase {phase!r}")
    child = Child(log_path, phase)
    store = await open_child_store(database)
    try:
        async with AgentRuntime(store, child.agents()) as runtime:
            session = runtime.session("lead", SESSION)
            if phase == "recover":
                result = await asyncio.wait_for(session.result(TURN_ID), WAIT_SECONDS)
                text = result.text if isinstance(result, Completed) else None
                print(f"RESULT {json.dumps({'type': type(result).__name__, 'text': text})}")
                return
            await session.start("find it", turn_id=TURN_ID)
            await asyncio.sleep(LINGER_SECONDS)
            os._exit(3)  # never reached when the parent does its job
    finally:
        await store.close()


if __name__ == "__main__":
    db, log, phase_arg = sys.argv[1:4]
    asyncio.run(main(db, log, phase_arg))
