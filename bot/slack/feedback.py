"""Feedback on replies from inside Slack: the 👍 / 👎 under a reply, and the comment modal.

- a click on 👍 / 👎 is acknowledged at once; the rating is then kept with the
  turn (`agent.rate_turn`: who, which turn, good or bad), one per person and turn,
  a second click replacing the first;
- after 👎 the comment modal opens right away (``views.open`` with the click's
  ``trigger_id``, which lives 3 seconds); where it cannot, and after 👍, the
  person is told privately, with a *Tell us more* button that opens it;
- the modal's submission is kept before it is acknowledged, so a reply that is
  gone meanwhile is said in the modal (``response_action: errors``).

Who rates comes from the signed payload's ``user``; which turn, from the
button's value or the modal's metadata, and it must be a turn of this agent's
in the conversation the click came from: anything else is refused privately and
nothing is kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import ConflictError, Feedback, UnknownTurnError, rate_turn
from bot.slack.channel import SlackChannel
from bot.slack.feedback_blocks import (
    COMMENT_BLOCK,
    FEEDBACK,
    FEEDBACK_VIEW,
    TELL_MORE,
    Rated,
    comment_view,
    read_comment,
    read_rated,
    tell_more_blocks,
)
from bot.texts import (
    FEEDBACK_EMPTY,
    FEEDBACK_FAILED,
    FEEDBACK_GONE,
    FEEDBACK_THANKS,
    FEEDBACK_THANKS_BAD,
    NOT_MY_FORM,
)

if TYPE_CHECKING:
    from agent import AgentSession

__all__ = ["WEEK", "register_feedback", "week_of_feedback"]

logger = logging.getLogger("bot.slack")

WEEK = 7 * 24 * 3600.0


def register_feedback(bolt: AsyncApp, channel: SlackChannel) -> None:
    """Add the listeners for the feedback buttons, *Tell us more* and the comment modal.

    Each answers with Bolt's ``client`` for the request: the bot's in the workspace
    the click came from.
    """
    feedback = _Feedback(channel)

    async def on_rating(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()  # at once: the rating is kept in a task of the channel's
        channel.spawn(feedback.rated(client, body), name="feedback click")

    async def on_tell_more(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        channel.spawn(feedback.tell_more(client, body), name="feedback comment form")

    async def on_comment(ack: AsyncAck, body: dict[str, Any]) -> None:
        # kept before the ack, so that a refusal is shown in the modal
        error = await feedback.commented(body)
        if error is None:
            await ack()
        else:
            await ack(response_action="errors", errors={COMMENT_BLOCK: error})

    bolt.action(FEEDBACK)(on_rating)
    bolt.action(TELL_MORE)(on_tell_more)
    bolt.view_submission(FEEDBACK_VIEW)(on_comment)


async def week_of_feedback(channel: SlackChannel, now: float) -> list[Feedback]:
    """The feedback on the channel's agent's replies over the 7 days up to ``now``."""
    return await channel.runtime.store.feedback_since(now - WEEK, agent=channel.agent)


class _Feedback:
    def __init__(self, channel: SlackChannel) -> None:
        self.channel = channel

    async def rated(self, client: AsyncWebClient, body: dict[str, Any]) -> None:
        """A click on 👍 / 👎: keep it, then ask for a comment (the modal after 👎)."""
        found = _clicked(body)
        if found is None:
            logger.warning("a feedback click this app cannot read was ignored")
            return
        rated, user, where = found
        if not await self._keep(client, rated, user, where):
            return
        logger.info("turn %s rated %s by %s", rated.turn_id, rated.rating, user)
        if rated.rating == "bad" and await _open_form(client, rated, body):
            return
        line = FEEDBACK_THANKS_BAD if rated.rating == "bad" else FEEDBACK_THANKS
        await _tell(client, user, where, line, tell_more_blocks(rated, line))

    async def tell_more(self, client: AsyncWebClient, body: dict[str, Any]) -> None:
        """A click on *Tell us more*: open the comment modal."""
        found = _clicked(body)
        if found is None:
            logger.warning("a Tell us more click this app cannot read was ignored")
            return
        rated, user, where = found
        if not await _open_form(client, rated, body):
            await _tell(client, user, where, FEEDBACK_FAILED)

    async def commented(self, body: dict[str, Any]) -> str | None:
        """Keep a submitted comment; None once kept, else what to show under the field."""
        found, user = read_comment(body.get("view")), body.get("user")
        by = user.get("id") if isinstance(user, dict) else None
        if found is None or not isinstance(by, str) or not by:
            logger.warning("a feedback form this app cannot read was submitted")
            return NOT_MY_FORM
        rated, comment = found
        if not comment.strip():
            return FEEDBACK_EMPTY
        session = self._session(rated)
        try:
            await rate_turn(session, rated.turn_id, by=by, rating=rated.rating, comment=comment)
        except (UnknownTurnError, ConflictError):
            return FEEDBACK_GONE
        except ValueError as exc:
            return str(exc)[:150]
        except Exception:
            logger.exception("turn %s: a comment could not be kept", rated.turn_id)
            return FEEDBACK_FAILED
        logger.info("turn %s: %s commented on their %s rating", rated.turn_id, by, rated.rating)
        return None

    async def _keep(self, client: AsyncWebClient, rated: Rated, user: str, where: _Where) -> bool:
        """Keep the rating; False (the person told why) when it cannot be."""
        if _channel_of(rated.session_id) != where.channel:
            logger.warning("a feedback click named another conversation's turn: ignored")
            await _tell(client, user, where, FEEDBACK_GONE)
            return False
        try:
            await rate_turn(self._session(rated), rated.turn_id, by=user, rating=rated.rating)
        except (UnknownTurnError, ConflictError, ValueError) as exc:
            logger.info("a rating of turn %s was refused: %s", rated.turn_id, exc)
            await _tell(client, user, where, FEEDBACK_GONE)
            return False
        except Exception:
            logger.exception("turn %s: a rating could not be kept", rated.turn_id)
            await _tell(client, user, where, FEEDBACK_FAILED)
            return False
        return True

    def _session(self, rated: Rated) -> AgentSession:
        return self.channel.runtime.session(self.channel.agent, rated.session_id)


async def _open_form(client: AsyncWebClient, rated: Rated, body: dict[str, Any]) -> bool:
    """Open the comment modal with the click's trigger; False where Slack would not."""
    trigger = body.get("trigger_id")
    if not isinstance(trigger, str) or not trigger:
        return False
    try:
        await client.views_open(trigger_id=trigger, view=comment_view(rated))
    except SlackApiError as exc:
        logger.info("the feedback form did not open: %s", exc.response.get("error"))
        return False
    return True


