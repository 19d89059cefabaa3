"""The status line under a thread (``assistant.threads.setStatus``) that a reply keeps.

It says the turn is thinking until the first words arrive (Slack rotates the
loading messages in its place), then what the tool at work is doing ("is reading
#general…"), or, where nothing streams, the model's note before the call and the
tool's own progress. A status set after the reply opened would outlive the
reply, so the reply clears it as it ends. Not every conversation takes a status:
a refusal is no matter.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.task_lines import shortened

__all__ = ["MAX_LOADING_MESSAGES", "MAX_STATUS", "THINKING", "ThreadStatus"]

logger = logging.getLogger("bot.slack")

THINKING = "is thinking…"
MAX_STATUS = 150
MAX_LOADING_MESSAGES = 10
"""Slack rotates at most ten (docs.slack.dev, assistant.threads.setStatus)."""


class ThreadStatus:
    """The status line of one thread, as one reply sets it."""

    def __init__(
        self,
        client: AsyncWebClient,
        channel: str,
        thread_ts: str | None,
        loading_messages: Sequence[str] = (),
    ) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._loading = list(loading_messages[:MAX_LOADING_MESSAGES])
        """What Slack rotates through in place of the status while the turn thinks."""
        self._thinking_shown = False
        self._noted = False
        """Whether a note is the status, to be cleared when the reply ends."""

    async def thinking(self) -> None:
        """Say the turn is thinking, once per reply."""
        if not self._thinking_shown:
            self._thinking_shown = True
            await self._set(THINKING, loading=self._loading)

    async def note(self, text: str) -> None:
        """Show ``text`` (what a tool is doing) until the reply ends."""
        self._noted = True
        await self._set(shortened(text, MAX_STATUS))

    async def clear_note(self) -> None:
        """Take down a note the reply set (the reply ends)."""
        if self._noted:
            self._noted = False
            await self._set("")

    async def _set(self, status: str, *, loading: list[str] | None = None) -> None:
        if self._thread_ts is None:
            return
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=self._channel,
                thread_ts=self._thread_ts,
                status=status,
                loading_messages=loading or None,
            )
        except SlackApiError as exc:
            logger.debug("no status for %s: %s", self._thread_ts, exc.response.get("error"))
