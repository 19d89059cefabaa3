"""The Stop button a thread shows while its turn is at work.

Slack's streaming methods take no blocks while a stream is open
(docs.slack.dev/reference/methods/chat.startStream lists ``chunks`` and
``markdown_text``, ``chat.appendStream`` the same; only ``chat.stopStream``
takes ``blocks``, rendered once the stream is finished), so the button cannot
ride on a streamed reply. It goes in a small message of the bot's own instead,
posted once under the reply when its first message opens (tagged ``turnbot_stop``
with the turn, so a post whose answer was lost, or a restart, finds it rather
than posting a second) and deleted when the turn ends or waits for a person,
before the reply's last words land. A reply that is posted and updated (where
Slack offers no stream) shows it too.

Slack's own Stop for agent sessions (``agents.sessions.setStatus``,
``agent_session_stopped``) needs the agent surface, which this app does not
have yet (issue 23).
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.blocks import working_blocks
from bot.slack.channel.delivery import Thread
from bot.slack.once import AMBIGUOUS, CannotTell, look_for_button, post_once, tag
from bot.texts import WORKING

__all__ = ["STOP_EVENT", "StopMessage"]

logger = logging.getLogger("bot.slack")

STOP_EVENT = "turnbot_stop"
"""The metadata event type of the message that holds a turn's Stop button."""


class StopMessage:
    """The message with one turn's Stop button, in its thread.

    Args:
        client: Slack's Web API.
        thread: Where the turn is shown; a turn with no thread yet shows no button.
        turn_id: The turn the button stops.
        after: The ts the message is newer than (what the turn answers).
    """

    def __init__(
        self, client: AsyncWebClient, thread: Thread, turn_id: str, *, after: str | None
    ) -> None:
        self._client = client
        self._thread = thread
        self._turn_id = turn_id
        self._after = after
        self._tag = tag(STOP_EVENT, turn=turn_id)
        self._ts: str | None = None
        self._tried = False
        """Shown once per showing of the turn: a refusal is not tried again."""
        self._unsure = False
        """A post's answer was lost and could not be read back: it may be up all the same."""

    async def recover(self) -> None:
        """Take back the message a stopped process posted (it is deleted at the turn's end)."""
        thread = self._thread
        self._ts = await look_for_button(self._client, thread.channel, thread.thread_ts, self._tag)

    async def show(self) -> None:
        """Post the message, unless it is up already (best effort: the turn goes on anyway)."""
        thread = self._thread
        if self._tried or self._ts is not None or thread.thread_ts is None:
            return
        self._tried = True
        try:
            self._ts = await post_once(
                self._client,
                thread.channel,
                thread.thread_ts,
                self._tag,
                after=self._after,
                text=WORKING,
                blocks=working_blocks(thread.session_id, self._turn_id, WORKING),
            )
        except SlackApiError as exc:
            logger.warning("turn %s: no Stop button: %s", self._turn_id, exc.response.get("error"))
        except (*AMBIGUOUS, CannotTell) as exc:
            self._unsure = True
            logger.warning("turn %s: no Stop button: %s", self._turn_id, type(exc).__name__)

    async def remove(self) -> None:
        """Delete the message: the turn ended, or waits for a person (best effort)."""
        if self._ts is None and self._unsure:  # look once more for one that may be up
            self._unsure = False
            await self.recover()
        ts, self._ts = self._ts, None
        if ts is None:
            return
        try:
            await self._client.chat_delete(channel=self._thread.channel, ts=ts)
        except SlackApiError as exc:
            if exc.response.get("error") != "message_not_found":  # gone already: as wanted
                logger.warning("turn %s: Stop button left up: %s", self._turn_id, exc)
