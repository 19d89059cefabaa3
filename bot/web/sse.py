"""Server-Sent Events over aiohttp: the framing, and a response that notices a client gone."""

from __future__ import annotations

import json
import time

from aiohttp import web

from agent import LogEntry, LogGap, TurnEvent

__all__ = ["KEEP_ALIVE_SECONDS", "EventStream", "parse_last_event_id"]

KEEP_ALIVE_SECONDS = 15.0
RETRY_MILLISECONDS = 1000


def parse_last_event_id(value: str) -> int:
    """The log position a client asks to continue after: ``"17"`` or a delta's ``"17.3"``.

    Raises:
        ValueError: Not a position.
    """
    position, _, delta = value.strip().partition(".")
    if not position.isdigit() or (delta and not delta.isdigit()):
        raise ValueError(value)
    return int(position)


class EventStream:
    """One SSE response: events with their log ids, keep-alives, and the end."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self._response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache, no-transform",
                "X-Accel-Buffering": "no",  # a proxy in front must not hold events back
            }
        )
        self._last_write = time.monotonic()

    async def open(self) -> None:
        """Send the headers, and how soon a client should reconnect."""
        await self._response.prepare(self._request)
        await self._write(f"retry: {RETRY_MILLISECONDS}\n\n")

    async def send(self, item: LogEntry | LogGap | TurnEvent) -> None:
        """Send a logged or live event with its id, a gap notice, or an event with no log id."""
        if isinstance(item, LogGap):
            data = {"after": item.after, "first_kept": item.first_kept}
            await self._write(f"event: gap\ndata: {json.dumps(data)}\n\n")
            return
        event, event_id = (item.event, item.id) if isinstance(item, LogEntry) else (item, None)
        lines = f"id: {event_id}\n" if event_id is not None else ""
        # compact JSON has no line breaks: one data line per event
        await self._write(f"{lines}event: {event.type}\ndata: {event.model_dump_json()}\n\n")

    async def keep_alive(self) -> None:
        """A comment line, if nothing was sent for a while: proxies keep the connection."""
        if time.monotonic() - self._last_write >= KEEP_ALIVE_SECONDS:
            await self._write(": keep-alive\n\n")

    async def close(self) -> web.StreamResponse:
        """End the stream; the response to return from the handler."""
        await self._response.write_eof()
        return self._response

    @property
    def response(self) -> web.StreamResponse:
        """The underlying response."""
        return self._response

    async def _write(self, text: str) -> None:
        await self._response.write(text.encode())
        self._last_write = time.monotonic()
