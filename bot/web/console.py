"""The web console: one page, no build step, served at ``/`` beside the API.

The page, its script, its style, the favicon and the two vendored Markdown libraries
(``static/vendor/README.md``) all come from this server, read once as the app is
built. Its Content-Security-Policy allows nothing else: no inline script or style,
no eval, no other origin, and HTML reaches the DOM only through DOMPurify's Trusted
Types policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

__all__ = ["ASSETS", "CONSOLE_PAGE", "CONTENT_SECURITY_POLICY", "console_route"]

CONSOLE_PAGE = Path(__file__).with_name("console.html")
STATIC = Path(__file__).with_name("static")

ASSETS = {
    "/static/console.css": ("console.css", "text/css"),
    "/static/console.js": ("console.js", "text/javascript"),
    "/static/markdown.js": ("markdown.js", "text/javascript"),
    "/static/vendor/marked.umd.js": ("vendor/marked.umd.js", "text/javascript"),
    "/static/vendor/purify.min.js": ("vendor/purify.min.js", "text/javascript"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}
"""Each file the page loads: its path, its file under ``static/``, its content type."""

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",  # the favicon; a reply's images are links, never loaded
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",  # the page's forms are read by its script, never submitted
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
        "trusted-types dompurify",
    ]
)

HEADERS = {
    # the page talks to its own origin only, and nothing may frame it
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
ASSET_HEADERS = {
    # an SVG opened by itself is a document: it may run nothing either
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def console_route(app: web.Application) -> None:
    """Serve the console at ``/``, its files under ``/static/``, and ``/favicon.svg``."""
    page = CONSOLE_PAGE.read_bytes()  # once, as the app is built: no handler reads the disk

    async def console(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8", headers=HEADERS)

    app.router.add_get("/", console)
    for path, (name, content_type) in ASSETS.items():
        app.router.add_get(path, _asset((STATIC / name).read_bytes(), content_type))


def _asset(body: bytes, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    # no-cache asks again on each load: the tag lets a phone skip the download
    etag = f'"{hashlib.sha256(body).hexdigest()[:20]}"'
    headers = {**ASSET_HEADERS, "ETag": etag}
    charset = None if content_type.startswith("image/") else "utf-8"

    async def asset(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=body, content_type=content_type, charset=charset, headers=headers)

    return asset
