"""One process of the clean-stop test: a long turn, stopped by SIGTERM as a deploy stops it.

Run by ``test_poison_turns.py`` as a child process::

    python stop_child.py DATABASE MODE [start]

``DATABASE`` is a SQLite file's path or a ``postgresql://`` URL. The turn
``long`` calls one tool, ``work``, whose ``MODE`` says what it does: ``hang``
prints ``WAITING`` and waits until the process is stopped; ``kill`` prints
``EXPLODING`` and SIGKILLs its own process; ``finish`` returns. With ``start`` the
process admits the turn; without, it enters a fresh runtime, which resumes (or
holds) the unfinished turn. Like ``python -m bot serve``, SIGTERM sets a stop event
and the runtime closes cleanly (``STOPPED``, exit code 0); a turn that ends first
prints ``RESULT <status>``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from agent import (
    Agent,
    AgentRuntime,
    ModelReply,
    ModelRequest,
    ToolMessage,
    tool,
)
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_store import open_child_store

SESSION = "s-long"
TURN_ID = "long"
MODE = sys.argv[2] if len(sys.argv) > 2 else "finish"


@tool
async def work() -> str:
    """Work for as long as the mode says."""
    if MODE == "kill":
        print("EXPLODING", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if MODE == "hang":
        print("WAITING", flush=True)
        await asyncio.Event().wait()
    return "done"


def script(request: ModelRequest) -> ModelReply:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        return reply(f"the work ended: {last.result}")
    return reply("", call("work", id="c1"))


async def main(database: str, admit: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)  # as bot/serve.py does
    store = await open_child_store(database)
    agent = Agent(name="a", model=ScriptedModel(script), tools=[work])
    async with AgentRuntime(store, agent) as runtime:
        session = runtime.session("a", SESSION)
        if admit:
            await session.start("go", turn_id=TURN_ID)
        result = asyncio.ensure_future(session.result(TURN_ID))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait((result, stopping), return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        ended = result.result().status if result.done() else None
        result.cancel()
    await store.close()
    print(f"RESULT {ended}" if ended else "STOPPED", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[3:] == ["start"]))
