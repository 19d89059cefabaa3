"""One process of the steering crash test: steers a running turn, or recovers it.

Run by ``test_steering_crash.py`` as a child process::

    python steer_crash_child.py DATABASE LOG_PATH PHASE

The turn ``TURN_ID`` opens with "look"; the model calls the remote tool
``look`` (call ``C1``), and answers a steer placed after the result with
``STEERED_TEXT``. ``PHASE`` is one of:

* ``stored``: start the turn, wait until ``look`` is entered, steer it (``STEER``,
  id ``STEER_ID``) and print ``STEERED`` once `steer` returned (its memo is on
  disk); ``look`` blocks for good, so the steer is never placed, until SIGKILL;
* ``placed``: as ``stored``, but ``look`` returns once the steer is taken, the
  steer is placed, and the model, asked with it, prints ``ASKED_WITH_STEER`` and
  blocks for good until SIGKILL;
* ``recover``: enter a fresh runtime (its start-up resumes the turn), wait for it
  to end and print ``RESULT <json>``.

Each model ask is appended to ``LOG_PATH`` (fsynced, with this process's pid) as
``model steered=<yes|no>``, so the parent can count them across the SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from agent import (
    Agent,
    AgentRuntime,
    Completed,
    ModelRequest,
    ToolContext,
    ToolMessage,
    UserMessage,
    tool,
)
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_log import append_line
from tests.agent.child_store import open_child_store

AGENT = "worker"
SESSION = "s-steer-crash"
TURN_ID = "turn-steer-crash"
STEER = "and check the weather"
STEER_ID = "steer-1"
STEERED_TEXT = f"about {STEER!r}: noted"
PHASES = ("stored", "placed", "recover")
LINGER_SECONDS = 120.0  # the parent kills us long before; this only bounds an orphan
WAIT_SECONDS = 20.0


class Child:
    def __init__(self, log_path: str, phase: str) -> None:
        self.log_path, self.phase = log_path, phase
        self.in_tool = asyncio.Event()
        self.tool_may_finish = asyncio.Event()
        if phase == "recover":
            self.tool_may_finish.set()

    async def script(self, request: ModelRequest) -> Any:
        last = request.messages[-1]
        steered = isinstance(last, UserMessage) and bool(last.steer)
        append_line(self.log_path, f"model steered={'yes' if steered else 'no'} pid={os.getpid()}")
        if steered:
            if self.phase == "placed":
                print("ASKED_WITH_STEER", flush=True)
                await asyncio.Event().wait()
            return reply(STEERED_TEXT)
        if isinstance(last, ToolMessage):
            return reply(f"after {last.result}")
        return reply("Looking.", call("look", id="C1"))

    async def look(self, ctx: ToolContext) -> str:
        """Look around (remote: at least once)."""
        self.in_tool.set()
        await self.tool_may_finish.wait()
        return "looked"

    def agent(self) -> Agent:
        return Agent(name=AGENT, model=ScriptedModel(self.script), tools=[tool(self.look)])


async def main(database: str, log_path: str, phase: str) -> None:
    if phase not in PHASES:
        raise SystemExit(f"unknown phase {phase!r}")
    child = Child(log_path, phase)
    store = await open_child_store(database)
    try:
        async with AgentRuntime(store, child.agent()) as runtime:
            session = runtime.session(AGENT, SESSION)
            if phase == "recover":
                result = await asyncio.wait_for(session.result(TURN_ID), WAIT_SECONDS)
                text = result.text if isinstance(result, Completed) else None
                print(f"RESULT {json.dumps({'type': type(result).__name__, 'text': text})}")
                return
            await session.start("look", turn_id=TURN_ID)
            await asyncio.wait_for(child.in_tool.wait(), WAIT_SECONDS)
            await session.steer(STEER, steer_id=STEER_ID, by="U2")
            print("STEERED", flush=True)
            if phase == "placed":
                child.tool_may_finish.set()
            await asyncio.sleep(LINGER_SECONDS)
            os._exit(3)  # never reached when the parent does its job
    finally:
        await store.close()


if __name__ == "__main__":
    db, log, phase_arg = sys.argv[1:4]
    asyncio.run(main(db, log, phase_arg))
