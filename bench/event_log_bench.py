"""What the catch-up event log costs a turn, and how fast a client catches up.

Run it as a command (not a test)::

    python -m bench.event_log_bench            # full run
    python -m bench.event_log_bench --quick    # a short, noisier run

What it measures
    1. The scripted 21-step turn of `bench.turn_bench` (10 tool calls, about 1 KB a
       reply streamed in 256-character deltas) on SQLite (WAL, ``synchronous=FULL``),
       with and without an `EventLog` on the runtime, in interleaved rounds on two
       files in one folder. A logged turn writes 33 events (started, 11 messages,
       10 tool calls and their 10 results, completed); the log batches what comes
       while a write is in flight. ``µs/turn`` is the time of ``session.turn``;
       a logged turn is timed until its last event is in the log too.
    2. Live delivery: for each logged event, the time from the engine emitting it
       to a follower (`EventLog.follow`) receiving it, log write included.
    3. Catch-up: a client reconnecting with ``after=0`` to a session whose log holds
       N events (N = 33 x turns), timed until it has them all; and a reconnection
       that is 10 events behind, timed to its first event.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from agent import AgentRuntime, EventLog, LogEntry, SQLiteStore, TurnEvent
from agent.core.records import SessionKey
from bench.turn_bench import AGENT, PROMPT, make_agent


class EmitClock:
    """Notes when each event was emitted (registered before the log, so first to hear it)."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, int], float] = {}

    def emit(self, event: TurnEvent) -> None:
        self.at[(event.turn_id, event.seq)] = time.perf_counter()


async def turns(folder: Path, rounds: int) -> tuple[list[float], list[float], list[float]]:
    """Per-turn seconds without and with the log, and live delivery delays."""
    plain_agent, plain_model = make_agent()
    logged_agent, logged_model = make_agent()
    plain_store = await SQLiteStore.open(folder / "plain.db")
    logged_store = await SQLiteStore.open(folder / "logged.db")
    clock = EmitClock()
    plain, logged, delays = [], [], []
    try:
        async with (
            AgentRuntime(plain_store, plain_agent) as plain_runtime,
            AgentRuntime(logged_store, logged_agent, sink=clock) as logged_runtime,
        ):
            log = EventLog(logged_store)
            logged_runtime.add_sink(log)
            for i in range(rounds + 5):  # the first five warm both files up
                start = time.perf_counter()
                await plain_runtime.session(AGENT, f"s{i}").turn(PROMPT)
                plain_took = time.perf_counter() - start

                key = SessionKey(AGENT, f"s{i}")
                received: list[tuple[LogEntry, float]] = []
                follower = asyncio.create_task(_follow(log, key, received))
                await asyncio.sleep(0)
                start = time.perf_counter()
                await logged_runtime.session(AGENT, f"s{i}").turn(PROMPT)
                await log.flush()
                logged_took = time.perf_counter() - start
                await follower
                if i >= 5:
                    plain.append(plain_took)
                    logged.append(logged_took)
                    delays += [
                        at - clock.at[(entry.event.turn_id, entry.event.seq)]
                        for entry, at in received
                    ]
                plain_model.requests.clear()
                logged_model.requests.clear()
                _progress("turns", i + 1, rounds + 5)
            await log.close()
    finally:
        await plain_store.close()
        await logged_store.close()
    return plain, logged, delays


async def _follow(log: EventLog, key: SessionKey, out: list[tuple[LogEntry, float]]) -> None:
    async for entry in log.follow(key):
        if isinstance(entry, LogEntry) and not entry.delta:
            out.append((entry, time.perf_counter()))
            if entry.event.type == "turn.completed":
                return


async def catch_up(folder: Path, session_turns: int) -> tuple[int, float, float]:
    """Events in the log, seconds to read them all from 0, seconds to a 10-behind first event."""
    agent, model = make_agent()
    store = await SQLiteStore.open(folder / "catch-up.db")
    try:
        async with AgentRuntime(store, agent) as runtime:
            log = EventLog(store)
            runtime.add_sink(log)
            session = runtime.session(AGENT, "long")
            for i in range(session_turns):
                await session.turn(PROMPT)
                model.requests.clear()
                _progress("a long session", i + 1, session_turns)
            await log.close()
        key = SessionKey(AGENT, "long")
        last = (await store.event_bounds(key)).last
        reader = EventLog(store)
        start = time.perf_counter()
        async for entry in reader.follow(key, after=0):
            if isinstance(entry, LogEntry) and entry.position == last:
                break
        whole = time.perf_counter() - start
        start = time.perf_counter()
        async for _ in reader.follow(key, after=last - 10):
            break
        behind = time.perf_counter() - start
    finally:
        await store.close()
    return last, whole, behind


def _progress(what: str, done: int, total: int) -> None:
    print(f"\r{what}: {done}/{total}", end="" if done < total else "\n", file=sys.stderr)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1]


async def run(args: argparse.Namespace) -> str:
    folder = Path(tempfile.mkdtemp(prefix="event_log_bench-"))
    try:
        plain, logged, delays = await turns(folder, args.rounds)
        events, whole, behind = await catch_up(folder, args.session_turns)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    p, lg = statistics.median(plain), statistics.median(logged)
    return "\n".join(
        [
            f"Event log: {args.rounds} interleaved rounds of a 21-step turn on SQLite (FULL)",
            f"  turn without the log   median {_ms(p)}  p90 {_ms(_pct(plain, 90))}",
            f"  turn with the log      median {_ms(lg)}  p90 {_ms(_pct(logged, 90))}"
            f"  ({lg / p:.2f}x, +{(lg - p) * 1000:.2f} ms for 33 logged events)",
            f"  live delivery, emit to follower: median {_ms(statistics.median(delays))}"
            f"  p99 {_ms(_pct(delays, 99))}  ({len(delays)} events)",
            f"Catch-up from a log of {events} events",
            f"  all of it from position 0: {_ms(whole)} ({events / whole:,.0f} events/s)",
            f"  10 behind, to the first event: {_ms(behind)}",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.event_log_bench")
    parser.add_argument("--quick", action="store_true", help="a short, noisier run")
    args = parser.parse_args(argv)
    args.rounds = 40 if args.quick else 300
    args.session_turns = 30 if args.quick else 300
    return args


def main(argv: Sequence[str] | None = None) -> int:
    print(asyncio.run(run(parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
