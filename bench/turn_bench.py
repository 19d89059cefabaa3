"""What one checkpointed step of a turn costs, against a bare SQLite commit.

Run it as a command (not a test)::

    python -m bench.turn_bench            # full run, about a minute on 2 cores
    python -m bench.turn_bench --quick    # a short, noisier run
    python -m bench.turn_bench --dir /var/lib/bot   # measure on the disk the bot uses

What it measures
    A scripted turn of 10 tool calls, one call per model reply, run through the
    real engine (`AgentRuntime` -> `AgentSession.turn`). That is 21 checkpointed
    steps (11 model steps + 10 tool steps); the turn also commits its opening
    (its ending shares the final reply's transaction), so it is 22
    transactions in all, plus one read that loads the fresh session. Each model reply carries
    about 1 KB of text, streamed as 256-character deltas to a counting event
    sink; the tool is a local ``def`` (so it runs inside its step's
    transaction) that returns about 1 KB of JSON. The script decides from the
    request alone (how many replies this turn already has), looking only at
    the current turn, so it costs the same whatever the session's history.

    1. Fresh session per turn, on the SQLite store (`SQLiteStore.open`: WAL,
       ``synchronous=FULL``) and on the memory store. Each turn is timed with
       `time.perf_counter` around ``await session.turn(...)`` (that includes
       loading the empty session). ``µs/step`` is turn time / 21.
    2. Raw commit: stdlib `sqlite3` on a second file in the same folder (WAL,
       ``synchronous=FULL``): ``BEGIN``; one ~1 KB INSERT into each of two
       tables (as a step writes a message and a memo); ``COMMIT``. The commits
       run in batches between the SQLite turns, so both see the same disk in
       the same moment; it is the floor a step cannot go below: one fsync'ed
       WAL commit with no engine around it. Both files are warmed up untimed
       until their WAL has wrapped (while a WAL file still grows, each commit
       costs about twice as much).
    3. History: the same turn in a session that already holds 0, 100 and 1,000
       earlier turns, made by the engine itself (pre-populated through the same
       agent on the same file, with ``synchronous=OFF`` only to save time; the
       rows are the engine's own). Then a new runtime opens the file with the
       default ``FULL``: the first turn of a 1,000-turn session is timed alone
       (the one-time load of its transcript into the session; the file itself
       is still in the OS page cache), every other session is
       loaded untimed and the sizes are measured in interleaved rounds, in
       steady state. Each measured turn adds one to its session's history, so
       a size is spread over several sessions and stays within +10 % of its
       nominal size (the table shows the range actually measured).

How to read it
    ``median`` is the typical cost; ``p10``/``p90`` the spread (disk latency
    is noisy, so trust the median and look at the spread for stability). The
    targets: a step should cost at most 2x a raw commit (what durability alone
    costs, so the engine's overhead is at most as much again), and a step at
    1,000 earlier turns at most 1.25x a step at 0 (the step's cost must not
    grow with history). A ``MISS`` is reported, never an error: the exit
    status is 0 whatever the figures. Note that turn/21 spreads the opening
    transaction and the session load over the steps, so a step that is exactly
    one raw commit shows as about 23/21 = 1.10x. The "off loop" raw commit is
    the same transaction run on aiosqlite's connection thread: the floor for
    an engine that must not block its event loop, printed for reading only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from agent import (
    Agent,
    AgentRuntime,
    AssistantMessage,
    MemoryStore,
    ModelReply,
    ModelRequest,
    SessionStore,
    SQLiteStore,
    TurnEvent,
    tool,
)
from agent.testing import ScriptedModel, call, reply

AGENT = "bench"
TOOL_CALLS = 10
STEPS_PER_TURN = 2 * TOOL_CALLS + 1
"""Checkpointed steps per turn: a model step before each call, and the final one."""
TRANSACTIONS_PER_TURN = STEPS_PER_TURN + 1
"""The steps plus the turn's opening and its ending."""
DELTA_CHUNK = 256
HISTORY_SIZES = (0, 100, 1000)
HISTORY_GROWTH = 0.10
"""A history session is measured for at most this fraction of its size in turns."""
RAW_PER_TURN = 10
"""Raw commits timed after each SQLite turn of the fresh-session phase."""
WARMUP_TURNS = 20
"""Untimed turns first: enough writes that the WAL has wrapped (see RAW_WARMUP)."""
RAW_WARMUP = 1000
"""Untimed raw commits first. Until the WAL first wraps at its 1,000-page checkpoint,
each commit grows the file and its fsync also flushes metadata: about 2x slower."""

