"""One process of the durable-cancel crash test: asks for a cancel, or recovers, durably.

Run by ``test_cancel_crash.py`` as a child process::

    python cancel_crash_child.py DATABASE LOG_PATH PHASE

``DATABASE`` is a SQLite file's path or a ``postgresql://`` URL. The turn
``TURN_ID``: the model replies with one batch of two async (remote) tools,
``first`` then ``second``; once both have results it replies with a final
text. In the phases that start the turn, ``first`` blocks for good on an event
nobody sets; in ``recover`` both tools return at once, so that a tool run
again there shows in the log instead of hanging the test.

``PHASE`` is one of:

* ``cancel-running``: start the turn, wait until ``first`` is entered (it
  prints ``IN_FIRST``), ``await session.cancel(TURN_ID)`` and, once it has
  returned (the request is on disk), print ``CANCEL_STORED <returned json>``;
  then keep running, ``first`` still blocked, until the parent SIGKILLs us;
* ``cancel-queued``: start the turn, wait until ``first`` is entered, admit a
  second turn ``QUEUED_ID`` (queued behind the blocked one), cancel *that* one,
  print ``CANCEL_STORED <returned json>`` and keep running until SIGKILLed;
* ``recover``: enter a fresh runtime (its start-up picks up the unfinished
  turn), wait for every turn of the session to end and print one
  ``RESULT <turn id> <json>`` line each.

Every event this process sees is printed as ``EVENT <turn id> <type> <call id or ->``.
Every model ask and every tool entry (and a tool abandoned mid-run) is appended
to ``LOG_PATH``, one fsynced line each with this process's pid, so the parent
can count them across a SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agent import (
    Agent,
    AgentRuntime,
    AgentSession,
    Cancelled,
    Completed,
    ModelReply,
    ModelRequest,
    ToolContext,
    ToolMessage,
    TurnEvent,
    TurnResult,
    tool,
)
from agent._json import JsonValue
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_log import append_line
from tests.agent.child_store import open_child_store

AGENT = "worker"
SESSION = "s-cancel-crash"
TURN_ID = "turn-cancel-crash-1"
QUEUED_ID = "turn-cancel-crash-2"
FIRST_CALL = "c-first"
SECOND_CALL = "c-second"
BATCH_TEXT = "I will run first, then second."
DONE_TEXT = "Both ran."
BLOCKING_PHASES = ("cancel-running", "cancel-queued")
PHASES = (*BLOCKING_PHASES, "recover")
LINGER_SECONDS = 120.0  # the parent kills us long before; this only bounds an orphan
WAIT_SECONDS = 20.0  # every other wait in this process is bounded, under the parent's deadline


class Child:
    """This process's log, and the tools and model that write to it."""

    def __init__(self, log_path: str, phase: str) -> None:
        self.log_path = log_path
        self.blocks = phase in BLOCKING_PHASES
        self.first_entered = asyncio.Event()
        self.never = asyncio.Event()  # nobody sets it: ``first`` waits on it for good

    def log(self, line: str) -> None:
        append_line(self.log_path, f"{line} pid={os.getpid()}")

    def script(self, request: ModelRequest) -> ModelReply:
        self.log(f"model turn={request.turn_id} step={request.step}")
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            return reply(DONE_TEXT)
        return reply(BATCH_TEXT, call("first", id=FIRST_CALL), call("second", id=SECOND_CALL))

    async def first(self, ctx: ToolContext) -> dict[str, JsonValue]:
        """Do the first thing (remote: at-least-once)."""
        self.log(f"entered tool=first call={ctx.call_id}")
        if self.blocks:
            print("IN_FIRST", flush=True)
            self.first_entered.set()
            try:
                await self.never.wait()
            except asyncio.CancelledError:
                # the engine let go of a running remote tool: the parent checks it never does
                self.log(f"abandoned tool=first call={ctx.call_id}")
                raise
        return {"done": "first"}

    async def second(self, ctx: ToolContext) -> dict[str, JsonValue]:
        """Do the second thing (remote: at-least-once)."""
        self.log(f"entered tool=second call={ctx.call_id}")
        return {"done": "second"}

    def agent(self) -> Agent:
        return Agent(
            name=AGENT,
            # the kill points stand between calls of a batch run one by one; batches
            # run concurrently are killed in test_parallel_crash.py
            max_parallel_calls=1,
            model=ScriptedModel(self.script),
            instructions="You do two things in a row when asked.",
            tools=[tool(self.first), tool(self.second)],
        )


def print_event(event: TurnEvent) -> None:
    call_id = getattr(event, "call_id", None) or "-"
    print(f"EVENT {event.turn_id} {event.type} {call_id}", flush=True)


def result_json(result: TurnResult) -> str:
    if isinstance(result, Cancelled):
        return json.dumps({"type": "Cancelled", "reason": result.reason})
    if isinstance(result, Completed):
        return json.dumps({"type": "Completed", "text": result.text})
    return json.dumps({"type": type(result).__name__})


async def main(database: str, log_path: str, phase: str) -> None:
    if phase not in PHASES:
        raise SystemExit(f"unknown phase {phase!r}")
    child = Child(log_path, phase)
    store = await open_child_store(database)
    try:
        runtime = AgentRuntime(store, child.agent())
        session = runtime.session(AGENT, SESSION)
        # subscribe before entering: entering the runtime is what resumes the turn
        await session.observe(print_event)
        async with runtime:
            if phase == "recover":
                await recover(session)
            else:
                await cancel_then_linger(child, session, phase)
    finally:
        await store.close()


async def cancel_then_linger(child: Child, session: AgentSession, phase: str) -> None:
    await session.start("Please do both things.", turn_id=TURN_ID)
    await asyncio.wait_for(child.first_entered.wait(), WAIT_SECONDS)
    target = TURN_ID
    if phase == "cancel-queued":
        target = await session.start("And then this.", turn_id=QUEUED_ID)
    was_unfinished = await session.cancel(target)
    # cancel() returned: the request (or, for the queued turn, its ending) is committed
    print(f"CANCEL_STORED {json.dumps(was_unfinished)}", flush=True)
    # the event loop keeps running, and ``first`` keeps blocking, until the SIGKILL
    await asyncio.sleep(LINGER_SECONDS)
    os._exit(3)  # never reached when the parent does its job


async def recover(session: AgentSession) -> None:
    for record in await session.turns():
        result = await asyncio.wait_for(session.result(record.turn_id), WAIT_SECONDS)
        print(f"RESULT {record.turn_id} {result_json(result)}", flush=True)


if __name__ == "__main__":
    db, log, phase_arg = sys.argv[1:4]
    asyncio.run(main(db, log, phase_arg))
