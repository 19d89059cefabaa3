"""``GET /healthz``: whether this process can do its work, asked by a load balancer or a platform.

Every mode serves it on ``PORT``: HTTP mode beside ``/slack/events``, Socket Mode
(where nothing else comes in over HTTP) on its own, the console beside the API.
It answers 200 ``ok`` only while the store answers a read, and 503 otherwise: a
replica whose database is gone, closed or too busy to answer is taken out of
rotation (or restarted) instead of being handed events it would fail.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from agent import SessionKey, SessionStore

__all__ = ["HEALTH_DEADLINE_SECONDS", "add_health_check"]

logger = logging.getLogger("bot.web")

HEALTH_DEADLINE_SECONDS = 2.0
"""How long the check waits for the store; well inside a platform's own timeout (5 s and up)."""

_PROBE = SessionKey("healthz", "healthz")
"""A session nobody writes: reading it loads nothing and creates nothing."""


def add_health_check(
    app: web.Application, store: SessionStore, *, deadline: float = HEALTH_DEADLINE_SECONDS
) -> None:
    """Serve ``GET /healthz`` on ``app``: 200 while ``store`` answers a read, else 503.

    The read is the store's cheapest (`SessionStore.has_session`), since the
    check is asked every few seconds, and one read at most is in flight: a read
    still waiting when its ask gave up is the one the next ask waits for, so a
    stalled database is not handed a new read at every ask. The log says when the
    answer changes, not at every ask, and the 503's body names no detail of the store.

    Args:
        app: The application to add the route to (its cleanup cancels a pending read).
        store: The store the process works on.
        deadline: Seconds the store gets to answer before the check says 503.
    """
    check = _StoreCheck(store, deadline)

    async def healthz(request: web.Request) -> web.Response:
        if await check.is_healthy():
            return web.Response(text="ok")
        return web.Response(status=503, text="unavailable: the store does not answer")

    async def cancel_read(app: web.Application) -> None:
        check.cancel()

    app.router.add_get("/healthz", healthz)
    app.on_cleanup.append(cancel_read)


class _StoreCheck:
    """Whether the store answers now; one read in flight at most."""

    def __init__(self, store: SessionStore, deadline: float) -> None:
        self._store = store
        self._deadline = deadline
        self._read: asyncio.Task[bool] | None = None
        self._healthy = True

    async def is_healthy(self) -> bool:
        """Ask the store (or wait again for the read still in flight), and log a change."""
        problem = await self._problem()
        if (problem is None) != self._healthy:
            self._healthy = problem is None
            if problem is None:
                logger.info("GET /healthz answers 200 again: the store answers")
            else:
                logger.warning("GET /healthz answers 503 until the store answers: %s", problem)
        return problem is None

    def cancel(self) -> None:
        """Stop waiting for the read in flight, if any (the server is shutting down)."""
        if self._read is not None:
            self._read.cancel()

    async def _problem(self) -> str | None:
        if self._read is None or self._read.done():
            self._read = asyncio.create_task(self._store.has_session(_PROBE), name="healthz")
            self._read.add_done_callback(_retrieved)
        try:
            async with asyncio.timeout(self._deadline):
                # shielded: giving up on this ask leaves the read for the next one
                await asyncio.shield(self._read)
        except TimeoutError:
            return f"no answer within {self._deadline:g} s"
        except Exception as exc:  # a StoreError, or whatever else a broken store raises
            return f"{type(exc).__name__}: {exc}"
        return None


def _retrieved(read: asyncio.Task[bool]) -> None:
    # the ask that waited for it saw its error; a read nobody waited for fails quietly
    if not read.cancelled():
        read.exception()
