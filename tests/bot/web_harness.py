"""The API served over real HTTP on loopback, and a client that reads its JSON and its SSE."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from pydantic import BaseModel

from agent import (
    Agent,
    AgentRuntime,
    EventLog,
    Model,
    SQLiteStore,
    Tool,
    resolve_policy,
)
from agent.core.hitl import AuthorizeAnswer
from bot.offline import DEMO_MODEL_NAME, LOCAL_TOOLS, offline_model
from bot.web.api.surface import SOURCE, Api
from bot.web.app import web_application
from bot.web.auth import ApiAuth

ANA = "ana-token-0123456789abcdef01"
BOB = "bob-token-0123456789abcdef01"
TOKENS = {ANA: "ana", BOB: "bob"}


@dataclass
class SseEvent:
    id: str | None
    event: str
    data: dict[str, Any]


class SseReader:
    """Reads one SSE response event by event, as a browser's EventSource would."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.comments: list[str] = []

    async def next(self, within: float = 10.0) -> SseEvent:
        return await asyncio.wait_for(self._next(), within)

    async def _next(self) -> SseEvent:
        fields: dict[str, list[str]] = {}
        while True:
            raw = await self.response.content.readline()
            if not raw:
                raise EOFError("the stream ended")
            line = raw.decode().rstrip("\n")
            if not line:
                if "data" in fields:
                    ids = fields.get("id")
                    return SseEvent(
                        id=ids[-1] if ids else None,
                        event=fields.get("event", ["message"])[-1],
                        data=json.loads("\n".join(fields["data"])),
                    )
                fields = {}
                continue
            if line.startswith(":"):
                self.comments.append(line)
                continue
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))

    async def until(self, event_type: str, *, turn_id: str | None = None) -> list[SseEvent]:
        """Events up to and including the first of ``event_type`` (of ``turn_id``)."""
        seen = []
        while True:
            event = await self.next()
            seen.append(event)
            if event.event == event_type and turn_id in (None, event.data.get("turn_id")):
                return seen


@dataclass
class Client:
    base_url: str
    http: aiohttp.ClientSession
    token: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def _headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        headers = dict(self.headers)
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    async def get(self, path: str, **extra: str) -> tuple[int, Any]:
        async with self.http.get(self.base_url + path, headers=self._headers(extra)) as r:
            return r.status, await r.json()

    async def post(
        self, path: str, body: Any = None, *, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        async with self.http.post(
            self.base_url + path,
            json=body if body is not None else {},
            headers=self._headers(headers),
        ) as r:
            return r.status, await r.json()

    @asynccontextmanager
    async def stream(
        self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None
    ) -> AsyncIterator[SseReader]:
        all_headers = self._headers({"Accept": "text/event-stream", **(headers or {})})
        kwargs: dict[str, Any] = {"headers": all_headers}
        if body is not None:
            kwargs["json"] = body
        async with self.http.request(method, self.base_url + path, **kwargs) as response:
            assert response.status == 200, await response.text()
            assert response.content_type == "text/event-stream"
            yield SseReader(response)


@dataclass
class Served:
    base_url: str
    runtime: AgentRuntime
    store: SQLiteStore
    log: EventLog
    http: aiohttp.ClientSession
    api: Api
    runner: web.AppRunner

    def client(self, token: str | None = None) -> Client:
        return Client(self.base_url, self.http, token)


@asynccontextmanager
async def serving(
    folder: Path,
    *,
    model: Model | None = None,
    tools: Sequence[Tool] = LOCAL_TOOLS,
    tokens: dict[str, str] | None = None,
    clock: Callable[[], float] | None = None,
    retention: float = 3600.0,
    authorize_answer: AuthorizeAnswer | None = None,
    store_class: type[SQLiteStore] = SQLiteStore,
    retry_delays: Sequence[float] = (0.01,),
    poll_seconds: float = 0.05,
    output_type: type[BaseModel] | None = None,
) -> AsyncIterator[Served]:
    """The API of an agent (the offline one by default) on SQLite, on a free loopback port."""
    agent = Agent(
        name="bot",
        model=model or offline_model(),
        instructions="You help.",
        tools=list(tools),
        authorize_answer=authorize_answer,
        output_type=output_type,
    )
    store = await store_class.open(folder / "bot.db")
    runtime = AgentRuntime(store, agent)
    # a short poll: a follower notices a client gone, or a turn that ended unseen, quickly
    log = EventLog(
        store,
        retention=retention,
        clock=clock or time.time,
        poll_seconds=poll_seconds,
        retry_delays=retry_delays,
    )
    runtime.add_sink(log)
    api = Api(
        runtime=runtime,
        agent=agent.name,
        log=log,
        auth=ApiAuth(tokens or {}),
        policy=resolve_policy(agent, SOURCE),
        model=DEMO_MODEL_NAME,
        offline=True,
    )
    runner = web.AppRunner(web_application(api, store), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as http:
            yield Served(f"http://127.0.0.1:{port}", runtime, store, log, http, api, runner)
    finally:
        await runner.cleanup()
        await runtime.close()
        await log.close()
        await store.close()
