"""The Retry button under a reply whose turn failed or was interrupted.

Like the Stop button it cannot ride on the reply itself (a streamed reply takes
blocks only as it stops, and its last words may open a new message), so it is a
small message of the bot's own, posted under the reply once the reply's last
words landed. It is tagged ``turnbot_retry`` with the turn, so a process that
died after posting it and shows the ending again at its next start finds it
rather than posting a second. A click (see `bot.slack.hatches`) asks the turn's
input again as a new turn of the thread and turns the message into who did.
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.blocks import retry_blocks
from bot.slack.channel.delivery import Thread
from bot.slack.once import AMBIGUOUS, CannotTell, look_for_button, post_once, tag
from bot.texts import RETRY_OFFER

__all__ = ["RETRY_EVENT", "RetryOffer"]

logger = logging.getLogger("bot.slack")

RETRY_EVENT = "turnbot_retry"
"""The metadata event type of the message that holds a turn's Retry button."""


class RetryOffer:
    """The message with one turn's Retry button, in its thread."""

    def __init__(self, client: AsyncWebClient, thread: Thread, turn_id: str) -> None:
        self._client = client
        self._thread = thread
        self._turn_id = turn_id
        self._tag = tag(RETRY_EVENT, turn=turn_id)
        self._ts: str | None = None

    async def recover(self) -> None:
        """Take back the message a stopped process may have posted before it died."""
        thread = self._thread
        self._ts = await look_for_button(self._client, thread.channel, thread.thread_ts, self._tag)

    async def show(self, *, after: str | None) -> None:
        """Post the message under ``after`` (the reply), unless it is up (best effort)."""
        thread = self._thread
        if self._ts is not None or thread.thread_ts is None:
            return
        try:
            self._ts = await post_once(
                self._client,
                thread.channel,
                thread.thread_ts,
                self._tag,
                after=after,
                text=RETRY_OFFER,
                blocks=retry_blocks(thread.session_id, self._turn_id, RETRY_OFFER),
            )
        except SlackApiError as exc:
            logger.warning("turn %s: no Retry button: %s", self._turn_id, exc.response.get("error"))
        except (*AMBIGUOUS, CannotTell) as exc:
            logger.warning("turn %s: no Retry button: %s", self._turn_id, type(exc).__name__)
