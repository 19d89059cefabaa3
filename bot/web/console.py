"""The web console: one page, no build step, served at ``/`` beside the API."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

__all__ = ["CONSOLE_PAGE", "console_route"]

CONSOLE_PAGE = Path(__file__).with_name("console.html")

HEADERS = {
    # the page talks to its own origin only, and nothing may frame it
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def console_route(app: web.Application) -> None:
    """Serve the console at ``/``."""
    page = CONSOLE_PAGE.read_bytes()  # once, as the app is built: no handler reads the disk

    async def console(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8", headers=HEADERS)

    app.router.add_get("/", console)
