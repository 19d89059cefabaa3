"""One replica of `bench.postgres_bench`: a runtime on its own store, running turns on command.

The bench starts it as a child process::

    python -m bench.step_worker STORE [--pool-size N]

where STORE is a SQLite file or a ``postgresql://`` URL whose ``bench_notes``
table the bench has made (`NOTES_TABLE`). It opens the store (SQLite: WAL,
``synchronous=FULL``; PostgreSQL: `PostgresStore` with a pool of N connections)
and one `AgentRuntime` on it, checks the shape of one turn, prints
``{"ready": ...}`` as one JSON line on stdout and then reads one JSON command per
line on stdin:

``{"op": "run", "tag": T, "sessions": n, "start": t, "ramp": r, "duration": d}``
    From ``time.monotonic()`` = t (the clock is the machine's, so every replica
    starts together) n sessions run scripted turns back to back, each turn in a
    fresh session named after T. Steps that end in the window [t + r, t + r + d)
    are counted and timed; no turn starts after the window, and the answer (one
    JSON line, `CellRun`) comes once the last one has finished.
``{"op": "quit"}``
    Close the runtime and the store, and exit.

The turn: `TOOL_CALLS` tool calls, one per model reply, alternating a remote
tool (``async def lookup``: awaited, then its result committed, at least once)
and a local one (``def note``: an INSERT into ``bench_notes`` through
``ctx.store``, in the step's own transaction, exactly once). Each reply carries
about 1 KB of text, streamed in 256-character deltas. A step is timed from the
engine's events: from ``turn.started`` (the turn's opening has committed) or the
previous step's event to this step's ``message.completed`` (its reply has
committed) or ``action.completed`` (its tool result has committed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from agent import (
    Agent,
    AgentError,
    AgentRuntime,
    InboxWakeups,
    ModelReply,
    ModelRequest,
    SessionStore,
    SQLiteStore,
    ToolContext,
    TurnEvent,
    is_terminal,
    tool,
)
from agent.testing import ScriptedModel, call, reply
from bench.turn_bench import _ROWS, AGENT, DELTA_CHUNK, PROMPT, REPLY_TEXT, _prose
from bench.turn_bench import _replies_this_turn as replies_this_turn

if TYPE_CHECKING:
    from agent import PostgresStore

TOOL_CALLS = 4
"""Per turn, alternating ``lookup`` (remote) and ``note`` (local, through ``ctx.store``)."""
NOTE_CALLS = TOOL_CALLS // 2
STEPS_PER_TURN = 2 * TOOL_CALLS + 1
"""Checkpointed steps per turn: a model step before each call, the final one, the tool steps."""
NOTES_TABLE = (
    "CREATE TABLE IF NOT EXISTS bench_notes (session_id TEXT NOT NULL, call_id TEXT NOT NULL,"
    " body TEXT NOT NULL, PRIMARY KEY (session_id, call_id))"
)
"""What the local tool writes to: the same statement on SQLite and PostgreSQL."""
NOTE_BODY = _prose(200, seed=11)
_STEP_EVENTS = frozenset({"message.completed", "action.completed"})


@tool
async def lookup(page: int) -> dict[str, Any]:
    """Look up one page of the service inventory (about 1 KB of JSON)."""
    return {"page": page, "rows": _ROWS}


@tool
def note(page: int, ctx: ToolContext) -> dict[str, Any]:
    """Note that a page was read, in the store, inside this step's transaction."""
    mark = "?" if ctx.store.paramstyle == "qmark" else "%s"
    ctx.store.execute(
        f"INSERT INTO bench_notes (session_id, call_id, body) VALUES ({mark}, {mark}, {mark})",
        [ctx.session_id, ctx.call_id, NOTE_BODY],
    )
    return {"page": page, "noted": True}


def script(request: ModelRequest) -> ModelReply:
    """Call ``lookup`` and ``note`` in turn, `TOOL_CALLS` times, then finish."""
    done = replies_this_turn(request)
    if done < TOOL_CALLS:
        name = "lookup" if done % 2 == 0 else "note"
        return reply(REPLY_TEXT, call(name, {"page": done}, id=f"call_{done}"))
    return reply(REPLY_TEXT)


def make_agent() -> Agent:
    """The benchmark agent, on a scripted model (no network)."""
    model = ScriptedModel(script, chunk=DELTA_CHUNK)  # its request log keeps the last 10,000
    return Agent(name=AGENT, model=model, instructions="Check the fleet.", tools=[lookup, note])


# -- timing steps from the engine's events ---------------------------------------


