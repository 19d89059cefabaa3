"""The figures of `bench.postgres_bench`: what each cell and raw commit measured, and the report.

Kept apart from the running of the cells, so that each module owns one thing:
this one turns samples into the table, the ratios and the JSON a program reads.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.step_worker import NOTE_CALLS, STEPS_PER_TURN, TOOL_CALLS

if TYPE_CHECKING:
    from bench.postgres_bench import Replica

__all__ = ["Cell", "Raw", "Results", "as_json", "percentile", "ratio", "report"]


@dataclass
class Cell:
    """One store, replica count and session count, and what every round measured."""

    store: str
    """``SQLite`` or ``PostgreSQL``."""
    replicas: list[Replica]
    sessions: int
    rates: list[float] = field(default_factory=list)
    """Steps per second, one per round."""
    p50s: list[float] = field(default_factory=list)
    """Each round's median step, in seconds."""
    latencies: list[float] = field(default_factory=list)
    """Every step timed in every round, in seconds."""
    cores: list[float] = field(default_factory=list)
    """CPU cores the cell's replica processes used in the window, one per round."""
    server_cores: list[float] = field(default_factory=list)
    """CPU cores the PostgreSQL server's processes used in the window, one per round."""
    machine_cores: list[float] = field(default_factory=list)
    """CPU cores the whole machine was busy in the window (from /proc/stat), one per round."""
    wal_per_step: list[float] = field(default_factory=list)
    turns: int = 0
    """Turns completed in every run of the cell, warm-up included."""
    failures: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """What the report calls the cell."""
        if self.store == "SQLite":
            return "SQLite"
        count = len(self.replicas)
        return f"PostgreSQL {count} replica{'s' if count > 1 else ''}"


@dataclass
class Raw:
    """A raw commit's samples: commits/s per round and every commit's seconds."""

    store: str
    rates: list[float] = field(default_factory=list)
    p50s: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


