"""One turn's reply in its thread: streamed while Slack lets it, else posted and updated.

The text goes out through Slack's streaming API (``chat.startStream`` / ``appendStream`` /
``stopStream``), in flushes no more often than ``flush_every``. Where streaming is not
offered (``unknown_method``, a workspace or token without it) or a stream was closed by Slack
(it ends streams about five minutes in), the reply carries on as an ordinary message: the one
already showing is updated with the whole text, at most once per ``update_every``. Text is
always sent as ``markdown_text``, so a reply reads the same either way. A reply is one
message unless it outgrows one (12,000 characters of markdown), then it goes on in the
next, cut at a paragraph; each is posted once, tagged with the reply's key (`bot.slack.once`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.once import AMBIGUOUS, REPLY_EVENT, CannotTell, look_for, post_once, tag
from bot.slack.reply_footer import ending, error_of, update_reply
from bot.slack.reply_text import cut, markdown_chunk, squashed
from bot.slack.task_lines import TaskLines
from bot.slack.thread_status import ThreadStatus

__all__ = ["MAX_MESSAGE_CHARS", "ThreadReply"]

logger = logging.getLogger("bot.slack")

PLACEHOLDER = "…"
PROGRESS_EVERY = 1.0  # seconds between two progress lines shown; those between are dropped
MAX_MESSAGE_CHARS = 12_000
"""What Slack takes as one message's ``markdown_text``."""
STREAM_GONE = frozenset({"message_not_in_streaming_state", "stopped_by_user", "message_not_found"})
"""Errors that mean the stream is closed for good (anything else may leave it open)."""

OnOpen = Callable[[str], Awaitable[None]]
OnOpening = Callable[[], Awaitable[None]]


