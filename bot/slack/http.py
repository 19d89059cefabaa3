"""The HTTP face of the Slack app: ``POST /slack/events`` (`bot.serve` adds ``/healthz``).

Installed through OAuth (`bot.slack.oauth`), it also serves ``GET /slack/install``
and ``GET /slack/oauth_redirect``, which Bolt's OAuth flow answers: they are a
browser's, not Slack's, so they carry no signature.

The signature is checked here, over the body's bytes, before the body is read
as text or parsed, so a forged request is refused whatever its body (401), and
a signed body that is not what Slack sends gets a 400 that says what is wrong
(Bolt itself would answer 500 and log a traceback). What Slack sends and no
listener handles is acknowledged by the Bolt app (see `bot.slack.app`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Mapping

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp, AsyncBoltContext, AsyncBoltRequest
from slack_bolt.request.async_internals import build_async_context

from bot.slack.envelope import MalformedBody, check_body, command_fields

__all__ = ["web_app"]

logger = logging.getLogger("bot.slack")

STALE_AFTER_SECONDS = 5 * 60
"""Slack's replay window: an older signed request is refused."""


def web_app(bolt: AsyncApp, signing_secret: str) -> web.Application:
    """An aiohttp application serving ``bolt`` on ``/slack/events``."""
    secret = signing_secret.encode()

    async def slack_events(request: web.Request) -> web.Response:
        raw = await request.read()
        refused = _unsigned(secret, raw, request.headers)
        if refused is not None:
            return web.json_response({"error": f"invalid signature: {refused}"}, status=401)
        try:
            body = raw.decode("utf-8")
            check_body(body, request.content_type)
        except UnicodeDecodeError:
            return _malformed("the body is not UTF-8")
        except MalformedBody as exc:
            return _malformed(str(exc))
        bolt_request = AsyncBoltRequest(
            body=body, query=request.query_string, headers=dict(request.headers)
        )
        command = command_fields(body, request.content_type)
        if command is not None:
            # Bolt read it by its own rule, which takes a command saying "payload" for a
            # click, as {}. It still verifies the signature over the raw body, as it is.
            bolt_request.body = command
            bolt_request.context = build_async_context(AsyncBoltContext({}), command)
        return await to_aiohttp_response(await bolt.async_dispatch(bolt_request))

    app = web.Application()
    app.router.add_post("/slack/events", slack_events)
    flow = bolt.oauth_flow
    if flow is not None:  # many workspaces: the install page, and Slack's redirect back

        async def install(request: web.Request) -> web.Response:
            bolt_request = await to_bolt_request(request)
            return await to_aiohttp_response(await flow.handle_installation(bolt_request))

        async def oauth_redirect(request: web.Request) -> web.Response:
            bolt_request = await to_bolt_request(request)
            return await to_aiohttp_response(await flow.handle_callback(bolt_request))

        app.router.add_get(flow.install_path, install)
        app.router.add_get(flow.redirect_uri_path, oauth_redirect)
    return app


def _malformed(reason: str) -> web.Response:
    logger.warning("a signed request with a body Slack does not send was refused: %s", reason)
    return web.json_response({"error": f"malformed body: {reason}"}, status=400)


def _unsigned(secret: bytes, body: bytes, headers: Mapping[str, str]) -> str | None:
    """Why the request is not signed by Slack with ``secret``, or None if it is.

    As docs.slack.dev/authentication/verifying-requests-from-slack says: the
    signature is ``v0=`` and the hex HMAC-SHA256 of ``v0:<timestamp>:<body>``,
    the timestamp a whole number of seconds within five minutes of now.
    """
    stamp = headers.get("X-Slack-Request-Timestamp")
    signature = headers.get("X-Slack-Signature")
    if stamp is None or signature is None:
        return "X-Slack-Request-Timestamp and X-Slack-Signature are required"
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 18):
        return "X-Slack-Request-Timestamp is not a whole number of seconds"
    if abs(time.time() - int(stamp)) > STALE_AFTER_SECONDS:
        return "the request is stale"
    expected = (
        "v0=" + hmac.new(secret, b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    )
    if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
        return "the signature does not match"
    return None
