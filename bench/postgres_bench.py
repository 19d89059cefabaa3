"""Checkpointed steps per second on PostgreSQL, at 1, 50 and 200 sessions and 1 and 3 replicas.

Run it as a command (not a test)::

    python -m bench.postgres_bench                  # 5 rounds of 2 s a cell, about 3 minutes
    python -m bench.postgres_bench --rounds 3 --duration 1
    python -m bench.postgres_bench --pool-size 50   # more connections per PostgresStore

What it measures
    The scripted turn of `bench.step_worker`: 4 tool calls, one per model reply,
    alternating a remote tool (``async def``: awaited, then committed) and a local
    one (``def``: an INSERT through ``ctx.store`` inside its step's transaction),
    so 9 checkpointed steps a turn (5 model + 4 tool), each reply about 1 KB
    streamed in 256-character deltas. Every turn is in a fresh session. Turns run
    in real `AgentRuntime`\\ s, each in a child process of its own (a *replica*):
    one on SQLite (WAL, ``synchronous=FULL``), one on PostgreSQL ("1 replica"),
    and three on PostgreSQL ("3 replicas"), each on its own `PostgresStore`
    (pool of 10 connections, the default) over one database, the sessions split
    evenly among them. The bench process itself only starts cells and reads
    what they measured, so it takes no CPU from them while they run.

    A cell is a store, a replica count and a number of sessions (1, 50, 200) run
    concurrently, each session running turns back to back. Its replicas start
    together at one instant of the machine's monotonic clock; after a ramp
    (0.5 s) every step that ends in the window (2 s) is counted and timed. A
    step's latency is the time from the engine's previous event of its turn
    (``turn.started``, or the previous step's) to its own ``message.completed``
    or ``action.completed``, each emitted once the step has committed: it holds
    the step's work, its commit, and any wait for the connection or the loop.

    Raw commits are the floor: ``BEGIN``; one ~1 KB INSERT into each of two
    tables; ``COMMIT``, one connection, serial, for the same window, on SQLite
    (stdlib `sqlite3`, WAL, FULL, a file in the same folder) and on PostgreSQL
    (psycopg sync, autocommit connection, ``conn.transaction()``: 4 round trips),
    in the bench process. The PostgreSQL server is started for the run from
    Debian's binaries (`tests.postgres_server`) with its default durability:
    fsync, synchronous commit and full-page writes on.

    Cells and raw commits are interleaved in rounds, their order rotated each
    round, after one untimed warm-up round; so the machine's noise falls on every
    cell alike. The figures are min / median / max over rounds of steps/s, and
    p50 / p99 of every step timed in all rounds.

How to read it
    ``vs raw`` is a cell's steps/s over its store's raw commits/s, and its p50
    step over the raw commit's p50, each the median over rounds of the ratio
    within one round. The ratios below the table compare stores and replica
    counts the same way. ``CPU cores`` are what the cell's replica processes
    (``engine``), the server's processes (``pg``: the postmaster and its
    children, from /proc) and the whole machine (``all``, busy in /proc/stat:
    kernel and the bench process included) used in the window; ``WAL/step`` is
    the PostgreSQL WAL written per step, everything of a turn included (its
    opening, its lease). Nothing is a target: the exit status is 0 whatever the
    figures, unless a turn failed or a local tool's rows do not match the turns.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from agent.stores.postgres._store import POOL_SIZE
from bench.postgres_report import Cell, Raw, Results, as_json, percentile, report
from bench.step_worker import NOTE_CALLS, NOTES_TABLE, STEPS_PER_TURN
from bench.turn_bench import RAW_BODY, RAW_WARMUP, Progress, RawCommit
from tests.postgres_server import PostgresServer, find_binaries

ROOT = Path(__file__).resolve().parents[1]
REPLICAS = 3
START_LEAD = 0.05
"""Seconds between sending a cell's command and its start, so every replica has it."""
READY_TIMEOUT = 120.0