TARGET_STEP_OVER_RAW = 2.0
TARGET_HISTORY_RATIO = 1.25

_VOCABULARY = (
    "the deploy queue holds three services whose health checks went green after "
    "the rollback so the canary can resume at ten percent while we watch error "
    "rates latency and saturation on the dashboards before widening the rollout"
)
_WORDS = _VOCABULARY.split()


def _prose(size: int, seed: int = 0) -> str:
    """Deterministic English-looking text of exactly ``size`` characters."""
    words: list[str] = []
    length = 0
    i = seed
    while length < size:
        word = _WORDS[i % len(_WORDS)]
        words.append(word)
        length += len(word) + 1
        i += 7
    return " ".join(words)[:size]


REPLY_TEXT = _prose(1024)
PROMPT = _prose(200, seed=3)
_ROWS = [
    {"id": f"svc-{i:02d}", "status": "healthy", "region": "eu-west-1", "note": _prose(60, i)}
    for i in range(8)
]
RAW_BODY = _prose(1024, seed=5)


@tool
def lookup(page: int) -> dict[str, Any]:
    """Look up one page of the service inventory (about 1 KB of JSON)."""
    return {"page": page, "rows": _ROWS}


def _replies_this_turn(request: ModelRequest) -> int:
    """How many replies the current turn already has; reads this turn only."""
    count = 0
    for message in reversed(request.messages):
        if message.turn_id != request.turn_id:
            break
        if isinstance(message, AssistantMessage):
            count += 1
    return count


def script(request: ModelRequest) -> ModelReply:
    """Call ``lookup`` once per reply, ten times, then finish."""
    done = _replies_this_turn(request)
    if done < TOOL_CALLS:
        return reply(REPLY_TEXT, call("lookup", {"page": done}, id=f"call_{done}"))
    return reply(REPLY_TEXT)


class CountingSink:
    """An event sink that only counts, so emission is paid for but nothing piles up."""

    def __init__(self) -> None:
        self.events = 0

    def emit(self, event: TurnEvent) -> None:
        """Count ``event``."""
        self.events += 1


def make_agent() -> tuple[Agent, ScriptedModel]:
    """The benchmark agent and its model (whose request log the bench clears)."""
    model = ScriptedModel(script, chunk=DELTA_CHUNK)
    return Agent(name=AGENT, model=model, instructions="Check the fleet.", tools=[lookup]), model


# -- statistics and progress ---------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Median and p10/p90 of some samples."""

    median: float
    p10: float
    p90: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float], scale: float = 1.0) -> Spread:
        """Summarise ``samples``, each multiplied by ``scale``."""
        values = [s * scale for s in samples]
        if len(values) < 2:
            only = values[0] if values else math.nan
            return cls(only, only, only, len(values))
        deciles = statistics.quantiles(values, n=10, method="inclusive")
        return cls(statistics.median(values), deciles[0], deciles[-1], len(values))


class Progress:
    """One status line on stderr: rewritten in place on a terminal, every few seconds if not."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._interval = 0.2 if self._tty else 5.0
        self._last = 0.0
        self._started = time.monotonic()

    def show(self, phase: str, done: int, total: int) -> None:
        """Report ``done`` of ``total`` for ``phase`` (throttled)."""
        now = time.monotonic()
        if done < total and now - self._last < self._interval:
            return
        self._last = now
        line = f"[{now - self._started:5.1f} s] {phase}: {done}/{total}"
        if self._tty:
            sys.stderr.write(f"\r\x1b[K{line}")
            if done >= total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(f"{line}\n")
        sys.stderr.flush()


# -- the measurements ----------------------------------------------------------


class RawCommit:
    """The floor: BEGIN; two ~1 KB INSERTs; COMMIT, in WAL with synchronous=FULL."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("CREATE TABLE message (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        self._conn.execute("CREATE TABLE memo (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")

    def timed(self) -> float:
        """Run one transaction; return its duration in seconds."""
        conn = self._conn
        start = time.perf_counter()
        conn.execute("BEGIN")
        conn.execute("INSERT INTO message (body) VALUES (?)", (RAW_BODY,))
        conn.execute("INSERT INTO memo (body) VALUES (?)", (RAW_BODY,))
        conn.execute("COMMIT")
        return time.perf_counter() - start

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


class RawCommitOffLoop:
    """The same transaction, run where an async engine must run it: off the event loop.

    One call on aiosqlite's connection thread, so it pays the one thread hop
    (queue in, wake the loop on the way back) that every engine step pays and a
    blocking ``sqlite3`` call on the loop would not.
    """

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: Path) -> RawCommitOffLoop:
        """Open ``path`` through aiosqlite with the same tables and settings as `RawCommit`."""
        RawCommit(path).close()
        db = await aiosqlite.connect(path, isolation_level=None)
        await db.execute("PRAGMA synchronous=FULL")
        return cls(db)

    async def timed(self) -> float:
        """Run one transaction through the connection thread; return its duration."""
        start = time.perf_counter()
        await self._db._execute(_raw_transaction, self._db._conn)  # type: ignore[no-untyped-call]
        return time.perf_counter() - start

    async def close(self) -> None:
        """Close the connection."""
        await self._db.close()


