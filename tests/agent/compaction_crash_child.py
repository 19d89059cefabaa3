"""One process of the compaction crash test: compacts a session, or recovers it.

Run by ``test_compaction_crash.py`` as a child process::

    python compaction_crash_child.py DATABASE PHASE

The agent keeps 2 turns and compacts 3 at a time; the session takes turns
``t1`` to ``t5``, whose end plans a compaction of ``t1`` to ``t3``. ``PHASE``:

* ``summarising``: the model, asked for the summary, prints ``SUMMARISING`` and
  blocks for good, until the parent's SIGKILL;
* ``committed``: once the compaction's commit returns, the process prints
  ``COMPACTED`` and SIGKILLs itself;
* ``recover``: a fresh runtime takes turn ``t6``, waits for any compaction its end
  plans, and prints ``RESULT <json>``: the live and archived turns, the summary,
  and how the request of ``t6`` began.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from agent import Agent, AgentRuntime, Compacting, ModelRequest
from agent.core.records import Commit, SessionKey
from agent.testing import ScriptedModel, reply
from tests.agent.child_store import open_child_store

AGENT = "keeper"
SESSION = "s-compaction-crash"
KEY = SessionKey(AGENT, SESSION)
PHASES = ("summarising", "committed", "recover")
LINGER_SECONDS = 120.0
WAIT_SECONDS = 20.0


async def main(database: str, phase: str) -> None:
    if phase not in PHASES:
        raise SystemExit(f"unknown phase {phase!r}")
    first_of: dict[str, str] = {}
    summaries = 0
    summarised = asyncio.Event()

    async def script(request: ModelRequest) -> Any:
        nonlocal summaries
        if request.step == "summary":
            if phase == "summarising":
                print("SUMMARISING", flush=True)
                await asyncio.Event().wait()
            summaries += 1
            return reply(f"S{summaries} by pid {os.getpid()}")
        first_of.setdefault(request.turn_id, request.messages[0].text)
        return reply(f"answer to {request.messages[-1].text}")

    store = await open_child_store(database)
    committing = store.commit

    async def commit(key: SessionKey, commit: Commit) -> None:
        await committing(key, commit)
        if commit.compact is not None:
            if phase == "committed":
                print("COMPACTED", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            summarised.set()

    store.commit = commit  # type: ignore[method-assign]
    agent = Agent(
        name=AGENT, model=ScriptedModel(script), compacting=Compacting(keep_turns=2, every=3)
    )
    try:
        async with AgentRuntime(store, agent) as runtime:
            session = runtime.session(AGENT, SESSION)
            if phase != "recover":
                for n in range(1, 6):
                    await session.turn(f"count {n}", turn_id=f"t{n}")
                await asyncio.sleep(LINGER_SECONDS)
                os._exit(3)  # never reached when the test does its job
            await session.turn("count 6", turn_id="t6")
            if (await store.load(KEY)).transcript.base == 0:
                await asyncio.wait_for(summarised.wait(), WAIT_SECONDS)
            state = await store.load(KEY)
            archive = await session.archived(0)
            outcome = {
                "live": sorted(state.turns),
                "archived": sorted(archive.turns) if archive else [],
                "summary": state.summary,
                "t6_began_with": first_of["t6"],
            }
            print(f"RESULT {json.dumps(outcome)}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    db, phase_arg = sys.argv[1:3]
    asyncio.run(main(db, phase_arg))