class RawPostgres:
    """The floor on PostgreSQL: BEGIN; two ~1 KB INSERTs; COMMIT on one psycopg connection."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._conn.execute("CREATE TABLE message (id bigserial PRIMARY KEY, body text NOT NULL)")
        self._conn.execute("CREATE TABLE memo (id bigserial PRIMARY KEY, body text NOT NULL)")

    def timed(self) -> float:
        """Run one transaction; return its duration in seconds."""
        start = time.perf_counter()
        with self._conn.transaction():
            self._conn.execute("INSERT INTO message (body) VALUES (%s)", (RAW_BODY,))
            self._conn.execute("INSERT INTO memo (body) VALUES (%s)", (RAW_BODY,))
        return time.perf_counter() - start

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


class Replica:
    """A `bench.step_worker` child process: one runtime on its own store."""

    def __init__(self, process: asyncio.subprocess.Process, where: str, log: Path) -> None:
        self._process = process
        self.where = where
        """Its store: a SQLite file or a PostgreSQL URL."""
        self._log = log

    @classmethod
    async def start(cls, where: str, pool_size: int, log: Path) -> Replica:
        """Start one on ``where`` (a SQLite file or a URL); it is ready once this returns."""
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with log.open("w") as errors:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.step_worker", where, "--pool-size", str(pool_size),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=errors,
                env=env, cwd=ROOT, limit=1 << 26,
            )  # fmt: skip
        replica = cls(process, where, log)
        async with asyncio.timeout(READY_TIMEOUT):
            await replica.answer()
        return replica

    async def answer(self) -> dict[str, Any]:
        """The next line it sends: its reply to the last command."""
        assert self._process.stdout is not None
        line = await self._process.stdout.readline()
        if not line:
            tail = self._log.read_text()[-3000:]
            raise SystemExit(f"a replica exited (its stderr, {self._log}):\n{tail}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def send(self, command: dict[str, Any]) -> None:
        """Send one command line."""
        assert self._process.stdin is not None
        self._process.stdin.write((json.dumps(command) + "\n").encode())
        await self._process.stdin.drain()

    async def quit(self) -> None:
        """Tell it to close its runtime and store, and wait for it to exit."""
        if self._process.returncode is None:
            try:
                await self.send({"op": "quit"})
                await asyncio.wait_for(self._process.wait(), 30)
            except (TimeoutError, ConnectionError):
                self._process.kill()
                await self._process.wait()


def split(sessions: int, replicas: int) -> list[int]:
    """``sessions`` shared as evenly as can be among ``replicas``."""
    return [sessions // replicas + (i < sessions % replicas) for i in range(replicas)]


class ServerProbe:
    """What the PostgreSQL server did during a cell: WAL written, CPU used by its processes."""

    def __init__(self, admin: psycopg.Connection[Any], data_dir: Path) -> None:
        self._admin = admin
        self._postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
        self._tick = os.sysconf("SC_CLK_TCK")

    def wal_bytes(self) -> int:
        """The server's current WAL position, in bytes."""
        row = self._admin.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        return int(row[0])

    def cpu_seconds(self) -> float:
        """User and system CPU seconds of the postmaster and its children (the backends)."""
        ticks = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:  # gone meanwhile
                continue
            pid = int(text.split(" ", 1)[0])
            fields = text.rsplit(")", 1)[
                1
            ].split()  # after the command's name, which may hold spaces
            if pid == self._postmaster or int(fields[1]) == self._postmaster:
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / self._tick


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (not idle, not waiting on I/O) since boot."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle, iowait = fields[3], fields[4]
    return (sum(fields[:8]) - idle - iowait) / os.sysconf("SC_CLK_TCK")


async def _cpu_in_window(
    probe: ServerProbe | None, opens: float, closes: float, cell: Cell, duration: float
) -> None:
    await asyncio.sleep(max(0.0, opens - time.monotonic()))
    machine, server = machine_busy_seconds(), probe.cpu_seconds() if probe else 0.0
    await asyncio.sleep(max(0.0, closes - time.monotonic()))
    cell.machine_cores.append((machine_busy_seconds() - machine) / duration)
    if probe is not None:
        cell.server_cores.append((probe.cpu_seconds() - server) / duration)


