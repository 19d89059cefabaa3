"""The Bolt app: which listener answers each event, click and command Slack sends.

Slack hears the acknowledgement when the listener returns. It retries an event
it does not see acknowledged within 3 seconds, and never sends one it saw
acknowledged again: so an event's listener returns once its turn is durably
admitted (milliseconds), and the work (the turn's reply, a decision, a policy
command's answer) runs in a task the Slack channel keeps and drains at shutdown.

A request no listener matches (an event the app is subscribed to but ignores,
a click on another app's button, a shortcut...) is acknowledged too: Bolt would
answer it 404, which Slack counts as a failed delivery and sends again. That is
decided after every listener was asked, wherever it was registered, so no
listener of this app's is ever passed over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import Any

from slack_bolt.async_app import (
    AsyncAck,
    AsyncApp,
    AsyncBoltContext,
    AsyncBoltRequest,
    AsyncRespond,
)
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import Feedback
from bot.policies import PolicyBook
from bot.slack.admin import home_view, run_policy_command
from bot.slack.blocks import APPROVE, DENY
from bot.slack.channel import SlackChannel
from bot.slack.feedback import register_feedback, week_of_feedback
from bot.slack.hatches import register_hatches
from bot.slack.surface import greet_in_messages_tab, register_surface
from bot.slack.workspaces import register_uninstalls
from bot.texts import NO_POLICIES

__all__ = ["POLICY_COMMAND", "bolt_app"]

POLICY_COMMAND = "/agent-policy"

logger = logging.getLogger("bot.slack")


def bolt_app(
    channel: SlackChannel,
    client: AsyncWebClient,
    signing_secret: str,
    *,
    oauth: AsyncOAuthSettings | None = None,
) -> AsyncApp:
    """The Bolt app: the listeners of what the bot does; anything else Slack sends is acked.

    Args:
        channel: Shows the turns.
        client: Slack's Web API: with the bot token for one workspace; with none, for
            many (``oauth``), where each request gets its workspace's.
        signing_secret: What Slack signs requests with.
        oauth: Installs in many workspaces (`bot.slack.oauth`); None, the one of ``client``.
    """
    # process_before_response: Slack hears the ack once the listener returned, so
    # an event is acknowledged only after its turn was durably admitted (a crash
    # in between makes Slack send it again). Every listener returns at once.
    bolt = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        raise_error_for_unhandled_request=True,
        process_before_response=True,
        oauth_settings=oauth,
        installation_store_bot_only=True if oauth is not None else None,
    )
    bolt.error(_on_error)

    async def on_message_event(body: dict[str, Any]) -> None:
        await channel.on_event(body)  # admits the turn; its reply runs in a task of the channel's

    async def on_decision(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()  # at once: the decision is settled in a task of the channel's
        channel.on_decision(body)

    # ``client`` (a listener's argument) is Bolt's for the request: the bot's in the
    # workspace the request came from, which OAuth installs make one of many
    async def on_policy_command(
        ack: AsyncAck, respond: AsyncRespond, body: dict[str, Any], client: AsyncWebClient
    ) -> None:
        book = channel.policies
        if book is None:
            await ack(text=NO_POLICIES)
            return
        # Acknowledge at once: the answer needs users.info and the database, so it
        # comes later, by the command's response_url.
        await ack()
        answering = run_policy_command(
            client,
            book,
            user=str(body.get("user_id") or ""),  # signed by Slack: who typed it, and where
            channel=str(body.get("channel_id") or ""),
            text=str(body.get("text") or ""),
        )
        channel.spawn(_respond(respond, answering), name="answer /agent-policy")

    async def on_home_opened(
        event: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        book, user, dm = channel.policies, event.get("user"), event.get("channel")
        if event.get("tab") == "messages" and isinstance(dm, str) and dm:
            greeting = greet_in_messages_tab(channel, context.team_id, dm)
            channel.spawn(greeting, name=f"greet {dm}")
        if book is None or event.get("tab") != "home" or not isinstance(user, str):
            return
        channel.spawn(_publish_home(client, book, user, channel), name=f"home {user}")

    bolt.action(APPROVE)(on_decision)
    bolt.action(DENY)(on_decision)
    bolt.event("app_mention")(on_message_event)
    bolt.event("message")(on_message_event)
    bolt.event("app_home_opened")(on_home_opened)
    bolt.command(POLICY_COMMAND)(on_policy_command)
    register_hatches(bolt, channel, client)
    register_feedback(bolt, channel)
    register_surface(bolt, channel)
    register_uninstalls(bolt, channel.workspaces)
    return bolt


async def _on_error(error: Exception, request: AsyncBoltRequest) -> BoltResponse | None:
    """Ack what no listener handles; anything else is a defect of the bot's, answered 500."""
    if isinstance(error, BoltUnhandledRequestError):
        logger.debug("nothing handles %s", _kind(request.body))
        return BoltResponse(status=200, body="")
    logger.error("a Slack request failed: %s", _kind(request.body), exc_info=error)
    return None


def _kind(body: dict[str, Any]) -> str:
    """What a request is, for the log: its type, and its event's (no text, no ids)."""
    kind = str(body.get("type") or ("command " + str(body.get("command")))[:40])
    event = body.get("event")
    if isinstance(event, dict):
        kind += f" {str(event.get('type'))[:40]}"
    return kind


async def _respond(respond: AsyncRespond, answering: Awaitable[str]) -> None:
    try:
        await respond(text=await answering, response_type="ephemeral")
    except Exception:  # only the command's answer is lost: the bot goes on
        logger.exception("could not answer /agent-policy")


async def _publish_home(
    client: AsyncWebClient, book: PolicyBook, user: str, channel: SlackChannel
) -> None:
    async def week() -> list[Feedback]:
        return await week_of_feedback(channel, time.time())

    try:
        view = await home_view(client, book, user, feedback=week)
        await client.views_publish(user_id=user, view=view)
    except SlackApiError as exc:
        logger.warning("the Home tab of %s was not published: %s", user, exc.response.get("error"))
