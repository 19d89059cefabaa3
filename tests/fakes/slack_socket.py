"""Slack's Socket Mode end, for the fake Web API: a websocket an app connects out to.

``apps.connections.open`` (called with the app-level token) hands out a one-time
``ws://`` URL on the fake's own server. The app connects, is greeted with
``hello``, and from then on receives envelopes the test pushes (``events_api``,
``interactive``), each of which it must acknowledge with ``{"envelope_id": ...}``
within three seconds, as Slack requires. Envelope shapes follow
docs.slack.dev/apis/events-api/using-socket-mode.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from aiohttp import WSMsgType, web

__all__ = ["SocketMode"]

Json = dict[str, Any]


class SocketMode:
    """The Socket Mode connections of one fake workspace."""

    def __init__(self, app_id: str) -> None:
        self._app_id = app_id
        self._tickets: set[str] = set()
        self._count = itertools.count(1)
        self._open: list[web.WebSocketResponse] = []
        self.acks: dict[str, Json] = {}
        """Each envelope's acknowledgement, by envelope id."""
        self.connections = 0
        """How many connections were ever made."""
        self._changed = asyncio.Event()

    def route(self, app: web.Application) -> None:
        app.router.add_get("/socket-mode/{ticket}", self._on_connect)

    def ticket(self) -> str:
        """The path of a new one-time connection URL."""
        ticket = f"ticket-{next(self._count)}"
        self._tickets.add(ticket)
        return f"/socket-mode/{ticket}"

    async def push(self, kind: str, payload: Json, *, retry_attempt: int = 0) -> str:
        """Send an envelope down the newest open connection; returns its id."""
        socket = await self._connection()
        envelope_id = f"env-{next(self._count)}"
        await socket.send_json(
            {
                "envelope_id": envelope_id,
                "type": kind,
                "payload": payload,
                "accepts_response_payload": kind == "interactive",
                "retry_attempt": retry_attempt,
                "retry_reason": "timeout" if retry_attempt else "",
            }
        )
        return envelope_id

    async def send(self, envelope: Json) -> str:
        """Send a recorded envelope as it is down the newest open connection; returns its id."""
        socket = await self._connection()
        await socket.send_json(envelope)
        return str(envelope["envelope_id"])

    async def ack_of(self, envelope_id: str, *, within: float = 3.0) -> Json:
        """The acknowledgement of an envelope; Slack gives up (and retries) after 3 s."""
        deadline = time.monotonic() + within
        while envelope_id not in self.acks:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"envelope {envelope_id} was not acknowledged in {within} s")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                continue
        return self.acks[envelope_id]

    async def close(self) -> None:
        for socket in list(self._open):
            await socket.close()

    async def _connection(self, within: float = 10.0) -> web.WebSocketResponse:
        deadline = time.monotonic() + within
        while not self._open:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no app connected in Socket Mode")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                continue
        return self._open[-1]

    async def _on_connect(self, request: web.Request) -> web.StreamResponse:
        ticket = request.match_info["ticket"]
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid or used ticket")
        self._tickets.discard(ticket)
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        await socket.send_json(
            {
                "type": "hello",
                "num_connections": len(self._open) + 1,
                "debug_info": {"host": "fake-slack", "approximate_connection_time": 3600},
                "connection_info": {"app_id": self._app_id},
            }
        )
        self._open.append(socket)
        self.connections += 1
        self._changed.set()
        try:
            async for message in socket:
                if message.type != WSMsgType.TEXT:
                    continue
                body = json.loads(message.data)
                if isinstance(body, dict) and isinstance(body.get("envelope_id"), str):
                    self.acks[body["envelope_id"]] = body
                    self._changed.set()
        finally:
            self._open.remove(socket)
            self._changed.set()
        return socket