async def _tell(
    client: AsyncWebClient,
    user: str,
    where: _Where,
    text: str,
    blocks: list[dict[str, Any]] | None = None,
) -> None:
    """Say ``text`` to ``user`` alone where they clicked (best effort)."""
    try:
        await client.chat_postEphemeral(
            channel=where.channel, user=user, thread_ts=where.thread_ts, text=text, blocks=blocks
        )
    except SlackApiError as exc:
        logger.warning(
            "could not tell %s about their feedback: %s", user, exc.response.get("error")
        )


@dataclass(frozen=True, slots=True)
class _Where:
    """The conversation (and thread) a click came from: where its private answer goes."""

    channel: str
    thread_ts: str | None


def _clicked(body: dict[str, Any]) -> tuple[Rated, str, _Where] | None:
    """The rating clicked, who clicked, and where; None for a payload this app cannot read."""
    actions, user = body.get("actions"), body.get("user")
    action = actions[0] if isinstance(actions, list) and actions else None
    rated = read_rated(action.get("value")) if isinstance(action, dict) else None
    clicker = user.get("id") if isinstance(user, dict) else None
    container = body.get("container")
    channel = body.get("channel")
    channel_id = channel.get("id") if isinstance(channel, dict) else None
    if channel_id is None and isinstance(container, dict):
        channel_id = container.get("channel_id")
    if rated is None or not isinstance(clicker, str) or not isinstance(channel_id, str):
        return None
    message = body.get("message")
    said = message if isinstance(message, dict) else {}
    thread = said.get("thread_ts") or said.get("ts")
    if thread is None and isinstance(container, dict):
        thread = container.get("thread_ts") or container.get("message_ts")
    return rated, clicker, _Where(channel_id, thread if isinstance(thread, str) else None)


def _channel_of(session_id: str) -> str | None:
    """The conversation of a Slack session id (``slack:<team>:<channel>:…``)."""
    parts = session_id.split(":")
    return parts[2] if len(parts) > 3 and parts[0] == "slack" else None
