"""The HTTP face of the Slack app: ``POST /slack/events`` and ``GET /healthz``.

The signature is checked here before the body is parsed, so a forged request is
refused whatever its body, and a signed body that is not what Slack sends gets a
400 (Bolt itself would answer 500 and log a traceback).
"""

from __future__ import annotations

import logging

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier

from bot.slack.envelope import MalformedBody, check_body

__all__ = ["web_app"]

logger = logging.getLogger("bot.slack")


def web_app(bolt: AsyncApp, signing_secret: str) -> web.Application:
    """An aiohttp application serving ``bolt`` on ``/slack/events``, and ``/healthz``."""
    verifier = SignatureVerifier(signing_secret)

    async def slack_events(request: web.Request) -> web.Response:
        body = await request.text()
        if not verifier.is_valid_request(body, dict(request.headers)):
            return web.json_response({"error": "invalid signature"}, status=401)
        try:
            check_body(body, request.content_type)
        except MalformedBody as exc:
            logger.warning("a signed request with a body Slack does not send was refused: %s", exc)
            return web.json_response({"error": f"malformed body: {exc}"}, status=400)
        bolt_request = AsyncBoltRequest(
            body=body, query=request.query_string, headers=dict(request.headers)
        )
        return await to_aiohttp_response(await bolt.async_dispatch(bolt_request))

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/slack/events", slack_events)
    app.router.add_get("/healthz", healthz)
    return app