@dataclass
class CellRun:
    """What one replica measured in one cell (sent to the bench as one JSON line)."""

    steps: int = 0
    """Steps that ended in the window."""
    turns: int = 0
    """Turns that completed in the window."""
    latencies: list[float] = field(default_factory=list)
    """Seconds, one per step that ended in the window."""
    turns_run: int = 0
    """Turns that completed at all, ramp and drain included."""
    cpu: float = 0.0
    """This process's CPU seconds in the window."""
    failures: list[str] = field(default_factory=list)


class StepClock:
    """An event sink that times each checkpointed step, and counts those that end in a window."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._opens = math.inf
        self._closes = -math.inf
        self.run = CellRun()

    def watch(self, opens: float, closes: float) -> CellRun:
        """Count from now on into a fresh `CellRun`, for the window [opens, closes)."""
        self._opens, self._closes = opens, closes
        self.run = CellRun()
        return self.run

    def emit(self, event: TurnEvent) -> None:
        """Note the time of a step's event (or of a turn's start or end)."""
        if event.type in _STEP_EVENTS:
            now = time.monotonic()
            before = self._last.get(event.turn_id)
            self._last[event.turn_id] = now
            if before is not None and self._opens <= now < self._closes:
                self.run.steps += 1
                self.run.latencies.append(now - before)
        elif event.type == "turn.started":
            self._last[event.turn_id] = time.monotonic()
        elif is_terminal(event):
            self._last.pop(event.turn_id, None)
            if event.type == "turn.completed":
                self.run.turns_run += 1
                if self._opens <= time.monotonic() < self._closes:
                    self.run.turns += 1


# -- running a cell --------------------------------------------------------------


async def _keep_turning(runtime: AgentRuntime, prefix: str, until: float, run: CellRun) -> None:
    """Run turns back to back, each in a fresh session, until ``until``."""
    i = 0
    while time.monotonic() < until:
        try:
            await runtime.session(AGENT, f"{prefix}-{i}").turn(PROMPT)
        except AgentError as exc:
            run.failures.append(f"{prefix}-{i}: {type(exc).__name__}: {exc}")
            return
        i += 1


async def _cpu_in_window(opens: float, closes: float, run: CellRun) -> None:
    await asyncio.sleep(max(0.0, opens - time.monotonic()))
    before = time.process_time()
    await asyncio.sleep(max(0.0, closes - time.monotonic()))
    run.cpu = time.process_time() - before


async def run_cell(runtime: AgentRuntime, clock: StepClock, command: dict[str, Any]) -> CellRun:
    """Run ``command["sessions"]`` sessions of turns through one window; what they measured."""
    start = float(command["start"])
    opens = start + float(command["ramp"])
    closes = opens + float(command["duration"])
    run = clock.watch(opens, closes)
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(_cpu_in_window(opens, closes, run))
        for i in range(int(command["sessions"])):
            tasks.create_task(_keep_turning(runtime, f"{command['tag']}-{i}", closes, run))
    return run


async def check_shape(runtime: AgentRuntime, store: SessionStore) -> None:
    """Make sure the scripted turn really makes `STEPS_PER_TURN` checkpointed steps."""
    session = runtime.session(AGENT, f"shape-check-{os.getpid()}")
    result = await session.turn(PROMPT)
    steps = await store.load_steps(session.key, result.turn_id)
    if len(steps) != STEPS_PER_TURN:
        raise SystemExit(f"the scripted turn made {len(steps)} steps, not {STEPS_PER_TURN}")


async def open_store(where: str, pool_size: int) -> SQLiteStore | PostgresStore:
    """The SQLite store (WAL, FULL) at a path, or a `PostgresStore` for a URL."""
    if where.startswith(("postgresql://", "postgres://")):
        from agent.stores.postgres import PostgresStore

        return await PostgresStore.open(where, pool_size=pool_size)
    return await SQLiteStore.open(where)


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def serve(where: str, pool_size: int) -> None:
    """Open the store and a runtime, then run the commands read from stdin until told to quit."""
    store = await open_store(where, pool_size)
    clock = StepClock()
    try:
        async with AgentRuntime(
            store, make_agent(), sink=clock, hand_over=isinstance(store, InboxWakeups)
        ) as runtime:
            await check_shape(runtime, store)
            _send({"ready": True, "pid": os.getpid()})
            while line := await asyncio.to_thread(sys.stdin.readline):
                command = json.loads(line)
                if command["op"] == "quit":
                    break
                run = await run_cell(runtime, clock, command)
                _send(asdict(run))
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the bench's commands (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.step_worker")
    parser.add_argument("store", help="a SQLite file, or a postgresql:// URL")
    parser.add_argument("--pool-size", type=int, default=10, help="PostgreSQL connections")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.store, args.pool_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
