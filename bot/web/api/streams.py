"""Event streams of the API: a session's log followed live, and one turn's events to its end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from agent import AgentSession, LogEntry, LogGap, SessionKey, TurnRecord, is_terminal
from bot.web.api.surface import Api
from bot.web.sse import EventStream

__all__ = ["client_left", "following", "record_of", "send_turn", "streaming"]

logger = logging.getLogger("bot.web")


async def send_turn(
    api: Api,
    stream: EventStream,
    request: web.Request,
    session: AgentSession,
    turn_id: str,
    after: int,
) -> None:
    """Send the turn's events from the log, after position ``after``, until it ends or waits."""
    ended_quietly = False
    async for item in following(api, session.key, after):
        if item is None:
            if client_left(request):
                return
            # a turn seen ended at two quiet moments in a row will send nothing more
            if ended_quietly and await _send_ending(stream, session, turn_id):
                return
            ended_quietly = await _has_ended(session, turn_id)
            await stream.keep_alive()
        elif isinstance(item, LogEntry) and item.event.turn_id == turn_id:
            await stream.send(item)
            if is_terminal(item.event):
                return


async def record_of(session: AgentSession, turn_id: str) -> TurnRecord | None:
    """The session's record of ``turn_id`` (None for a turn it does not have, or archived)."""
    return next((t for t in await session.turns() if t.turn_id == turn_id), None)


async def _has_ended(session: AgentSession, turn_id: str) -> bool:
    record = await record_of(session, turn_id)
    return record is None or not record.is_unfinished


async def _send_ending(stream: EventStream, session: AgentSession, turn_id: str) -> bool:
    """Send how the turn ended (or was suspended), when its last event never came; False if it runs.

    It can happen when the log dropped that event after the store refused it again and again.
    """
    if not await _has_ended(session, turn_id):
        return False
    last = None
    async for event in session.stream(turn_id, replay=True):
        last = event
    if last is not None:
        await stream.send(last)
    return True


@contextlib.asynccontextmanager
async def streaming(stream: EventStream, request: web.Request) -> AsyncIterator[None]:
    """End the stream whatever happens once it started: a JSON error can no longer be sent."""
    try:
        yield
    except ConnectionError:
        return  # the client left; it comes back with its Last-Event-ID
    except Exception:
        logger.exception("%s %s failed mid-stream; ending it", request.method, request.path)
    with contextlib.suppress(ConnectionError):
        await stream.close()


async def following(
    api: Api, key: SessionKey, after: int
) -> AsyncIterator[LogEntry | LogGap | None]:
    """``api.log.follow(key, after=after)``, ended at once when the server stops."""
    entries = aiter(api.log.follow(key, after=after))
    stopping = asyncio.ensure_future(api.stopping.wait())
    upcoming: asyncio.Future[LogEntry | LogGap | None] | None = None
    try:
        while True:
            upcoming = asyncio.ensure_future(anext(entries))
            await asyncio.wait((upcoming, stopping), return_when=asyncio.FIRST_COMPLETED)
            if not upcoming.done():
                return
            try:
                item = upcoming.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        # the follower is let go first: a generator cannot be closed while it runs
        waits = [w for w in (upcoming, stopping) if w is not None and not w.done()]
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        closing = getattr(entries, "aclose", None)
        if closing is not None:
            await closing()


def client_left(request: web.Request) -> bool:
    """Whether the client of ``request`` has gone (its connection is closed or closing)."""
    transport = request.transport
    return transport is None or transport.is_closing()