@dataclass
class Results:
    """Everything measured, and how."""

    cells: list[Cell]
    raws: list[Raw]
    server: dict[str, str]
    notes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per store: the rows the local tool wrote, and the rows the turns run should have written."""


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def ratio(tops: Sequence[float], bottoms: Sequence[float]) -> float:
    """The median over rounds of top / bottom, each pair measured in one round."""
    pairs = [top / bottom for top, bottom in zip(tops, bottoms, strict=True) if bottom]
    return statistics.median(pairs) if pairs else float("nan")


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    if not values:
        return (float("nan"),) * 3
    return min(values), statistics.median(values), max(values)


def _row(label: str, sessions: int, rates: Sequence[float], latencies: Sequence[float]) -> str:
    low, mid, high = _spread(rates)
    p50, p99 = percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3
    return f"  {label:<22}{sessions:>6}{low:>9,.0f}{mid:>9,.0f}{high:>9,.0f}{p50:>7.2f}{p99:>7.2f}"


def _median(values: Sequence[float], fmt: str) -> str:
    return format(statistics.median(values), fmt) if values else "-"


def _times(value: float) -> str:
    return f"{value:.0f}x" if value >= 100 else f"{value:.2f}x"


def _table(results: Results) -> list[str]:
    raws = {raw.store: raw for raw in results.raws}
    lines = [
        f"  {'':<28}{'steps/s (raw: commits/s)':>27}{'step ms':>12}{'CPU cores':>16}"
        f"{'':>10}{'vs raw':>14}",
        f"  {'cell':<22}{'sess.':>6}{'min':>9}{'median':>9}{'max':>9}{'p50':>7}{'p99':>7}"
        f"{'engine':>7}{'pg':>6}{'all':>6}{'WAL/step':>10}{'steps/s':>9}{'p50':>8}",
    ]
    for raw in results.raws:
        lines.append(_row(f"raw commit {raw.store}", 1, raw.rates, raw.latencies))
    for cell in results.cells:
        raw = raws[cell.store]
        wal = f"{_median(cell.wal_per_step, ',.0f')} B" if cell.wal_per_step else "-"
        lines.append(
            _row(cell.label, cell.sessions, cell.rates, cell.latencies)
            + f"{_median(cell.cores, '.2f'):>7}{_median(cell.server_cores, '.2f'):>6}"
            + f"{_median(cell.machine_cores, '.2f'):>6}{wal:>10}"
            + f"{_times(ratio(cell.rates, raw.rates)):>9}{_times(ratio(cell.p50s, raw.p50s)):>8}"
        )
    return lines


def _ratios(results: Results, sessions: Sequence[int]) -> list[str]:
    def find(label: str, n: int) -> Cell | None:
        return next((c for c in results.cells if c.label == label and c.sessions == n), None)

    one, many = "PostgreSQL 1 replica", f"PostgreSQL {len(results.cells[-1].replicas)} replicas"
    pairs = [(f"{one} / SQLite", one, "SQLite"), (f"{many} / SQLite", many, "SQLite")]
    pairs.append((f"{many.removeprefix('PostgreSQL ')} / 1 replica", many, one))
    lines = []
    for what, attribute in (("steps/s", "rates"), ("p50 step", "p50s")):
        lines.append(f"  {what + ', ratio of':<38}" + "".join(f"{n:>9}" for n in sessions))
        for title, top, bottom in pairs:
            cells = []
            for n in sessions:
                a, b = find(top, n), find(bottom, n)
                value = ratio(getattr(a, attribute), getattr(b, attribute)) if a and b else None
                cells.append(f"{value:>8.2f}x" if value is not None else f"{'-':>9}")
            lines.append(f"    {title:<36}" + "".join(cells))
    return lines


def report(
    results: Results, args: argparse.Namespace, folder: Path, seconds: float, load: str
) -> tuple[str, bool]:
    """The table and the ratios; and whether every turn completed and wrote its rows."""
    s = results.server
    turns = sum(cell.turns for cell in results.cells)
    failures = [failure for cell in results.cells for failure in cell.failures]
    rows_ok = all(found == expected for found, expected in results.notes.values())
    replicas = len(results.cells[-1].replicas)
    lines = [
        f"postgres_bench: a turn = {TOOL_CALLS} tool calls ({TOOL_CALLS - NOTE_CALLS} remote, "
        f"{NOTE_CALLS} local writing through ctx.store)",
        f"  = {STEPS_PER_TURN} checkpointed steps ({TOOL_CALLS + 1} model + {TOOL_CALLS} tool),"
        " a fresh session per turn",
        f"  {args.rounds} round{'s' if args.rounds > 1 else ''}"
        f"{f' after a {args.warmup:g} s warm-up of each cell' if args.warmup > 0 else ''}, "
        "cells and raw commits interleaved (order rotated);",
        f"    each cell timed for {args.duration:g} s after a {args.ramp:g} s ramp",
        "  every replica a child process: an AgentRuntime on its own store;",
        f"    {replicas} replicas share one database, sessions split evenly;",
        f"    PostgresStore pool: {args.pool_size} connections (and threads) per replica;"
        " SQLite: one connection thread",
        f"  PostgreSQL {s['server_version']} on 127.0.0.1 over TCP, its default durability:",
        f"    fsync={s['fsync']} synchronous_commit={s['synchronous_commit']} "
        f"full_page_writes={s['full_page_writes']} wal_sync_method={s['wal_sync_method']}",
        f"    commit_delay={s['commit_delay']} shared_buffers={s['shared_buffers']} "
        f"max_connections={s['max_connections']}",
        f"  SQLite {sqlite3.sqlite_version}: WAL, synchronous=FULL; files in {folder}",
        f"  Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load}, "
        f"{seconds:.0f} s in all",
        "",
        *_table(results),
        "    CPU cores in the window: engine, the replica processes; pg, the server's processes;",
        "    all, the whole machine busy (/proc/stat: not idle, not waiting on I/O)",
        "    WAL/step: bytes of PostgreSQL WAL per step, the turn's opening and lease included",
        "    vs raw: over the same store's raw commit (BEGIN; 2 x 1 KB INSERT; COMMIT; one",
        "    connection, serial, in the bench process)",
        "",
        *_ratios(results, args.sessions),
        "  (each the median over rounds of the ratio within one round)",
        "",
        f"checks: {turns:,} turns completed, {len(failures)} failed; rows the local tool wrote,"
        f" {NOTE_CALLS} a turn:",
        "  "
        + ", ".join(
            f"{store} {found:,}{' = ' if found == expected else ' != '}{expected:,}"
            for store, (found, expected) in results.notes.items()
        ),
        *(f"  failed: {failure}" for failure in failures[:5]),
    ]
    return "\n".join(lines), not failures and rows_ok


def as_json(results: Results) -> dict[str, Any]:
    """The figures, for a program (the smoke test) to read."""
    cells = [
        {
            "label": cell.label,
            "sessions": cell.sessions,
            "replicas": len(cell.replicas),
            "rates": cell.rates,
            "p50": percentile(cell.latencies, 50),
            "p99": percentile(cell.latencies, 99),
            "steps_timed": len(cell.latencies),
            "turns": cell.turns,
            "failures": cell.failures,
        }
        for cell in results.cells
    ]
    raws = [{"store": raw.store, "rates": raw.rates} for raw in results.raws]
    return {"cells": cells, "raws": raws, "notes": results.notes, "server": results.server}
