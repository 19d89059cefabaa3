"""Whether compaction keeps a long-lived session flat: memory, request size, turn time.

Run it as a command (not a test)::

    python -m bench.compaction_bench            # 1,000 turns each way, about a minute
    python -m bench.compaction_bench --turns 200

What it measures
    One session on a SQLite file takes ``--turns`` turns in a row, as a busy DM
    or a daily schedule's session does over months: each turn a 200-character
    question, one tool call, and a 600-character answer (four messages). It runs
    twice in the same process, one run after the other: with compaction off, and
    with ``Compacting(keep_turns=20, every=20)``, whose summaries the scripted
    model writes at a fixed 1,500 characters (Claude's, asked for about 400
    words, are of that size).

    At checkpoints it reads: the characters of the first model request of the
    turn (as sent on the wire) and how many messages it holds; the messages
    and turn records the session keeps in memory; and the Python memory traced
    since the run began (tracemalloc: the session, the store's caches, the
    engine). Last, the median time of a turn over the last tenth of the run.

How to read it
    Each "growth" line is the value at the last turn over the value at the
    first checkpoint past warm-up (turn 100): near 1.0 is flat. Compaction
    keeps the request and what is held in a sawtooth between ``keep_turns`` and
    ``keep_turns + every`` turns, whatever the session's age; without it both
    grow with every turn.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent import (
    Agent,
    AgentRuntime,
    Compacting,
    ModelRequest,
    SQLiteStore,
    ToolMessage,
    tool,
)
from agent.models.anthropic.wire import message_size
from agent.testing import ScriptedModel, call, reply

QUESTION = ("which services went green after the rollback, and when? " * 5)[:200]
ANSWER = ("The canary is healthy at ten percent and error rates are flat. " * 12)[:600]
SUMMARY = ("They tracked a rollout: services, health checks, canary steps. " * 30)[:1500]
FIRST_CHECKPOINT = 100


@tool
def look_up(service: str) -> dict[str, str]:
    """Look a service up."""
    return {"service": service, "health": "green"}


class Measured:
    """The scripted model, noting the size of the first request of the turns measured."""

    def __init__(self, measured_turns: set[str]) -> None:
        self.first_request: dict[str, tuple[int, int]] = {}
        self._measured_turns = measured_turns

    def model(self) -> ScriptedModel:
        def script(request: ModelRequest) -> Any:
            scripted.requests.clear()  # it keeps what it was asked; a real model keeps nothing
            if request.step == "summary":
                return reply(SUMMARY)
            if isinstance(request.messages[-1], ToolMessage):
                return reply(ANSWER)
            if request.turn_id in self._measured_turns:  # sizing is O(history): only there
                chars = sum(message_size(m) for m in request.messages)
                self.first_request[request.turn_id] = (chars, len(request.messages))
            return reply("", call("look_up", {"service": "api"}))

        scripted = ScriptedModel(script)
        return scripted


async def one_run(
    turns: int, compacting: Compacting | None, checkpoints: list[int]
) -> dict[str, Any]:
    measured = Measured({f"t{n}" for n in checkpoints})
    rows: list[dict[str, Any]] = []
    times: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        store = await SQLiteStore.open(Path(folder) / "bench.db")
        agent = Agent(name="bench", model=measured.model(), tools=[look_up], compacting=compacting)
        tracemalloc.start()
        try:
            async with AgentRuntime(store, agent) as runtime:
                session = runtime.session("bench", "dm")
                for n in range(1, turns + 1):
                    started = time.perf_counter()
                    await session.turn(QUESTION, turn_id=f"t{n}")
                    times.append(time.perf_counter() - started)
                    if n in checkpoints:
                        await asyncio.sleep(0)  # a summary that is written lands between turns
                        chars, messages = measured.first_request[f"t{n}"]
                        state = await session.turns()
                        rows.append(
                            {
                                "turn": n,
                                "request_chars": chars,
                                "request_messages": messages,
                                "held_messages": len(await session.transcript()),
                                "held_turns": len(state),
                                "traced_mib": tracemalloc.get_traced_memory()[0] / 2**20,
                            }
                        )
                    if n % 50 == 0:
                        print(f"\r  turn {n}/{turns}", end="", file=sys.stderr, flush=True)
        finally:
            tracemalloc.stop()
            await store.close()
    print(file=sys.stderr)
    tail = times[-max(turns // 10, 1) :]
    return {"rows": rows, "turn_ms": statistics.median(tail) * 1000}


def growth(rows: list[dict[str, Any]], field: str) -> float:
    first = next(r for r in rows if r["turn"] >= FIRST_CHECKPOINT)
    return rows[-1][field] / first[field]


def report(turns: int, off: dict[str, Any], on: dict[str, Any]) -> str:
    lines = [f"compaction over one session of {turns} turns (SQLite, scripted model)", ""]
    header = (
        f"{'turn':>6} {'request chars':>22} {'request msgs':>16} {'held msgs':>14}"
        f" {'traced MiB':>16}"
    )
    lines += [
        header,
        f"{'':>6} {'off / on':>22} {'off / on':>16} {'off / on':>14} {'off / on':>16}",
    ]
    for a, b in zip(off["rows"], on["rows"], strict=True):
        lines.append(
            f"{a['turn']:>6} {a['request_chars']:>11,} / {b['request_chars']:<8,}"
            f" {a['request_messages']:>7} / {b['request_messages']:<6}"
            f" {a['held_messages']:>6} / {b['held_messages']:<5}"
            f" {a['traced_mib']:>7.2f} / {b['traced_mib']:<6.2f}"
        )
    lines.append("")
    lines.append(f"growth, turn {turns} over turn {FIRST_CHECKPOINT} (1.0 is flat):")
    for field, name in (
        ("request_chars", "request size"),
        ("held_messages", "messages held"),
        ("traced_mib", "traced memory"),
    ):
        was, now = growth(off["rows"], field), growth(on["rows"], field)
        lines.append(f"  {name:<14} off {was:6.2f}x   on {now:6.2f}x")
    lines.append(
        f"turn time, median of the last tenth: off {off['turn_ms']:.2f} ms,"
        f" on {on['turn_ms']:.2f} ms (on / off {on['turn_ms'] / off['turn_ms']:.2f}x)"
    )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> str:
    checkpoints = sorted({c for c in (10, 100, 250, 500, 750, args.turns) if c <= args.turns})
    off = await one_run(args.turns, None, checkpoints)
    on = await one_run(args.turns, Compacting(keep_turns=20, every=20), checkpoints)
    return report(args.turns, off, on)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compaction_bench")
    parser.add_argument("--turns", type=int, default=1000, help="turns of the session")
    args = parser.parse_args(argv)
    if args.turns < FIRST_CHECKPOINT:
        parser.error(f"--turns must be {FIRST_CHECKPOINT} or more")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    print(asyncio.run(run(parse_args(argv))))


if __name__ == "__main__":
    main()
