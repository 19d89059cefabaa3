"""One process of a Claude crash test: runs (or recovers) a turn against a fake Messages API.

Run by ``test_claude_crash.py`` as a child process::

    python claude_crash_child.py DATABASE BASE_URL TOOL_LOG PHASE

``DATABASE`` is where the turn lives: a SQLite file's path or a
``postgresql://`` URL; ``BASE_URL`` is where the parent's `FakeAnthropic`
listens (the real ``AnthropicModel`` and the real SDK talk to it over HTTP);
``TOOL_LOG`` is the file the local tool appends to.
``PHASE`` is ``start`` (admit the turn, then wait for it) or ``recover`` (enter
a fresh runtime, which resumes the unfinished turn, then wait for it).

What the process prints on stdout, one line each, flushed at once:

* ``DELTA <attempt> <json text>`` for every live text delta of a reply, as the
  engine emits it: the parent waits for these to know the reply is being
  streamed into this process before it SIGKILLs it;
* ``EVENT <type>`` for every other event of the turn (for diagnosis only);
* ``RESULT <json>`` once the turn has ended: ``{"type": ..., "text": ...}``.

Every run of the local tool appends one line to ``TOOL_LOG`` (flushed and
fsynced), so the parent can count runs even across a SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agent import (
    Agent,
    AgentRuntime,
    AnthropicModel,
    AnthropicSettings,
    RetryPolicy,
    Tool,
    TurnEvent,
    tool,
)
from tests.agent.child_log import append_line
from tests.agent.child_store import open_child_store

AGENT = "claude-crash"
SESSION = "s-claude-crash"
TURN_ID = "turn-claude-crash-1"
API_KEY = "test-key"  # what FakeAnthropic accepts; never a real key
QUESTION = "Note that the deploy moved, then tell me when it is."
TOOL_NAME = "record_run"
FINAL_TEXT = "The deploy moved to Friday at noon; I noted it in the run log."

# The first process must still be blocked on the stream when the parent kills it,
# however slow the machine: the parent's own deadlines are far shorter than these.
STALL_SECONDS = 120.0


def record_run_tool(log_path: str) -> Tool:
    """The local tool: a ``def``, so it runs inside the step's transaction."""

    def record_run(note: str) -> dict[str, str]:
        """Write a note to the run log."""
        append_line(log_path, f"{note} pid={os.getpid()}")
        return {"noted": note}

    return tool(record_run)


def show(event: TurnEvent) -> None:
    if event.type == "message.delta":
        print(f"DELTA {event.attempt} {json.dumps(event.text)}", flush=True)
    else:
        print(f"EVENT {event.type}", flush=True)


async def main(database: str, base_url: str, tool_log: str, phase: str) -> None:
    if phase not in ("start", "recover"):
        raise SystemExit(f"unknown phase {phase!r}")
    model = AnthropicModel(
        AnthropicSettings(
            api_key=API_KEY,
            base_url=base_url,
            # no retries of any kind inside one process: every request the fake
            # saw is one deliberate ask of the step, so counting them is exact
            max_retries=0,
            # thinking on: a tool loop's thinking must come back, signed, after a restart
            thinking=True,
            read_timeout=STALL_SECONDS,
            step_timeout=STALL_SECONDS,
        )
    )
    agent = Agent(
        name=AGENT,
        model=model,
        instructions="You keep a run log.",
        tools=[record_run_tool(tool_log)],
        model_retry=RetryPolicy(attempts=1),
    )
    store = await open_child_store(database)
    try:
        runtime = AgentRuntime(store, agent)
        session = runtime.session(AGENT, SESSION)
        # subscribe before entering: entering the runtime is what resumes the turn
        await session.observe(show)
        async with runtime:
            if phase == "start":
                await session.start(QUESTION, turn_id=TURN_ID)
            result = await session.result(TURN_ID)
    finally:
        await store.close()
        await model.aclose()
    text = getattr(result, "text", None)
    print("RESULT " + json.dumps({"type": type(result).__name__, "text": text}), flush=True)


if __name__ == "__main__":
    db, url, log, phase_arg = sys.argv[1:5]
    asyncio.run(main(db, url, log, phase_arg))
