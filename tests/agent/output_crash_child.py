"""One process of the result crash test: gives a turn's result, or recovers it.

Run by ``test_output_crash.py`` as a child process::

    python output_crash_child.py DATABASE LOG_PATH PHASE

The turn ``TURN_ID`` asks for a forecast. The model first answers in words
without the result (``ANSWER``); asked again by the engine's prompt, it calls
``final_result`` with ``FORECAST``. ``PHASE`` is one of:

* ``prompted``: the model, asked again after the prompt, prints ``ASKED_AGAIN`` and
  blocks for good, until the parent's SIGKILL;
* ``resulted``: once the result's tool message is committed, the process prints
  ``RESULT_STORED`` and SIGKILLs itself, before the turn is marked completed;
* ``recover``: enter a fresh runtime (its start-up resumes the turn), wait for it
  to end and print ``RESULT <json>``.

Each model ask is appended to ``LOG_PATH`` (fsynced) as ``model after=<what>``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from pydantic import BaseModel

from agent import (
    OUTPUT_TOOL,
    Agent,
    AgentRuntime,
    Completed,
    ModelRequest,
    ToolMessage,
    TriggerMessage,
)
from agent.core.records import Commit, SessionKey
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_log import append_line
from tests.agent.child_store import open_child_store

AGENT = "forecaster"
SESSION = "s-output-crash"
TURN_ID = "turn-output-crash"
ANSWER = "Sunny in Oslo, 21 degrees."
FORECAST = {"city": "Oslo", "high_c": 21.0, "rain": False}
PHASES = ("prompted", "resulted", "recover")
LINGER_SECONDS = 120.0
WAIT_SECONDS = 20.0


class Forecast(BaseModel):
    """Tomorrow's weather in one city."""

    city: str
    high_c: float
    rain: bool


def script_for(log_path: str, phase: str) -> Any:
    async def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        after = "prompt" if isinstance(last, TriggerMessage) else type(last).__name__
        append_line(log_path, f"model after={after}")
        if isinstance(last, TriggerMessage):
            if phase == "prompted":
                print("ASKED_AGAIN", flush=True)
                await asyncio.Event().wait()
            return reply("", call(OUTPUT_TOOL, FORECAST, id="R1"))
        return reply(ANSWER)

    return script


async def main(database: str, log_path: str, phase: str) -> None:
    if phase not in PHASES:
        raise SystemExit(f"unknown phase {phase!r}")
    store = await open_child_store(database)
    if phase == "resulted":
        committing = store.commit

        async def commit_then_die(key: SessionKey, commit: Commit) -> None:
            await committing(key, commit)
            if any(
                isinstance(m.message, ToolMessage) and m.message.name == OUTPUT_TOOL
                for m in commit.messages
            ):
                print("RESULT_STORED", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

        store.commit = commit_then_die  # type: ignore[method-assign]
    agent = Agent(
        name=AGENT, model=ScriptedModel(script_for(log_path, phase)), output_type=Forecast
    )
    try:
        async with AgentRuntime(store, agent) as runtime:
            session = runtime.session(AGENT, SESSION)
            if phase == "recover":
                result = await asyncio.wait_for(session.result(TURN_ID), WAIT_SECONDS)
                outcome: dict[str, Any] = {"type": type(result).__name__}
                if isinstance(result, Completed):
                    outcome |= {"text": result.text, "output": result.output}
                print(f"RESULT {json.dumps(outcome)}")
                return
            await session.start("tomorrow in Oslo?", turn_id=TURN_ID)
            await asyncio.sleep(LINGER_SECONDS)
            os._exit(3)  # never reached when the test does its job
    finally:
        await store.close()


if __name__ == "__main__":
    db, log, phase_arg = sys.argv[1:4]
    asyncio.run(main(db, log, phase_arg))
