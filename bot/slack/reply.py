"""One turn's reply in its thread: streamed while Slack lets it, else posted and updated.

The text goes out through Slack's streaming API (``chat.startStream`` /
``appendStream`` / ``stopStream``), in flushes no more often than
``flush_every``. Where streaming is not offered (``unknown_method``, a workspace
or token without it) or a stream was closed by Slack (it ends streams about five
minutes in), the reply carries on as an ordinary message: the one already
showing is updated with the whole text, at most once per ``update_every``. The
reply is always one message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

__all__ = ["ThreadReply"]

logger = logging.getLogger("bot.slack")

THINKING = "is thinking…"
MAX_TASK_TITLE = 256


class ThreadReply:
    """The reply message of one turn in one thread.

    Args:
        client: Slack's Web API.
        channel: The conversation.
        thread_ts: The thread the reply goes in.
        recipient_user: Who the reply is for (streams into channels need it).
        team: Their workspace.
        flush_every: Seconds between stream appends.
        update_every: Seconds between updates of a message that is not streamed
            (``chat.update`` allows about one a second per message).
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str,
        recipient_user: str | None,
        team: str | None,
        flush_every: float = 0.4,
        update_every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._recipient = (recipient_user, team)
        self._flush_every = flush_every
        self._update_every = update_every
        self._clock = clock
        self._shown = ""
        """Everything that went out so far."""
        self._pending = ""
        self._ts: str | None = None
        self._streaming = False
        self._last_flush = float("-inf")
        self._status_set = False
        self._adopted = False

    @property
    def ts(self) -> str | None:
        """The reply message's ts, once there is one."""
        return self._ts

    def adopt(self, ts: str) -> None:
        """Carry on in a message a stopped process left half written (its stream is dead).

        The reply then updates that message instead of opening another, and its
        end replaces the stale text with the turn's whole reply.
        """
        self._ts, self._streaming, self._adopted = ts, False, True

    @property
    def has_text(self) -> bool:
        """Whether any text is in the reply yet."""
        return bool(self._shown or self._pending)

    async def thinking(self) -> None:
        """Show that the turn is under way, until its first words arrive (best effort)."""
        if self._status_set or self._ts is not None:
            return
        self._status_set = True
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=self._channel, thread_ts=self._thread_ts, status=THINKING
            )
        except SlackApiError as exc:  # not every conversation takes a status: no matter
            logger.debug("no status for %s: %s", self._thread_ts, exc.response.get("error"))

    async def add_text(self, text: str) -> None:
        """Add streamed text; it goes out with the next flush that is due."""
        self._pending += text
        if self._clock() - self._last_flush >= self._interval():
            await self._flush()

    async def task(self, call_id: str, title: str, status: str) -> None:
        """Show a tool call as a task line of the stream (only once the stream is open)."""
        if not self._streaming or self._ts is None:
            return
        await self._flush()
        chunk = {"type": "task_update", "id": call_id, "title": title[:MAX_TASK_TITLE]}
        try:
            await self._client.chat_appendStream(
                channel=self._channel, ts=self._ts, chunks=[chunk | {"status": status}]
            )
        except SlackApiError as exc:
            await self._stop_streaming(exc)

    async def finish(self, *, final: str | None = None, note: str | None = None) -> None:
        """End the reply: the streamed text with ``note`` after it, or ``final`` if none went out.

        Args:
            final: The turn's whole reply, posted as is when nothing was streamed
                (a replay, or a reply that came without deltas).
            note: A closing line (superseded, failed, ...).
        """
        if self._ts is None and not self._pending:
            text = final if final else note
            if text:
                await self._post(text)
            return
        if self._adopted:
            # the stale half, then this run's steps: the turn's own reply reads better
            self._shown, self._pending = "", (final or self._shown + self._pending)
            if note:
                self._pending += f"\n\n{note}"
            await self._flush(force=True)
            return
        if note:
            self._pending += f"\n\n{note}"
        if self._streaming and self._ts is not None:
            try:
                await self._client.chat_stopStream(
                    channel=self._channel, ts=self._ts, markdown_text=self._pending or None
                )
                self._shown += self._pending
                self._pending = ""
            except SlackApiError as exc:
                await self._stop_streaming(exc)
                await self._flush(force=True)
        else:
            await self._flush(force=True)
        if final and final not in self._shown:
            # words streamed before this reply was watching are missing: show the reply whole
            self._shown = final
            await self._update()

    # -- plumbing --------------------------------------------------------------------

    def _interval(self) -> float:
        return self._flush_every if self._streaming or self._ts is None else self._update_every

    async def _flush(self, *, force: bool = False) -> None:
        if not self._pending and not force:
            return
        self._last_flush = self._clock()
        if self._ts is None:
            await self._open()
            return
        if self._streaming:
            try:
                await self._client.chat_appendStream(
                    channel=self._channel, ts=self._ts, markdown_text=self._pending
                )
                self._shown += self._pending
                self._pending = ""
                return
            except SlackApiError as exc:
                await self._stop_streaming(exc)
        self._shown += self._pending
        self._pending = ""
        await self._update()

    async def _open(self) -> None:
        user, team = self._recipient
        try:
            started = await self._client.chat_startStream(
                channel=self._channel,
                thread_ts=self._thread_ts,
                markdown_text=self._pending,
                recipient_user_id=user,
                recipient_team_id=team,
            )
            self._ts, self._streaming = str(started["ts"]), True
        except SlackApiError as exc:
            logger.info("no streaming here (%s): posting the reply instead", _error(exc))
            posted = await self._client.chat_postMessage(
                channel=self._channel, thread_ts=self._thread_ts, text=self._pending or "…"
            )
            self._ts = str(posted["ts"])
        self._shown += self._pending
        self._pending = ""

    async def _stop_streaming(self, exc: SlackApiError) -> None:
        """Slack closed the stream (or refused it): carry on by updating the message."""
        logger.info("stream %s ended by Slack (%s): updating it instead", self._ts, _error(exc))
        self._streaming = False

    async def _update(self) -> None:
        assert self._ts is not None
        try:
            await self._client.chat_update(
                channel=self._channel, ts=self._ts, text=self._shown or "…"
            )
        except SlackApiError as exc:
            logger.error("could not update reply %s: %s", self._ts, _error(exc))

    async def _post(self, text: str) -> None:
        posted = await self._client.chat_postMessage(
            channel=self._channel, thread_ts=self._thread_ts, text=text
        )
        self._ts = str(posted["ts"])
        self._shown = text


def _error(exc: SlackApiError) -> Any:
    return exc.response.get("error")