async def run_cell(
    cell: Cell,
    tag: str,
    *,
    args: argparse.Namespace,
    probe: ServerProbe | None,
    warmup: bool = False,
) -> None:
    """One run of ``cell``, its sessions named after ``tag``; a warm-up's is not recorded."""
    duration = args.warmup if warmup else args.duration
    ramp = 0.0 if warmup else args.ramp
    start = time.monotonic() + START_LEAD
    wal_before = probe.wal_bytes() if probe else 0
    parts = split(cell.sessions, len(cell.replicas))
    active = [(replica, n) for replica, n in zip(cell.replicas, parts, strict=True) if n]
    for i, (replica, n) in enumerate(active):
        await replica.send(
            {"op": "run", "tag": f"{tag}-r{i}", "sessions": n, "start": start, "ramp": ramp}
            | {"duration": duration}
        )
    async with asyncio.timeout(START_LEAD + ramp + duration + 120):
        if not warmup:
            opens = start + ramp
            await _cpu_in_window(probe, opens, opens + duration, cell, duration)
        runs = [await replica.answer() for replica, _ in active]
    wal = probe.wal_bytes() - wal_before if probe else 0
    turns = sum(run["turns_run"] for run in runs)
    cell.turns += turns
    cell.failures += [failure for run in runs for failure in run["failures"]]
    if warmup:
        return
    latencies = [latency for run in runs for latency in run["latencies"]]
    cell.rates.append(sum(run["steps"] for run in runs) / duration)
    cell.p50s.append(percentile(latencies, 50))
    cell.latencies += latencies
    cell.cores.append(sum(run["cpu"] for run in runs) / duration)
    if probe is not None and turns:
        cell.wal_per_step.append(wal / (turns * STEPS_PER_TURN))


def run_raw(raw: Raw, commit: RawCommit | RawPostgres, duration: float) -> None:
    """Commit serially for ``duration`` seconds; record the rate and each commit."""
    samples = []
    start = time.perf_counter()
    ends = start + duration
    while time.perf_counter() < ends:
        samples.append(commit.timed())
    raw.rates.append(len(samples) / (time.perf_counter() - start))
    raw.p50s.append(percentile(samples, 50))
    raw.latencies += samples


# -- the run ---------------------------------------------------------------------


def _prepare_postgres(url: str, statement: str = NOTES_TABLE) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def _count_notes(where: str) -> int:
    if where.startswith("postgresql://"):
        with psycopg.connect(where) as conn:
            row = conn.execute("SELECT count(*) FROM bench_notes").fetchone()
    else:
        with sqlite3.connect(where) as conn:
            row = conn.execute("SELECT count(*) FROM bench_notes").fetchone()
    assert row is not None
    return int(row[0])


def _server_settings(admin: psycopg.Connection[Any]) -> dict[str, str]:
    names = [
        *("server_version", "fsync", "synchronous_commit", "full_page_writes"),
        *("wal_sync_method", "commit_delay", "shared_buffers", "max_connections"),
    ]
    settings = {}
    for name in names:
        row = admin.execute(f"SHOW {name}").fetchone()
        settings[name] = str(row[0]) if row else "?"
    return settings


async def measure(args: argparse.Namespace, server: PostgresServer, folder: Path) -> Results:
    """Start the replicas, run the warm-up and the rounds, check the local tool's rows."""
    sqlite_path = str(folder / "steps.db")
    with sqlite3.connect(sqlite_path) as conn:
        conn.execute(NOTES_TABLE)
    url_one, url_many, url_raw = (server.fresh_schema() for _ in range(3))
    _prepare_postgres(url_one)
    _prepare_postgres(url_many)
    places = [sqlite_path, url_one] + [url_many] * args.replicas
    logs = [folder / f"replica-{i}.log" for i in range(len(places))]
    started = await asyncio.gather(
        *(
            Replica.start(where, args.pool_size, log)
            for where, log in zip(places, logs, strict=True)
        ),
        return_exceptions=True,
    )
    replicas = [r for r in started if isinstance(r, Replica)]
    admin = psycopg.connect(server.admin_url, autocommit=True)
    raw_sqlite, raw_postgres = RawCommit(folder / "raw.db"), RawPostgres(url_raw)
    try:
        for failed in started:
            if isinstance(failed, BaseException):
                raise failed
        sqlite_one, pg_one, pg_many = replicas[0], replicas[1], replicas[2:]
        cells = [Cell("SQLite", [sqlite_one], n) for n in args.sessions]
        cells += [Cell("PostgreSQL", [pg_one], n) for n in args.sessions]
        cells += [Cell("PostgreSQL", pg_many, n) for n in args.sessions if n > 1]
        raws = [Raw("SQLite"), Raw("PostgreSQL")]
        results = Results(cells, raws, _server_settings(admin))
        probe = ServerProbe(admin, server.data_dir)
        await _rounds(args, results, probe, raw_sqlite, raw_postgres)
    finally:
        await asyncio.gather(*(replica.quit() for replica in replicas))
        raw_sqlite.close()
        raw_postgres.close()
        admin.close()
    for where in dict.fromkeys(places):
        on_it = [cell for cell in cells if cell.replicas[0].where == where]
        shape_checks = places.count(where)  # each replica ran one turn before it was ready
        expected = NOTE_CALLS * (sum(cell.turns for cell in on_it) + shape_checks)
        results.notes[on_it[0].label] = (_count_notes(where), expected)
    return results