def _raw_transaction(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN")
    conn.execute("INSERT INTO message (body) VALUES (?)", (RAW_BODY,))
    conn.execute("INSERT INTO memo (body) VALUES (?)", (RAW_BODY,))
    conn.execute("COMMIT")


async def timed_turn(runtime: AgentRuntime, model: ScriptedModel, session_id: str) -> float:
    """Run the scripted turn in ``session_id``; return its duration in seconds."""
    session = runtime.session(AGENT, session_id)
    start = time.perf_counter()
    await session.turn(PROMPT)
    elapsed = time.perf_counter() - start
    model.requests.clear()  # the model's request log would otherwise grow without bound
    return elapsed


async def check_shape(runtime: AgentRuntime, store: SessionStore, model: ScriptedModel) -> None:
    """Make sure the scripted turn really is 21 checkpointed steps."""
    session = runtime.session(AGENT, "shape-check")
    result = await session.turn(PROMPT)
    steps = await store.load_steps(session.key, result.turn_id)
    model.requests.clear()
    if len(steps) != STEPS_PER_TURN:
        raise SystemExit(f"the scripted turn made {len(steps)} steps, not {STEPS_PER_TURN}")


@dataclass
class FreshResults:
    """Phase 1 and 2: turn times on fresh sessions, and the raw commits."""

    sqlite: list[float] = field(default_factory=list)
    memory: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    raw_off_loop: list[float] = field(default_factory=list)


async def fresh_sqlite(folder: Path, turns: int, out: FreshResults, progress: Progress) -> None:
    """Time ``turns`` fresh-session turns on SQLite, raw commits interleaved."""
    agent, model = make_agent()
    store = await SQLiteStore.open(folder / "turns.db")
    raw = RawCommit(folder / "raw.db")
    raw_off_loop = await RawCommitOffLoop.open(folder / "raw-off-loop.db")
    try:
        async with AgentRuntime(store, agent, sink=CountingSink()) as runtime:
            await check_shape(runtime, store, model)
            for i in range(WARMUP_TURNS):
                await timed_turn(runtime, model, f"warmup-{i}")
            for _ in range(RAW_WARMUP):
                raw.timed()
                await raw_off_loop.timed()
            gc.collect()
            for i in range(turns):
                out.sqlite.append(await timed_turn(runtime, model, f"fresh-{i}"))
                out.raw.extend(raw.timed() for _ in range(RAW_PER_TURN))
                for _ in range(RAW_PER_TURN):
                    out.raw_off_loop.append(await raw_off_loop.timed())
                progress.show("SQLite turns (+ raw commits)", i + 1, turns)
    finally:
        raw.close()
        await raw_off_loop.close()
        await store.close()


async def fresh_memory(turns: int, out: FreshResults, progress: Progress) -> None:
    """Time ``turns`` fresh-session turns on the memory store."""
    agent, model = make_agent()
    store = MemoryStore()
    async with AgentRuntime(store, agent, sink=CountingSink()) as runtime:
        await check_shape(runtime, store, model)
        for i in range(WARMUP_TURNS):
            await timed_turn(runtime, model, f"warmup-{i}")
        gc.collect()
        for i in range(turns):
            out.memory.append(await timed_turn(runtime, model, f"fresh-{i}"))
            progress.show("memory turns", i + 1, turns)


@dataclass
class HistoryCase:
    """The sessions that hold ``size`` earlier turns, and what was measured on them."""

    size: int
    per_session: int
    """Measured turns per session before moving to the next one."""
    session_ids: list[str]
    samples: list[float] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    """Earlier turns in the session at each sample."""


@dataclass
class HistoryResults:
    """Phase 3: steady-state turns by history size, and the one cold load."""

    cases: list[HistoryCase]
    cold_turn: float = math.nan
    cold_size: int = 0


def plan_history(rounds: int) -> HistoryResults:
    """Enough sessions per size that none grows by more than HISTORY_GROWTH of its size."""
    cases = []
    for size in HISTORY_SIZES:
        per_session = max(1, int(size * HISTORY_GROWTH))
        count = math.ceil(rounds / per_session)
        cases.append(HistoryCase(size, per_session, [f"h{size}-{j}" for j in range(count)]))
    return HistoryResults(cases)


async def history(folder: Path, rounds: int, progress: Progress) -> HistoryResults:
    """Pre-populate the history sessions, then time steady-state turns on each size."""
    results = plan_history(rounds)
    path = folder / "history.db"
    held: dict[str, int] = {}

    # pre-populate through the engine; synchronous=OFF only spares the fsyncs
    agent, model = make_agent()
    store = await SQLiteStore.open(path, synchronous="OFF")
    total = sum(case.size * len(case.session_ids) for case in results.cases)
    done = 0
    try:
        async with AgentRuntime(store, agent) as runtime:
            for case in results.cases:
                for session_id in case.session_ids:
                    for _ in range(case.size):
                        await timed_turn(runtime, model, session_id)
                        done += 1
                        progress.show("pre-populating history", done, total)
                    held[session_id] = case.size
    finally:
        await store.close()

    # measure: a new runtime on the same file, with the default durability
    agent, model = make_agent()
    store = await SQLiteStore.open(path)
    try:
        async with AgentRuntime(store, agent, sink=CountingSink()) as runtime:
            largest = results.cases[-1]
            cold_id = largest.session_ids[0]
            gc.collect()
            results.cold_turn = await timed_turn(runtime, model, cold_id)
            results.cold_size = held[cold_id]
            held[cold_id] += 1
            for case in results.cases:
                for session_id in case.session_ids:
                    await runtime.session(AGENT, session_id).status()  # load, untimed
            for i in range(WARMUP_TURNS):
                await timed_turn(runtime, model, f"warmup-{i}")
            gc.collect()
            sizes = " / ".join(str(case.size) for case in results.cases)
            for r in range(rounds):
                shift = r % len(results.cases)  # rotate so no size always runs first
                for case in results.cases[shift:] + results.cases[:shift]:
                    session_id = case.session_ids[r // case.per_session]
                    case.held.append(held[session_id])
                    case.samples.append(await timed_turn(runtime, model, session_id))
                    held[session_id] += 1
                progress.show(f"history rounds ({sizes} earlier turns)", r + 1, rounds)
    finally:
        await store.close()
    return results


# -- the report ----------------------------------------------------------------


def _mark(ratio: float, target: float) -> str:
    return "PASS" if ratio <= target else "MISS"


def _row(label: str, n: int | None, spread: Spread, fmt: str, extra: str = "") -> str:
    count = f"{n:>7}" if n is not None else " " * 7
    cells = "".join(f"{format(v, fmt):>9}" for v in (spread.median, spread.p10, spread.p90))
    return f"  {label:<40}{count}{cells}{extra}"


def _target(label: str, ratio: float, target: float) -> str:
    return f"  {label:<40}{ratio:>9.2f}x   <= {target:.2f}x   {_mark(ratio, target)}"


def _header(title: str, extra: str = "") -> str:
    return f"{title:<42}{'n':>7}{'median':>9}{'p10':>9}{'p90':>9}{extra}"


def report(fresh: FreshResults, hist: HistoryResults, folder: Path, seconds: float) -> str:
    """The results as a table with PASS/MISS marks."""
    ms, us_step = 1e3, 1e6 / STEPS_PER_TURN
    sqlite_step = Spread.of(fresh.sqlite, us_step)
    raw = Spread.of(fresh.raw, 1e6)
    raw_off_loop = Spread.of(fresh.raw_off_loop, 1e6)
    tool_bytes = len(json.dumps(lookup.fn(0)))
    lines = [
        f"turn_bench: 1 turn = {TOOL_CALLS} tool calls = {STEPS_PER_TURN} checkpointed steps "
        f"({TOOL_CALLS + 1} model + {TOOL_CALLS} tool) in {TRANSACTIONS_PER_TURN} transactions",
        f"  replies of {len(REPLY_TEXT)} chars streamed in {DELTA_CHUNK}-char deltas;"
        f" a local (def) tool returning {tool_bytes} bytes of JSON",
        f"  databases in {folder}",
        f"  Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs, {seconds:.0f} s in all",
        "",
        _header("fresh session per turn"),
        _row("SQLite (WAL, FULL)   ms/turn", len(fresh.sqlite), Spread.of(fresh.sqlite, ms), ".2f"),
        _row("                     µs/step", None, sqlite_step, ".0f"),
        _row("memory               ms/turn", len(fresh.memory), Spread.of(fresh.memory, ms), ".2f"),
        _row("                     µs/step", None, Spread.of(fresh.memory, us_step), ".0f"),
        _row("raw commit           µs/commit", len(fresh.raw), raw, ".0f"),
        _row("raw commit off loop  µs/commit", len(fresh.raw_off_loop), raw_off_loop, ".0f"),
        "    raw commit: stdlib sqlite3, same folder, WAL + FULL: BEGIN; 2 x 1 KB INSERT; COMMIT",
        "    off loop: the same on aiosqlite's thread, with the hop every engine step pays",
        "",
        _header("history: SQLite, warm session, µs/step", f"{'vs 0':>9}"),
    ]
    base = statistics.median(hist.cases[0].samples)
    for case in hist.cases:
        low, high = min(case.held), max(case.held)
        held = f"{low}" if low == high else f"{low}-{high}"
        label = f"{case.size:>5} earlier turns (held {held})"
        step = Spread.of(case.samples, us_step)
        ratio = statistics.median(case.samples) / base
        lines.append(_row(label, step.n, step, ".0f", f"{ratio:>8.2f}x"))
    largest = hist.cases[-1]
    steady = statistics.median(largest.samples)
    history_ratio = steady / base
    over_raw = sqlite_step.median / raw.median
    lines += [
        f"  cold: new runtime on the file, first turn of a {hist.cold_size}-turn session "
        f"{hist.cold_turn * ms:.0f} ms",
        f"    (its steady-state turn takes {steady * ms:.1f} ms: the one-time load is "
        f"~{(hist.cold_turn - steady) * ms:.0f} ms)",
        "",
        f"{'targets':<42}{'measured':>10}   target",
        _target("SQLite step / raw commit", over_raw, TARGET_STEP_OVER_RAW),
        f"{'  (for reading: SQLite step / raw commit off loop)':<42}"
        f"{sqlite_step.median / raw_off_loop.median:>9.2f}x",
        _target(
            f"step at {largest.size} earlier turns / at 0", history_ratio, TARGET_HISTORY_RATIO
        ),
    ]
    return "\n".join(lines)


# -- entry point ---------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.turn_bench",
        description="Time a 21-step scripted turn on SQLite and memory, against a raw commit.",
    )
    parser.add_argument(
        "--turns", type=int, help="fresh-session turns per store (default 2000, quick 100)"
    )
    parser.add_argument(
        "--rounds", type=int, help="history rounds, one turn per size each (default 100, quick 20)"
    )
    parser.add_argument("--quick", action="store_true", help="a short, noisier run")
    parser.add_argument(
        "--dir", type=Path, help="folder for the databases (default: a temporary one)"
    )
    args = parser.parse_args(argv)
    args.turns = args.turns or (100 if args.quick else 2000)
    args.rounds = args.rounds or (20 if args.quick else 100)
    if args.turns < 2 or args.rounds < 2:
        parser.error("--turns and --rounds must be at least 2")
    return args


async def run(args: argparse.Namespace) -> str:
    """Run every phase in a fresh folder under ``--dir`` and return the report."""
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="turn_bench-", dir=args.dir))
    started = time.monotonic()
    progress = Progress()
    try:
        fresh = FreshResults()
        await fresh_sqlite(folder, args.turns, fresh, progress)
        await fresh_memory(args.turns, fresh, progress)
        hist = await history(folder, args.rounds, progress)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return report(fresh, hist, folder, time.monotonic() - started)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; always 0, a miss is a finding."""
    print(asyncio.run(run(parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
