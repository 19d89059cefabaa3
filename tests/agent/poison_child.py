"""One process of the poison-turn test: its turn's tool kills the process it runs in.

Run by ``test_poison_turns.py`` as a child process::

    python poison_child.py DATABASE PHASE

``DATABASE`` is a SQLite file's path or a ``postgresql://`` URL. ``PHASE`` is
``start`` (admit the turn ``poison``, then wait for it), ``recover`` (enter a
fresh runtime, which resumes or holds the unfinished turn, then wait for it)
or ``serve`` (enter a fresh runtime, run one turn of the session, print
``SERVING`` and keep running, as a bot does, until killed). The turn's one
tool, ``explode``, SIGKILLs its own process, so a run of it never returns.
Once the turn ended, the process asks one more turn of the same session (the
thread is not stuck) and prints ``RESULT <json>`` and each event of the poison
turn as ``EVENT <type>``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from agent import (
    Agent,
    AgentRuntime,
    ModelReply,
    ModelRequest,
    ToolMessage,
    TurnEvent,
    tool,
)
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_store import open_child_store

SESSION = "s-poison"
TURN_ID = "poison"


@tool
async def explode() -> str:
    """Kill the process this runs in."""
    print("EXPLODING", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(60)
    return "never"


def script(request: ModelRequest) -> ModelReply:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        return reply(f"the call ended: {last.result}")
    if request.turn_id.startswith(TURN_ID):  # the held turn, or its retry
        return reply("", call("explode", id="c1"))
    return reply("still here")


async def main(database: str, phase: str) -> None:
    store = await open_child_store(database)
    agent = Agent(name="a", model=ScriptedModel(script), tools=[explode])
    events: list[TurnEvent] = []
    if phase == "serve":
        async with AgentRuntime(store, agent) as runtime:
            session = runtime.session("a", SESSION)
            await session.result(await session.start("hello"))  # the session is in memory
            print("SERVING", flush=True)
            await asyncio.Event().wait()
    async with AgentRuntime(store, agent) as runtime:
        session = runtime.session("a", SESSION)
        await session.observe(events.append, turn_id=TURN_ID)
        if phase == "start":
            await session.start("go", turn_id=TURN_ID)
        result = await session.result(TURN_ID)
        after = await session.result(await session.start("hello again"))
    await store.close()
    for event in events:
        print(f"EVENT {event.type}", flush=True)
    print("RESULT " + json.dumps({"status": result.status, "after": after.status}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