async def _rounds(
    args: argparse.Namespace,
    results: Results,
    probe: ServerProbe,
    raw_sqlite: RawCommit,
    raw_postgres: RawPostgres,
) -> None:
    progress = Progress()
    if args.warmup > 0:
        for _ in range(RAW_WARMUP):  # until the WAL has wrapped (see bench.turn_bench)
            raw_sqlite.timed()
        for _ in range(RAW_WARMUP // 5):
            raw_postgres.timed()
    jobs: list[tuple[str, Callable[[str], Awaitable[None]]]] = []
    for i, cell in enumerate(results.cells):
        cell_probe = probe if cell.store == "PostgreSQL" else None
        if args.warmup > 0:
            await run_cell(cell, f"warm-{i}", args=args, probe=cell_probe, warmup=True)
        progress.show("warm-up", i + 1, len(results.cells))
        jobs.append((f"{cell.label} x {cell.sessions}", _cell_job(cell, i, args, cell_probe)))
    sqlite_raw, postgres_raw = results.raws
    jobs.append(("raw commit SQLite", functools.partial(_raw_job, sqlite_raw, raw_sqlite, args)))
    jobs.append(
        ("raw commit PostgreSQL", functools.partial(_raw_job, postgres_raw, raw_postgres, args))
    )
    done, total = 0, args.rounds * len(jobs)
    for r in range(args.rounds):
        shift = r * len(jobs) // args.rounds  # rotate, so no cell always runs first
        for label, job in jobs[shift:] + jobs[:shift]:
            progress.show(f"round {r + 1}/{args.rounds}: {label}", done, total)
            await job(f"r{r}")
            done += 1
    progress.show(f"{args.rounds} rounds", total, total)


def _cell_job(
    cell: Cell, index: int, args: argparse.Namespace, probe: ServerProbe | None
) -> Callable[[str], Awaitable[None]]:
    async def job(tag: str) -> None:
        await run_cell(cell, f"{tag}-{index}", args=args, probe=probe)

    return job


async def _raw_job(
    raw: Raw, commit: RawCommit | RawPostgres, args: argparse.Namespace, _tag: str
) -> None:
    run_raw(raw, commit, args.duration)  # blocking, on purpose: nothing else runs meanwhile


# -- the report ------------------------------------------------------------------


# -- entry point -----------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.postgres_bench",
        description="Checkpointed steps/s on PostgreSQL (1 and 3 replicas) and SQLite.",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument(
        "--duration", type=float, default=2.0, help="seconds timed per cell a round (default 2)"
    )
    parser.add_argument(
        "--ramp", type=float, default=0.5, help="untimed seconds before each window (0.5)"
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=1.0,
        help="seconds of each cell's warm-up run (1; 0: no warm-up, raw commits' neither)",
    )
    parser.add_argument(
        "--sessions",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 50, 200],
        help="concurrent sessions per cell (default 1,50,200; the replicas run all but 1)",
    )
    parser.add_argument("--replicas", type=int, default=REPLICAS, help="default 3")
    parser.add_argument(
        "--pool-size", type=int, default=POOL_SIZE, help=f"per PostgresStore (default {POOL_SIZE})"
    )
    parser.add_argument("--dir", type=Path, help="folder for the SQLite files (default: /tmp)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.duration <= 0 or args.replicas < 2:
        parser.error("--rounds must be at least 1, --duration above 0, --replicas at least 2")
    if min(args.sessions) < 1 or not any(n > 1 for n in args.sessions):
        parser.error("--sessions: counts of at least 1, one of them above 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; 1 if a turn failed or a row is missing."""
    args = parse_args(argv)
    binaries = find_binaries()
    if binaries is None:
        print("postgres_bench needs PostgreSQL's binaries: apt-get install postgresql")
        return 2
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="postgres_bench-", dir=args.dir))
    server = PostgresServer(binaries, durable=True)
    before = os.getloadavg()[0]
    started = time.monotonic()
    try:
        server.start()
        results = asyncio.run(measure(args, server, folder))
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    load = f"{before:.2f} before, {os.getloadavg()[0]:.2f} after"
    text, ok = report(results, args, folder, time.monotonic() - started, load)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(results), indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
