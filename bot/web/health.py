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
    check is asked every few seconds. The log says when the answer changes, not at
    every ask, and the 503's body names no detail of the store.

    Args:
        app: The application to add the route to.
        store: The store the process works on.
        deadline: Seconds the store gets to answer before the check says 503.
    """
    healthy = True

    async def healthz(request: web.Request) -> web.Response:
        nonlocal healthy
        problem = await _store_problem(store, deadline)
        if (problem is None) != healthy:
            healthy = problem is None
            if problem is None:
                logger.info("GET /healthz answers 200 again: the store answers")
            else:
                logger.warning("GET /healthz answers 503 until the store answers: %s", problem)
        if problem is None:
            return web.Response(text="ok")
        return web.Response(status=503, text="unavailable: the store does not answer")

    app.router.add_get("/healthz", healthz)


async def _store_problem(store: SessionStore, deadline: float) -> str | None:
    """Why ``store`` cannot serve now, or None when it answers a read within ``deadline``."""
    try:
        async with asyncio.timeout(deadline):
            await store.has_session(_PROBE)
    except TimeoutError:
        return f"no answer within {deadline:g} s"
    except Exception as exc:  # a StoreError, or whatever else a broken store raises: unhealthy
        return f"{type(exc).__name__}: {exc}"
    return None
