"""A thread's agent session in Slack (``agents.sessions.setStatus``): its title and Slack's Stop.

For an app that declares ``agent_view``, a thread the bot answers is an agent
session: while its status is ``processing`` Slack shows the session's own Stop
button (pressed, it sends ``agent_session_stopped``, see `bot.slack.surface`),
and the title given when the session is created names the thread in the
Messages tab's timeline. The reply sets ``processing`` while its turn works and
``active`` once it waits for a person or ends (Slack does not move it itself).

Best effort, like the status line: an app Slack does not count as an agent, an
older workspace, a token without the scope... refuses, and the reply goes on
with the bot's own Stop button (`bot.slack.channel.stopping`). So does an app
not subscribed to ``agent_session_stopped``: Slack then shows a loading
indicator nobody can press, and says so with a warning.
"""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.once import AMBIGUOUS
from bot.slack.task_lines import shortened

__all__ = ["MAX_TITLE", "NO_STOP_WARNING", "SET_WITHIN", "NativeSession"]

logger = logging.getLogger("bot.slack")

MAX_TITLE = 200
"""Slack's limit on a session's title."""
NO_STOP_WARNING = "missing_agent_session_stopped_event_subscription"
SET_WITHIN = 2.0
"""Seconds a status change may take before the reply goes on without it."""


class NativeSession:
    """The agent session of one thread, as one reply moves it.

    Args:
        client: Slack's Web API.
        channel: The conversation.
        thread_ts: The thread root; None (a reply that opens its own thread) has no session.
        title: What the thread is about (its first question), used if the session is new.
        initiator: Who asked, when a person did.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str | None,
        *,
        title: str,
        initiator: str | None,
    ) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._title = shortened(" ".join(title.split()), MAX_TITLE) or None
        self._initiator = initiator
        self._status: str | None = None
        self.offers_stop = False
        """Slack shows its own Stop on the thread now: the bot's Stop message is not needed."""

    async def working(self) -> None:
        """The turn is at work: ``processing``, with Slack's Stop button."""
        if self._status != "processing":
            answer = await self._set("processing", title=self._title)
            self.offers_stop = answer is not None and answer.get("warning") != NO_STOP_WARNING

    async def idle(self) -> None:
        """The turn waits for a person, or ended: ``active``, ready for the next message."""
        if self._status == "processing":
            self.offers_stop = False
            await self._set("active")

    async def _set(self, status: str, *, title: str | None = None) -> dict[str, object] | None:
        if self._thread_ts is None:
            return None
        self._status = status
        setting = self._client.agents_sessions_setStatus(
            channel_id=self._channel,
            thread_ts=self._thread_ts,
            status=status,
            title=title,
            initiator_user_id=self._initiator if title else None,
        )
        try:
            # bounded: a 429 would have slack_sdk wait out Retry-After, holding the reply back
            answer = await asyncio.wait_for(setting, SET_WITHIN)
        except TimeoutError:
            logger.info("agent session of %s: %s not set in time", self._thread_ts, status)
            return None
        except SlackApiError as exc:
            logger.debug("no agent session in %s: %s", self._thread_ts, exc.response.get("error"))
            return None
        except AMBIGUOUS:  # it sets a state: the next move sets it again
            return None
        return dict(answer.data) if isinstance(answer.data, dict) else {}
