"""``python -m bench.postgres_bench`` in a tiny configuration, so that it cannot rot.

One round of a fifth of a second a cell, at 1 and 3 sessions: every cell must
complete its turns, report a positive rate and time its steps, and every turn's
local tool must have written its rows exactly once. No figure is judged.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def test_a_tiny_run_completes_every_cell_with_its_rows_written_once(
    postgres_binaries, tmp_path
):
    figures = tmp_path / "figures.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.postgres_bench",
        "--rounds", "1", "--duration", "0.2", "--ramp", "0", "--warmup", "0",
        "--sessions", "1,3", "--json", str(figures),
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)

    assert proc.returncode == 0, out.decode() + err.decode()
    result = json.loads(figures.read_text())
    cells = {(cell["label"], cell["sessions"]): cell for cell in result["cells"]}
    assert sorted(cells) == [
        ("PostgreSQL 1 replica", 1),
        ("PostgreSQL 1 replica", 3),
        ("PostgreSQL 3 replicas", 3),
        ("SQLite", 1),
        ("SQLite", 3),
    ]
    for cell in cells.values():
        assert cell["failures"] == []
        assert cell["turns"] > 0
        assert cell["steps_timed"] > 0
        assert all(rate > 0 for rate in cell["rates"])
        assert 0 < cell["p50"] <= cell["p99"]
    assert [raw["store"] for raw in result["raws"]] == ["SQLite", "PostgreSQL"]
    assert all(rate > 0 for raw in result["raws"] for rate in raw["rates"])
    for store, (found, expected) in result["notes"].items():
        assert found == expected > 0, store
    assert result["server"]["fsync"] == "on"
    assert result["server"]["synchronous_commit"] == "on"
    assert "PostgreSQL 3 replicas" in out.decode()
