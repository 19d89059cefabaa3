"""``python -m bot`` with no credentials, as a real process: the console and the API on loopback."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.bot.test_slack_process import ROOT, WAIT, free_port


@dataclass
class LocalBot:
    proc: asyncio.subprocess.Process
    base_url: str
    out: list[str]

    async def read_until(self, needle: str) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(WAIT):
            while True:
                for line in self.out:
                    if needle in line:
                        return line
                raw = await self.proc.stdout.readline()
                if not raw:
                    raise AssertionError(f"the bot ended without {needle!r}: {self.out}")
                self.out.append(raw.decode().rstrip("\n"))

    async def rest(self) -> str:
        assert self.proc.stdout is not None
        self.out += (await self.proc.stdout.read()).decode().splitlines()
        return "\n".join(self.out)


def local_env(folder: Path, port: int, **extra: str) -> dict[str, str]:
    """The environment of a bot with no credentials, on ``folder``'s database."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_", "API_"))
    }
    return env | {
        "PYTHONPATH": str(ROOT),
        "PORT": str(port),
        "DATABASE_URL": f"sqlite:///{folder}/bot.db",
        **extra,
    }


@asynccontextmanager
async def local_bot(folder: Path, port: int | None = None, **extra: str) -> AsyncIterator[LocalBot]:
    """Start ``python -m bot`` in local mode on ``folder``'s database; killed if left running."""
    port = port or free_port()
    env = local_env(folder, port, **extra)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        cwd=folder,  # no .env of the developer's is read
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    bot = LocalBot(proc, f"http://127.0.0.1:{port}", [])
    try:
        await bot.read_until("Open http://")
        yield bot
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
