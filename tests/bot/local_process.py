"""``python -m bot`` with no credentials, as a real process: the console and the API on loopback."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.bot.test_slack_process import ROOT, Running, free_port


class LocalBot(Running):
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def rest(self) -> str:
        """Everything it printed, once it has exited."""
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


async def run_to_exit(folder: Path, port: int, **extra: str) -> tuple[int, str, str]:
    """Run ``python -m bot`` (expected to stop at once); its exit code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        cwd=folder,
        env=local_env(folder, port, **extra),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


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
    bot = LocalBot(proc, port, [])
    try:
        await bot.line_with("Open http://")
        yield bot
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