class ThreadReply:
    """The reply message of one turn in one thread.

    Args:
        client: Slack's Web API.
        channel: The conversation.
        thread_ts: The thread the reply goes in; None opens a conversation at the top of
            the channel (not streamed: streams live in threads), threading what follows.
        recipient_user: Who the reply is for (streams into channels need it).
        team: Their workspace.
        on_open: Awaited with each message's ts as soon as it exists (kept for a restart).
        on_opening: Awaited before each stream is opened (a stream has no tag until it
            stops: a restart tells whose an untagged one is by what was kept first).
        key: What names this reply in its messages' metadata (the turn, and where it
            starts), so that a post whose answer was lost is found, not made again.
        after: The ts its messages are newer than (what it answers).
        taken: Awaited for the ts of messages other replies hold, which an untagged
            message found in the thread is never taken for (two turns streaming at once).
        opening: Held while a stream is opened or a lost one looked for, shared by the
            replies of one thread: what one opens is known before another looks.
        flush_every: Seconds between stream appends (``chat.appendStream`` is Tier 4,
            about 100 a minute per workspace: a reply takes at most 60 of them).
        update_every: Seconds between updates of a message that is not streamed
            (``chat.update`` is Tier 3, about 50 a minute).
        loading_messages: What the thread's status rotates through until the first words.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str | None,
        recipient_user: str | None,
        team: str | None,
        on_open: OnOpen | None = None,
        on_opening: OnOpening | None = None,
        key: dict[str, str | int] | None = None,
        after: str | None = None,
        taken: Callable[[], Awaitable[Collection[str]]] | None = None,
        opening: asyncio.Lock | None = None,
        flush_every: float = 1.0,
        update_every: float = 1.5,
        loading_messages: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._channel = channel
        self._thread_ts = thread_ts
        self._recipient = (recipient_user, team)
        self._on_open = on_open
        self._on_opening = on_opening
        self._key = key or {}
        self._after = after
        self._taken = taken
        self._opening = opening or asyncio.Lock()
        self._flush_every = flush_every
        self._update_every = update_every
        self._clock = clock
        self._shown = self._pending = ""  # what the current message says; what is still to go
        self._ts: str | None = None
        # _tagged: whether the current message carries its tag (a stream's comes as it stops)
        self._streaming = self._tagged = self._footed = False  # _footed: shows _footer
        self._footer: Sequence[dict[str, Any]] = ()  # what the last message ends with
        self._last_flush = float("-inf")
        self._status = ThreadStatus(client, channel, thread_ts, loading_messages)
        self._earlier = ""
        """What the reply's earlier messages say, once it went on past one."""
        self._part = 0
        """How many messages of the reply came before the current one."""
        self._can_stream = thread_ts is not None
        """Until Slack refuses a stream here (a stream goes in a thread: never at top level)."""
        self._tasks = TaskLines()
        self._last_progress = float("-inf")

    @property
    def ts(self) -> str | None:
        """The current reply message's ts, once there is one."""
        return self._ts

    @property
    def thread_ts(self) -> str | None:
        """The thread it replies in: a reply that opened a conversation roots its own."""
        return self._thread_ts

    @property
    def has_text(self) -> bool:
        """Whether any text is in the reply yet."""
        return bool(self._shown or self._pending)

    async def recover(self) -> str | None:
        """Adopt (and return) a message a stopped process opened for the reply but never kept."""
        async with self._opening:
            ts = await self._find(untagged=self._can_stream)
            if ts is not None:
                self._ts = ts  # known to the thread's other replies from here on
        if ts is not None:
            await self.adopt(ts)
        return ts

    async def adopt(self, ts: str) -> None:
        """Carry on in a message a stopped process left half written.

        Its stream, if Slack still holds it open, is closed first; the reply then
        rewrites that message instead of opening another.
        """
        # Either way it can be updated; stopped here, it gets its tag even with no more words
        self._ts, self._streaming, self._tagged = ts, False, True
        try:
            await self._client.chat_stopStream(channel=self._channel, ts=ts, metadata=self._tag())
        except SlackApiError:
            # stopped already: by the process before, with the tag (every stop carries it),
            # or by Slack, with none; the end of the reply tags it then
            with contextlib.suppress(CannotTell):
                self._tagged = await self._find(untagged=False) == ts

    async def thinking(self) -> None:
        """Show that the turn is under way, until its first words arrive (best effort)."""
        if self._ts is None:
            await self._status.thinking()

    async def add_text(self, text: str) -> None:
        """Add streamed text; it goes out with the next flush that is due."""
        self._pending += text
        if self._clock() - self._last_flush >= self._interval():
            await self._flush()

    async def task(
        self, call_id: str, title: str, status: str, *, note: str = "", doing: str = ""
    ) -> None:
        """Show a tool call as a task line of the stream (a reply that is not streamed has none).

        ``note``, what the model wrote to introduce the call, goes with its first line
        as the task's details. While the tool runs the thread's status says ``doing``
        (what the tool is at), or, where nothing streams, the note.
        """
        first = call_id not in self._tasks
        note = " ".join(note.split())
        line = self._tasks.line(call_id, title, status, note=note)
        if self._ts is None and self._can_stream:  # a call before any words: open with it
            text, self._pending = self._pending, ""
            await self._open(text, line, stream_only=True)
            if self._ts is None:
                self._pending = text + self._pending
        elif self._ts is not None:
            await self._flush()  # the words so far go out before the tool runs
            if self._streaming:
                await self._send([line])
        shown = note if note and not self._streaming else doing
        if first and shown:
            await self._status.note(shown)

    async def progress(self, call_id: str, text: str) -> None:
        """Show a call's ``ctx.progress`` under its task line, or as the status (one a second)."""
        now = self._clock()
        if call_id not in self._tasks or now - self._last_progress < PROGRESS_EVERY:
            return
        self._last_progress = now
        if self._streaming:
            line = self._tasks.progress_line(call_id, text)
            if line is not None:
                await self._flush()  # the words so far go out first
                await self._send([line])
        else:
            await self._status.note(text)

    async def waiting(self, call_id: str) -> None:
        """Show a call's task line as waiting (for a person's answer)."""
        if call_id in self._tasks:
            await self.task(call_id, self._tasks.waiting_title(call_id), "pending")

    async def finish(
        self, *, whole: Sequence[str] = (), note: str | None = None, footer: Sequence[Any] = ()
    ) -> None:
        """End the reply, showing every part of ``whole``, then ``note``, then ``footer``.

        Args:
            whole: The texts the turn's steps committed for this reply. What the
                reply did not show as it streamed (a replay, words streamed before
                anyone watched) is shown now, rewriting the message if it must.
            note: A closing line (superseded, failed, ...).
            footer: Blocks under the reply's last message (`bot.slack.reply_footer`).
        """
        self._footer = footer
        try:
            await self._finish(whole, note)
        finally:
            await self._status.clear_note()

    async def _finish(self, whole: Sequence[str], note: str | None) -> None:
        # blanks aside: a split eats the paragraph break it cuts at
        seen = squashed(self._earlier + self._shown + self._pending)
        missing = [part for part in whole if squashed(part) not in seen]
        if missing and self._earlier:
            # the messages before this one stay as they are: what they lack comes last
            self._pending += "\n\n" + "\n\n".join(missing)
        elif missing:
            self._shown, self._pending = "", "\n\n".join(whole)
            if self._ts is not None and self._streaming:
                await self._close_stream()
        if note:
            self._pending += f"\n\n{note}" if self.has_text else note
        if not self._pending:
            if self._streaming:
                await self._close_stream()
        elif self._ts is not None or self._pending.strip():
            await self._flush(force=True, last=True)
        if self._ts is not None and (not self._tagged or (self._footer and not self._footed)):
            # Slack ended the stream before it took its tag (or footer): the update gives
            # it one, so that a restart finds this message as the reply's, not as a stray
            await self._update()

    # -- plumbing --------------------------------------------------------------------

    def _interval(self) -> float:
        return self._flush_every if self._streaming or self._ts is None else self._update_every

    async def _flush(self, *, force: bool = False, last: bool = False) -> None:
        if not self._pending and not force:
            return
        self._last_flush = self._clock()
        text, self._pending = self._pending, ""
        while len(self._shown) + len(text) > MAX_MESSAGE_CHARS:
            room = MAX_MESSAGE_CHARS - len(self._shown)
            head, text = cut(text, room) if room > 0 else ("", text)
            footer, self._footer = self._footer, ()  # only the last message has it
            await self._write(head, last=True)
            self._earlier, self._footer = self._earlier + self._shown, footer
            self._part += 1
            self._ts, self._shown, self._streaming, self._footed = None, "", False, False
        await self._write(text, last=last)

    async def _write(self, text: str, *, last: bool) -> None:
        """Put ``text`` after what the current message shows (opening one if need be)."""
        if self._ts is None:
            await self._open(text)
            if last and self._streaming:
                await self._close_stream()
            return
        if self._streaming:
            if not text and not last:
                return
            if await self._send([markdown_chunk(text)] if text else [], stop=last):
                self._shown += text
                return
        self._shown += text
        await self._update()

    async def _open(
        self, text: str, task: dict[str, str] | None = None, *, stream_only: bool = False
    ) -> None:
        if self._can_stream:
            await self._start_stream(text, task)
        if self._ts is None:
            if stream_only:
                return
            self._ts, self._tagged = await self._post(text or PLACEHOLDER), True
            self._thread_ts = self._thread_ts or self._ts  # what follows goes in its thread
        self._shown = text
        if self._on_open is not None:
            await self._on_open(self._ts)

    async def _start_stream(self, text: str, task: dict[str, str] | None) -> None:
        user, team = self._recipient
        assert self._thread_ts is not None  # a stream is only tried in a thread
        # a stream keeps to chunks throughout: Slack refuses markdown_text after chunks
        chunks = ([markdown_chunk(text)] if text else []) + ([task] if task else [])
        async with self._opening:  # the thread's other replies look meanwhile
            if self._on_opening is not None:
                await self._on_opening()
            for _ in range(2):
                try:
                    started = await self._client.chat_startStream(
                        channel=self._channel,
                        thread_ts=self._thread_ts,
                        chunks=chunks or None,
                        recipient_user_id=user,
                        recipient_team_id=team,
                    )
                except SlackApiError as exc:
                    logger.info("no streaming here (%s): posting the reply instead", error_of(exc))
                    self._can_stream = False
                    return
                except AMBIGUOUS:  # applied or not: look for it before starting another
                    if (found := await self._find(untagged=True)) is not None:
                        self._ts, self._streaming, self._tagged = found, True, False
                        return
                    continue
                self._ts, self._streaming, self._tagged = str(started["ts"]), True, False
                return
            self._can_stream = False  # Slack cannot be reached for streams: post instead

    def _tag(self) -> dict[str, Any]:  # ``part``: how many messages came before it
        return tag(REPLY_EVENT, **self._key, part=self._part)

    async def _find(self, *, untagged: bool) -> str | None:
        skip = await self._taken() if untagged and self._taken is not None else ()
        return await look_for(
            self._client, self._channel, self._thread_ts, self._tag(), untagged, self._after, skip
        )

    async def _post(self, text: str) -> str:
        return await post_once(
            self._client,
            self._channel,
            self._thread_ts,
            self._tag(),
            after=self._after,
            markdown_text=text,
        )

    async def _send(self, chunks: list[dict[str, str]], *, stop: bool = False) -> bool:
        """Append ``chunks`` to the open stream (or end it with them); False if it is gone."""
        assert self._ts is not None
        try:
            if stop:
                await self._client.chat_stopStream(
                    channel=self._channel, ts=self._ts, **ending(chunks, self._tag(), self._footer)
                )
                self._streaming, self._tagged, self._footed = False, True, bool(self._footer)
            else:
                await self._client.chat_appendStream(
                    channel=self._channel, ts=self._ts, chunks=chunks
                )
            return True
        except (SlackApiError, *AMBIGUOUS) as exc:  # AMBIGUOUS: the whole text goes next
            await self._lose_stream(error_of(exc))
            return False

    async def _close_stream(self) -> None:
        await self._send([], stop=True)

    async def _lose_stream(self, error: Any) -> None:
        """Carry on by updating the message: Slack closed the stream, or refused it."""
        logger.info("stream %s refused (%s): updating the message instead", self._ts, error)
        self._streaming = False
        if error not in STREAM_GONE and self._ts is not None:
            # still open: an open stream cannot be updated, so end it first (best effort)
            with contextlib.suppress(SlackApiError, *AMBIGUOUS):
                await self._client.chat_stopStream(
                    channel=self._channel, ts=self._ts, metadata=self._tag()
                )
                self._tagged = True

    async def _update(self) -> None:
        assert self._ts is not None
        text = self._shown or self._tasks.as_text() or PLACEHOLDER
        if await update_reply(
            self._client, self._channel, self._ts, text, self._tag(), self._footer
        ):
            self._tagged, self._footed = True, bool(self._footer)
