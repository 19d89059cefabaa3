"""The composition root takes down what it built, however far the start got.

Each test lets a late step of the start fail for real (a port that is taken, a
token Slack refuses) after the store was opened and the runtime started, and
then checks from the outside that nothing was left open: the store's
connection thread is gone and SQLite, closed cleanly, removed its WAL file.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from agent import ConfigError, RuntimeClosedError, SessionKey, StoreError
from bot.engine import Engine, open_engine
from bot.serve import serve_local, serve_slack
from bot.settings import Settings
from tests.fakes.slack_api import FakeSlack

WAIT = 5.0


def settings_for(tmp_path: Path, **given: Any) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path}/bot.db", _env_file=None, **given)


async def nothing_left_open(tmp_path: Path, threads_before: set[threading.Thread]) -> None:
    """Wait (with a deadline) for every thread the start made to end; then check the database."""
    deadline = time.monotonic() + WAIT
    # a thread's end offers nothing to await: it is polled
    while set(threading.enumerate()) - threads_before and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    assert set(threading.enumerate()) - threads_before == set()
    assert (tmp_path / "bot.db").exists()  # the store was opened...
    assert not (tmp_path / "bot.db-wal").exists()  # ...and closed: SQLite removes its WAL then


async def test_an_error_in_the_engine_block_closes_the_runtime_and_the_store(tmp_path: Path):
    threads_before = set(threading.enumerate())
    opened: list[Engine] = []

    async def start_then_fail() -> None:
        async with open_engine(settings_for(tmp_path)) as engine:
            opened.append(engine)
            await engine.runtime.start()
            raise RuntimeError("a later step of the start failed")

    with pytest.raises(RuntimeError, match="later step"):
        await start_then_fail()

    [engine] = opened
    assert engine.runtime.is_closed
    with pytest.raises(RuntimeClosedError):
        engine.runtime.check_open()
    with pytest.raises(StoreError, match="closed"):
        await engine.store.load(SessionKey("bot", "terminal:local"))
    await nothing_left_open(tmp_path, threads_before)


async def test_a_console_whose_port_is_taken_closes_the_store_it_opened(tmp_path: Path):
    threads_before = set(threading.enumerate())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = settings_for(tmp_path, port=taken.getsockname()[1])

        with pytest.raises(ConfigError, match="cannot listen"):
            await serve_local(settings)

    await nothing_left_open(tmp_path, threads_before)


async def test_a_refused_app_token_closes_what_the_slack_start_opened(tmp_path: Path):
    async with FakeSlack() as slack:
        threads_before = set(threading.enumerate())
        settings = settings_for(
            tmp_path,
            slack_bot_token=SecretStr(slack.token),
            slack_app_token=SecretStr("xapp-a-token-slack-does-not-know"),
            slack_api_url=slack.base_url,
        )

        # the engine, the channel and the runtime are up when Socket Mode is refused
        with pytest.raises(ConfigError, match="Slack refused SLACK_APP_TOKEN"):
            await serve_slack(settings)

        await nothing_left_open(tmp_path, threads_before)
        assert [c.method for c in slack.calls] == ["auth.test", "apps.connections.open"]
