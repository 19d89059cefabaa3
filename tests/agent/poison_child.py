"""One process of the poison-turn test: its turn's tool kills the process it runs in.

Run by ``test_poison_turns.py`` as a child process::

    python poison_child.py DATABASE PHASE [ON_LOST]

``DATABASE`` is a SQLite file's path or a ``postgresql://`` URL. ``PHASE`` is
``start`` (admit the turn ``poison``, then wait for it), ``recover`` (enter a
fresh runtime, which resumes or holds the unfinished turn, then wait for it)
or ``serve`` (enter a fresh runtime, run one turn of the session, print
``SERVING`` and keep running, as a bot does, until killed). ``ON_LOST`` is the
agent's ``on_lost`` (``resume`` unless given). The turn's one
tool, ``explode``, SIGKILLs its own process, so a run of it never returns.
Once the turn ended, the process asks one more turn of the same session: when the
poison turn was held, so is its session, and that turn waits (a wait with a
timeout says so) until the process resumes the session; then it runs (the thread
is not stuck). It prints ``RESULT <json>`` and each event of the poison turn as
``EVENT <type>``.
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


class _PoisonEvents:
    """Keeps the poison turn's events."""

    def __init__(self, events: list[TurnEvent]) -> None:
        self._events = events

    def emit(self, event: TurnEvent) -> None:
        if event.turn_id == TURN_ID:
            self._events.append(event)


async def main(database: str, phase: str, on_lost: str) -> None:
    store = await open_child_store(database)
    agent = Agent(
        name="a",
        model=ScriptedModel(script),
        tools=[explode],
        on_lost="interrupt" if on_lost == "interrupt" else "resume",
    )
    events: list[TurnEvent] = []
    if phase == "serve":
        async with AgentRuntime(store, agent) as runtime:
            session = runtime.session("a", SESSION)
            await session.result(await session.start("hello"))  # the session is in memory
            print("SERVING", flush=True)
            await asyncio.Event().wait()
    # A sink, not an observer: it has every event from the runtime's start on, and the
    # start itself may hold the recovered turn (its worker runs while start() reads on)
    # before an observer subscribed after it could hear of it.
    async with AgentRuntime(store, agent, sink=_PoisonEvents(events)) as runtime:
        session = runtime.session("a", SESSION)
        if phase == "start":
            await session.start("go", turn_id=TURN_ID)
        result = await session.result(TURN_ID)
        held = await session.held()
        next_turn = await session.start("hello again")
        # held, it cannot end in any time; not held, it ends in far less than this
        waited = await session.wait(next_turn, timeout=0.3 if held is not None else 60)
        if held is not None:
            await session.resume_session()
        after = await session.result(next_turn)
    await store.close()
    for event in events:
        print(f"EVENT {event.type}", flush=True)
    outcome = {
        "status": result.status,
        "reason": getattr(result, "reason", None),
        "held": held,
        "waited": waited.status,
        "after": after.status,
    }
    print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "resume"))
