"""How much a batch of remote calls gains from running concurrently.

Run it as a command (not a test)::

    python -m bench.parallel_bench              # 5 rounds, a few seconds
    python -m bench.parallel_bench --rounds 20 --calls 8 --call-ms 100

What it measures
    One turn on a SQLite file whose model asks, in one reply, for ``--calls``
    remote calls that each take ``--call-ms`` (an ``asyncio.sleep``, as an HTTP
    call waits). The batch's wall time is read off the turn's events, from its
    first ``action.requested`` to its last ``action.completed``, so it includes
    every checkpoint the batch commits and none of the model's time. Each round
    runs the same turn twice, interleaved: with the agent's default
    ``max_parallel_calls`` (8) and with 1, the shape before calls ran together.

How to read it
    "vs serial sum" is the batch's wall time over ``calls x call-ms``: the
    floor for calls run one by one is 1.0, and a batch that runs all its calls at
    once approaches ``1 / calls`` plus what its commits cost. "vs one at a time"
    is the same ratio between the two runs of each round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent import Agent, AgentRuntime, ModelRequest, SQLiteStore, ToolMessage, TurnEvent, tool
from agent.testing import ScriptedModel, call, reply


class BatchClock:
    """A sink that notes when the batch's first call started and its last one ended."""

    def __init__(self) -> None:
        self.first_start: float | None = None
        self.last_end: float | None = None

    def emit(self, event: TurnEvent) -> None:
        now = time.perf_counter()
        if event.type == "action.requested" and self.first_start is None:
            self.first_start = now
        elif event.type == "action.completed":
            self.last_end = now

    def seconds(self) -> float:
        assert self.first_start is not None
        assert self.last_end is not None
        return self.last_end - self.first_start


def make_agent(calls: int, call_seconds: float, parallel: int) -> Agent:
    @tool
    async def fetch(n: int) -> str:
        """Fetch item n (remote: an HTTP call, say)."""
        await asyncio.sleep(call_seconds)
        return f"item {n}"

    def script(request: ModelRequest) -> Any:
        if isinstance(request.messages[-1], ToolMessage):
            return reply("All fetched.")
        return reply("Fetching.", *(call("fetch", {"n": n}, id=f"c{n}") for n in range(calls)))

    return Agent(
        name="bench", model=ScriptedModel(script), tools=[fetch], max_parallel_calls=parallel
    )


async def one_batch(folder: Path, round_no: int, calls: int, call_s: float, parallel: int) -> float:
    store = await SQLiteStore.open(str(folder / f"round{round_no}-{parallel}.db"))
    clock = BatchClock()
    try:
        async with AgentRuntime(store, make_agent(calls, call_s, parallel), sink=clock) as rt:
            await rt.session("bench", "s1").turn("fetch them all")
    finally:
        await store.close()
    return clock.seconds()


def spread(values: list[float]) -> str:
    return f"min {min(values):.3f}  median {statistics.median(values):.3f}  max {max(values):.3f}"


async def run(rounds: int, calls: int, call_ms: float) -> None:
    call_s = call_ms / 1000
    serial_sum = calls * call_s
    together: list[float] = []
    one_by_one: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for round_no in range(rounds):
            together.append(await one_batch(folder, round_no, calls, call_s, parallel=calls))
            one_by_one.append(await one_batch(folder, round_no, calls, call_s, parallel=1))
            print(f"\rround {round_no + 1}/{rounds}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(f"batch of {calls} remote calls of {call_ms:g} ms; serial sum {serial_sum:.3f} s")
    print(f"  concurrent (max_parallel_calls={calls}) s: {spread(together)}")
    print(f"  one at a time (max_parallel_calls=1)  s: {spread(one_by_one)}")
    print(f"  concurrent vs serial sum:  {spread([t / serial_sum for t in together])}")
    print(f"  one at a time vs serial sum: {spread([t / serial_sum for t in one_by_one])}")
    ratios = [t / o for t, o in zip(together, one_by_one, strict=True)]
    print(f"  concurrent vs one at a time (same round): {spread(ratios)}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--call-ms", type=float, default=100.0)
    args = parser.parse_args(argv)
    asyncio.run(run(args.rounds, args.calls, args.call_ms))


if __name__ == "__main__":
    main()
