"""``python -m bot`` with Slack credentials, as a real process: it serves, answers, and stops.

The bot runs as a child process on a real port; Slack's Web API is the local fake
(``SLACK_API_URL``); events are posted to it signed as Slack signs them. With no
Anthropic key the offline agent answers, which is still the whole engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from slack_sdk.signature import SignatureVerifier

from tests.fakes.slack_api import FakeSlack

ROOT = Path(__file__).resolve().parents[2]
SECRET = "process-test-signing-secret"
WAIT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    proc: asyncio.subprocess.Process
    port: int
    out: list[str]

    async def line_starting(self, prefix: str) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(WAIT):
            while True:
                for line in self.out:
                    if line.startswith(prefix):
                        return line
                raw = await self.proc.stdout.readline()
                if not raw:
                    raise AssertionError(f"the bot ended without {prefix!r}: {self.out}")
                self.out.append(raw.decode().rstrip("\n"))


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def start_bot(slack: FakeSlack, tmp_path: Path) -> AsyncIterator[Running]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.base_url,
        "PORT": str(port),
        "DATABASE_URL": f"sqlite:///{tmp_path}/bot.db",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        env=env,
        cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    running = Running(proc, port, [])
    try:
        await running.line_starting("Serving Slack events on")
        yield running
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def post_signed(port: int, envelope: dict[str, Any]) -> int:
    body = json.dumps(envelope)
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=stamp, body=body)
    assert signature is not None
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature,
        "Content-Type": "application/json",
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}/slack/events", data=body, headers=headers) as r,
    ):
        return r.status


async def test_the_bot_process_answers_a_mention_and_stops_cleanly_on_sigterm(
    slack: FakeSlack, start_bot: Running
):
    text = "<@U0BOT> the deploy moved to Friday"
    ts = slack.post_user_message(slack.channel_id, text)
    envelope = {
        "type": "event_callback",
        "team_id": slack.team_id,
        "event_id": "Ev1",
        "event": {
            "type": "app_mention",
            "user": slack.user_id,
            "text": text,
            "ts": ts,
            "channel": slack.channel_id,
            "team": slack.team_id,
        },
    }

    assert await post_signed(start_bot.port, envelope) == 200

    [answer] = [m.text for m in await slack.wait_for_replies(slack.channel_id, ts, within=WAIT)]
    assert "notebook now holds 1 note(s)" in answer

    began = time.monotonic()
    start_bot.proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(10):
        code = await start_bot.proc.wait()
    assert code == 0
    assert time.monotonic() - began < 10
    await start_bot.line_starting("Stopping: no new events")
    assert slack.token not in "\n".join(start_bot.out)
