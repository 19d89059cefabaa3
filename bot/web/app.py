"""The web application: the console at ``/``, the API under ``/api``, ``/healthz``."""

from __future__ import annotations

from aiohttp import web

from bot.web.api import Api, api_app
from bot.web.console import console_route

__all__ = ["mount_web", "web_application"]


def mount_web(app: web.Application, api: Api) -> None:
    """Add the console and the API to ``app`` (the Slack app's, or a new one)."""
    console_route(app)
    app.add_subapp("/api", api_app(api))


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def web_application(api: Api) -> web.Application:
    """A stand-alone application serving the console, the API and ``/healthz``."""
    app = web.Application()
    mount_web(app, api)
    app.router.add_get("/healthz", _healthz)
    return app
