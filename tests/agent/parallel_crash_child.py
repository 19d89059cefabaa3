"""One process of the parallel-batch crash test: runs a batch of concurrent calls, or recovers it.

Run by ``test_parallel_crash.py`` as a child process::

    python parallel_crash_child.py DATABASE LOG_PATH PHASE

The turn ``TURN_ID`` asks for one batch of four calls: ``C1`` (remote, slow),
``C2`` (remote), ``C3`` (local: it writes a row through the step's transaction)
and ``C4`` (remote); then the model answers with their results in the order it
got them. ``PHASE`` is one of:

* ``settled``: ``C1`` blocks for good; once ``C2``, ``C3`` and ``C4`` have their
  results committed (they wait, unplaced, behind ``C1``) print ``SETTLED`` and
  wait for the SIGKILL;
* ``in_local``: ``C3`` prints ``IN_LOCAL`` from inside its transaction, with
  the remote calls running around it, and freezes there until the SIGKILL;
* ``recover``: enter a fresh runtime (its start-up resumes the turn), wait for it
  to end and print ``RESULT <json>``.

Every tool run is appended to ``LOG_PATH`` (fsynced) as ``run <call> <pid>``, so
the parent counts runs across the SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from agent import (
    Agent,
    AgentRuntime,
    Completed,
    ModelReply,
    ModelRequest,
    ToolContext,
    ToolMessage,
    TurnEvent,
    tool,
)
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_log import append_line
from tests.agent.child_store import open_child_store

AGENT = "parallel"
SESSION = "s-parallel-crash"
TURN_ID = "turn-parallel-crash"
CALLS = ("C1", "C2", "C3", "C4")
PHASES = ("settled", "in_local", "recover")
LINGER_SECONDS = 120.0  # the parent kills us long before; this only bounds an orphan
WAIT_SECONDS = 20.0


def final_text(results: list[object]) -> str:
    """The model's answer: the results in the order the request carried them."""
    return ",".join(str(r) for r in results)


class Child:
    def __init__(self, log_path: str, phase: str) -> None:
        self.log_path, self.phase = log_path, phase
        self.settled: set[str] = set()
        self.all_but_first = asyncio.Event()

    def ran(self, call_id: str) -> None:
        append_line(self.log_path, f"run {call_id} {os.getpid()}")

    def script(self, request: ModelRequest) -> ModelReply:
        results = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        if results:
            return reply(final_text(results))
        return reply(
            "Doing all four.",
            call("slow", id="C1"),
            call("fast", {"n": 2}, id="C2"),
            call("write", id="C3"),
            call("fast", {"n": 4}, id="C4"),
        )

    async def slow(self, ctx: ToolContext) -> str:
        """Take a long time (remote)."""
        self.ran(ctx.call_id)
        if self.phase == "settled":
            await asyncio.Event().wait()  # until the SIGKILL
        return "r1"

    async def fast(self, n: int, ctx: ToolContext) -> str:
        """Answer at once (remote)."""
        self.ran(ctx.call_id)
        await asyncio.sleep(0)
        return f"r{n}"

    def write(self, ctx: ToolContext) -> str:
        """Write a row (local: inside the step's transaction)."""
        self.ran(ctx.call_id)
        ctx.store.execute("create table if not exists parallel_rows (call_id text not null)")
        ctx.store.execute(f"insert into parallel_rows (call_id) values ('{ctx.call_id}')")
        if self.phase == "in_local":
            print("IN_LOCAL", flush=True)
            time.sleep(LINGER_SECONDS)  # the connection thread stops here, mid-transaction
        return "r3"

    def emit(self, event: TurnEvent) -> None:
        """Note each result that committed (a sink of the runtime)."""
        if event.type == "action.completed" and event.call_id != "C1":
            self.settled.add(event.call_id)
            if self.settled == set(CALLS[1:]):
                self.all_but_first.set()

    def agent(self) -> Agent:
        return Agent(
            name=AGENT,
            model=ScriptedModel(self.script),
            tools=[tool(self.slow), tool(self.fast), tool(self.write)],
        )


async def main(database: str, log_path: str, phase: str) -> None:
    if phase not in PHASES:
        raise SystemExit(f"unknown phase {phase!r}")
    child = Child(log_path, phase)
    store = await open_child_store(database)
    try:
        async with AgentRuntime(store, child.agent()) as runtime:
            runtime.add_sink(child)
            session = runtime.session(AGENT, SESSION)
            if phase == "recover":
                result = await asyncio.wait_for(session.result(TURN_ID), WAIT_SECONDS)
                text = result.text if isinstance(result, Completed) else None
                print(f"RESULT {json.dumps({'type': type(result).__name__, 'text': text})}")
                return
            await session.start("do all four", turn_id=TURN_ID)
            if phase == "settled":
                await asyncio.wait_for(child.all_but_first.wait(), WAIT_SECONDS)
                print("SETTLED", flush=True)
            await asyncio.sleep(LINGER_SECONDS)
            os._exit(3)  # never reached when the parent does its job
    finally:
        await store.close()


if __name__ == "__main__":
    db, log, phase_arg = sys.argv[1:4]
    asyncio.run(main(db, log, phase_arg))
