"""``GET /healthz`` says 200 only while the store answers, on a real server and a real store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import psycopg
import pytest
from aiohttp import web

from agent import MemoryStore, PostgresStore, SessionKey, SessionStore, SQLiteStore, StoreError
from bot.web.health import add_health_check
from tests.fakes.local_server import serve_locally

UNAVAILABLE = (503, "unavailable: the store does not answer")


class AilingStore(MemoryStore):
    """A memory store whose reads fail, or never answer, while told to."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.hanging = False
        self.reads = 0

    async def has_session(self, key: SessionKey) -> bool:
        self.reads += 1
        if self.failing:
            raise StoreError("database is locked")
        if self.hanging:
            await asyncio.Event().wait()
        return await super().has_session(key)


@asynccontextmanager
async def health_served(
    store: SessionStore, deadline: float = 2.0
) -> AsyncIterator[Callable[[], Awaitable[tuple[int, str]]]]:
    """A server with only the health check on ``store``; yields a function that asks it."""
    app = web.Application()
    add_health_check(app, store, deadline=deadline)
    runner, url = await serve_locally(app)
    try:
        async with aiohttp.ClientSession() as http:

            async def ask() -> tuple[int, str]:
                async with http.get(f"{url}/healthz") as response:
                    return response.status, await response.text()

            yield ask
    finally:
        await runner.cleanup()


async def test_healthz_answers_ok_while_the_store_answers(tmp_path: Path):
    store = await SQLiteStore.open(tmp_path / "bot.db")
    try:
        async with health_served(store) as ask:
            assert await ask() == (200, "ok")
        # the check reads and never writes: it made no session
        assert await store.list_sessions("healthz") == []
    finally:
        await store.close()


async def test_healthz_answers_503_once_the_store_is_closed(tmp_path: Path):
    store = await SQLiteStore.open(tmp_path / "bot.db")
    async with health_served(store) as ask:
        assert await ask() == (200, "ok")
        await store.close()

        assert await ask() == UNAVAILABLE


async def test_healthz_answers_503_while_postgresql_does_not_answer_and_200_once_it_does(
    postgres_url: str,
):
    store = await PostgresStore.open(postgres_url)
    try:
        async with health_served(store, deadline=0.2) as ask:
            assert await ask() == (200, "ok")
            # another connection holds the table the read needs, as a long migration would
            async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
                await blocker.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")

                assert [await ask(), await ask()] == [UNAVAILABLE] * 2
            # the blocker's transaction ended with its connection, and the lock with it

            assert await ask() == (200, "ok")
    finally:
        await store.close()


async def test_healthz_answers_503_when_the_store_does_not_answer_in_time():
    store = AilingStore()
    store.hanging = True
    async with health_served(store, deadline=0.05) as ask:
        assert [await ask(), await ask(), await ask()] == [UNAVAILABLE] * 3
        assert store.reads == 1  # each ask waited for the one read still in flight

    store.hanging = False
    async with health_served(store) as ask:
        assert await ask() == (200, "ok")


async def test_healthz_logs_when_its_answer_changes_not_at_every_ask(
    caplog: pytest.LogCaptureFixture,
):
    store = AilingStore()
    caplog.set_level(logging.INFO, logger="bot.web")
    async with health_served(store) as ask:
        assert await ask() == (200, "ok")
        store.failing = True
        assert [await ask(), await ask()] == [UNAVAILABLE] * 2
        store.failing = False
        assert await ask() == (200, "ok")

    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "bot.web"]
    assert said == [
        (
            "WARNING",
            "GET /healthz answers 503 until the store answers: StoreError: database is locked",
        ),
        ("INFO", "GET /healthz answers 200 again: the store answers"),
    ]
