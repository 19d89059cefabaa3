"""The HTTP face of the Slack app: ``POST /slack/events`` and ``GET /healthz``.

The signature is checked here before the body is parsed, so a forged request is
refused whatever its body, and a signed body that is not what Slack sends gets a
400 (Bolt itself would answer 500 and log a traceback).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.messages import NO_POLICIES
from bot.policies import PolicyBook
from bot.slack.admin import home_view, run_policy_command
from bot.slack.blocks import APPROVE, DENY
from bot.slack.channel import SlackChannel
from bot.slack.envelope import MalformedBody, check_body

__all__ = ["POLICY_COMMAND", "bolt_app", "web_app"]

POLICY_COMMAND = "/agent-policy"

logger = logging.getLogger("bot.slack")


def bolt_app(channel: SlackChannel, client: AsyncWebClient, signing_secret: str) -> AsyncApp:
    """The Bolt app: every subscribed event type has a listener (an unhandled one is retried)."""
    bolt = AsyncApp(client=client, signing_secret=signing_secret)

    async def on_message_event(body: dict[str, Any]) -> None:
        channel.on_event(body)  # returns at once: the turn runs in a task of the channel's

    async def on_decision(ack: Any, body: dict[str, Any]) -> None:
        await ack()  # at once: the decision is settled in a task of the channel's
        channel.on_decision(body)

    async def on_policy_command(ack: Any, respond: Any, body: dict[str, Any]) -> None:
        book = channel.policies
        if book is None:
            await ack(text=NO_POLICIES)
            return
        await ack()  # at once: the answer (users.info, the database) comes by response_url
        answering = run_policy_command(
            client,
            book,
            user=str(body.get("user_id") or ""),  # signed by Slack: who typed it, and where
            channel=str(body.get("channel_id") or ""),
            text=str(body.get("text") or ""),
        )
        channel.spawn(_respond(respond, answering), name="answer /agent-policy")

    async def on_home_opened(event: dict[str, Any]) -> None:
        book, user = channel.policies, event.get("user")
        if book is None or event.get("tab") != "home" or not isinstance(user, str):
            return
        channel.spawn(_publish_home(client, book, user), name=f"home {user}")

    bolt.action(APPROVE)(on_decision)
    bolt.action(DENY)(on_decision)
    bolt.event("app_mention")(on_message_event)
    bolt.event("message")(on_message_event)
    bolt.event("app_home_opened")(on_home_opened)
    bolt.command(POLICY_COMMAND)(on_policy_command)
    return bolt


async def _respond(respond: Any, answering: Awaitable[str]) -> None:
    try:
        await respond(text=await answering, response_type="ephemeral")
    except Exception:  # the command's answer only: the bot goes on
        logger.exception("could not answer /agent-policy")


async def _publish_home(client: AsyncWebClient, book: PolicyBook, user: str) -> None:
    try:
        await client.views_publish(user_id=user, view=await home_view(client, book, user))
    except SlackApiError as exc:
        logger.warning("the Home tab of %s was not published: %s", user, exc.response.get("error"))


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
