"""Serving a fake's aiohttp app on a free port of 127.0.0.1."""

from __future__ import annotations

from aiohttp import web


async def serve_locally(app: web.Application) -> tuple[web.AppRunner, str]:
    """Start ``app`` on 127.0.0.1 and return its runner and ``http://host:port``.

    Shutdown is short: by then a fake has let every held response go.
    """
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"
