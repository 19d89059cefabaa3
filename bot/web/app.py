"""The web application: the console at ``/``, the API under ``/api``, ``/healthz``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from agent import ConfigError, SessionStore
from bot.web.api.routes import api_app
from bot.web.api.surface import Api
from bot.web.console import console_route
from bot.web.health import add_health_check

__all__ = ["listening", "mount_web", "web_application"]


def mount_web(app: web.Application, api: Api) -> None:
    """Add the console and the API to ``app`` (the Slack app's, or a new one)."""
    console_route(app)
    app.add_subapp("/api", api_app(api))


def web_application(api: Api | None, store: SessionStore) -> web.Application:
    """A stand-alone application: ``/healthz`` on ``store``, and the console and ``api``.

    With no ``api`` (Socket Mode without ``API_TOKENS``) it serves the health check alone.
    """
    app = web.Application()
    if api is not None:
        mount_web(app, api)
    add_health_check(app, store)
    return app


@contextlib.asynccontextmanager
async def listening(app: web.Application, host: str, port: int) -> AsyncIterator[None]:
    """Serve ``app`` on ``host:port`` while the block runs.

    Raises:
        ConfigError: The port is taken (or the host is not this machine's).
    """
    # a slow client must not hold a stop past Slack's patience (and the 10 s we promise)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({exc.strerror}); set PORT to a free port"
            ) from None
        yield
    finally:
        await runner.cleanup()
