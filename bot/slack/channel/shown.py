"""One reply being shown: the handlers of a turn's events, and what they share as they write it.

Besides the reply itself (`bot.slack.reply.ThreadReply`), a reply keeps the thread's
agent session in step (`bot.slack.agent_session`: ``processing`` while the turn works,
with Slack's own Stop; ``active`` once it waits or ends), its own Stop button where
Slack offers none (`bot.slack.channel.stopping`) and its Retry (`retrying`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    ActionCompleted,
    ActionProgress,
    ActionRequested,
    InputRequested,
    JsonValue,
    MessageCompleted,
    MessageDelta,
    TurnEvent,
    TurnRecord,
    TurnSteered,
    is_terminal,
)
from bot.slack.agent_session import NativeSession
from bot.slack.channel.children import show_child_step
from bot.slack.channel.delivery import Deliveries, DeliveryState, Thread, team_of
from bot.slack.channel.endings import RETRYABLE_ENDINGS, closing_line, file_notes
from bot.slack.channel.neighbours import Neighbours
from bot.slack.channel.retrying import RetryOffer
from bot.slack.channel.stopping import StopMessage
from bot.slack.feedback_blocks import feedback_blocks
from bot.slack.reply import ThreadReply
from bot.slack.tool_status import at_work
from bot.texts import FOLLOW_UP_TAKEN, RETRYING

__all__ = ["Renderer", "ShownReply"]


class Renderer(Protocol):
    """What a reply being shown uses of the renderer that shows it."""

    deliveries: Deliveries
    flush_every: float
    loading_messages: Sequence[str]

    def stopper(self, turn_id: str) -> str | None:
        """Who ended ``turn_id`` from Slack (forgotten once told)."""
        ...

    async def ask(self, thread: Thread, turn_id: str, asked: JsonValue, *, proactive: bool) -> None:
        """Show a request with its buttons, and keep that it was shown."""
        ...


class ShownReply:
    """One reply being shown: what the stream's handlers share while they write it."""

    def __init__(
        self,
        renderer: Renderer,
        client: AsyncWebClient,
        thread: Thread,
        turn_id: str,
        since: int,
        record: TurnRecord | None,
        reader: str | None,
        neighbours: Neighbours,
    ) -> None:
        self._renderer = renderer
        self._thread = thread
        self._turn_id = turn_id
        self._since = since
        self._proactive = record is not None and record.input.trigger == "proactive"
        self._notes = file_notes(record) if since == 0 else None  # files it could not read
        self._opened: list[str] = []
        """The reply's messages, in order: one, unless it outgrew what a message holds."""
        speaker = record.input.event if record is not None else None
        after = str(speaker.data.get("ts")) if speaker and since == 0 else None
        # a turn nobody typed has nobody to stop it from its thread
        where = thread if not self._proactive else Thread(thread.channel, None, thread.session_id)
        self.stop = StopMessage(client, where, turn_id, after=after)
        """The message with the turn's Stop button, while it is at work."""
        self.retry = RetryOffer(client, thread, turn_id)
        """The message with its Retry button, once it failed or was interrupted."""
        self._reply = ThreadReply(
            client,
            channel=thread.channel,
            thread_ts=thread.thread_ts,
            recipient_user=speaker.user if speaker else reader,
            team=str(speaker.data.get("team")) if speaker else team_of(thread.session_id),
            on_open=self._keep_reply,
            on_opening=self._keep_opening,
            key={"turn": turn_id, "since": since},
            after=after,
            taken=neighbours.taken,
            opening=neighbours.lock,
            flush_every=renderer.flush_every,
            loading_messages=renderer.loading_messages,
        )
        self.session = NativeSession(
            client,
            thread.channel,
            None if self._proactive else thread.thread_ts,
            title=record.input.text if record is not None else "",
            initiator=speaker.user if speaker else None,
        )
        """The thread's agent session in Slack: Slack's own Stop while the turn works."""
        neighbours.hold(lambda: (*self._opened, self._reply.ts))
        self._said: dict[int, str] = {}
        """What the turn's steps committed for this reply, by transcript index."""
        self._attempt = 1
        """The model's attempt at the current step; a higher one means it was asked again."""
        self._step_ended = False
        """A step ended since the last words: the next words start a paragraph of their own."""
        self._step_streamed = False
        """The current step's words came as deltas, so its completed message adds nothing."""
        # Its turn.started may have gone by before this reply watched: then the first
        # event, whatever it is, shows that the turn is at work.
        self._thinking_due = record is not None and record.is_unfinished
        self._at_work = self._thinking_due
        """The turn runs (or is about to): its reply shows a Stop button once it streams."""

    async def adopt(self, ts: str) -> None:
        """Carry on in the message a stopped process left half written."""
        self._opened.append(ts)
        self._thinking_due = False
        await self._reply.adopt(ts)

    async def recover(self) -> None:
        """Adopt the reply's message a stopped process opened but never kept, if there is one."""
        ts = await self._reply.recover()
        if ts is not None:
            self._thinking_due = False
            await self._keep_reply(ts)

    async def on(self, event: TurnEvent) -> None:
        """Show one event of the turn's stream."""
        if event.via is not None:
            await show_child_step(self._reply, event)  # a step of a sub-agent's turn
            return
        if event.type == "turn.started" or self._thinking_due:
            self._thinking_due = False
            await self.session.working()
            await self._reply.thinking()
        if event.type == "turn.started":
            self._at_work = True
        if isinstance(event, MessageDelta):
            await self._on_delta(event)
        elif isinstance(event, MessageCompleted):
            await self._on_message(event)
        elif isinstance(event, ActionRequested):
            await self._reply.task(
                event.call_id,
                event.name,
                "in_progress",
                note=event.note,
                doing=at_work(event.name, event.input),
            )
        elif isinstance(event, ActionProgress):
            await self._reply.progress(event.call_id, event.text)
        elif isinstance(event, TurnSteered):
            await self._reply.task(
                f"steer-{event.steer_id}", FOLLOW_UP_TAKEN, "complete", note=event.text
            )
            self._step_ended = True
        elif isinstance(event, ActionCompleted):
            await self._reply.task(
                event.call_id, event.name, "error" if event.error else "complete"
            )
            self._step_ended = True
        elif isinstance(event, InputRequested):
            await self._on_request(event)
        elif is_terminal(event):
            await self._on_end(event)

    async def _on_delta(self, event: MessageDelta) -> None:
        if event.attempt > self._attempt:  # the model's reply broke off and is asked again
            self._attempt = event.attempt
            await self._reply.add_text(f"\n\n{RETRYING}\n\n")
        if self._step_ended and self._reply.has_text:
            await self._reply.add_text("\n\n")
        self._step_ended, self._step_streamed = False, True
        await self._reply.add_text(event.text)

    async def _on_message(self, event: MessageCompleted) -> None:
        if event.index < self._since:
            return  # said before this reply starts (before the request it continues)
        self._said[event.index] = event.text
        if not self._step_streamed:  # a replayed step: its words come whole
            await self._reply.add_text(f"\n\n{event.text}" if self._reply.has_text else event.text)
        self._step_ended, self._step_streamed = True, False

    async def _on_request(self, event: InputRequested) -> None:
        asked = [event.request, *event.others]  # calls of one batch may each ask
        for request in asked:
            call_id = request.get("call_id")
            if isinstance(call_id, str):
                await self._reply.waiting(call_id)
        self._at_work = False
        await self.stop.remove()  # nothing runs while it waits: Withdraw is on the card
        await self._reply.finish(whole=self._in_order(), note=self._notes)
        await self.session.idle()
        here = Thread(self._thread.channel, self._reply.thread_ts, self._thread.session_id)
        for request in asked:
            await self._renderer.ask(here, self._turn_id, request, proactive=self._proactive)

    async def _on_end(self, event: TurnEvent) -> None:
        by = self._renderer.stopper(self._turn_id) if event.type == "turn.cancelled" else None
        # gone before the reply's last words land (which may open it): it stands alone
        self._at_work = False
        await self.stop.remove()
        # only an answer is rated: a reply whose turn failed or was cancelled has no buttons
        rated = event.type == "turn.completed"
        footer = feedback_blocks(self._thread.session_id, self._turn_id) if rated else ()
        note = closing_line(event, by, self._notes)
        await self._reply.finish(whole=self._in_order(), note=note, footer=footer)
        await self.session.idle()  # once its last words are up: the next reply comes after
        if event.type in RETRYABLE_ENDINGS and not self._proactive:
            await self.retry.show(after=self._reply.ts)
        # A turn nobody typed may be delivered again (its firing, twice): keep that it was
        # shown. Any other turn's state is forgotten: nothing is owed to its thread.
        done = DeliveryState(done=True) if self._proactive else None
        await self._renderer.deliveries.keep(self._thread.session_id, self._turn_id, done)

    async def _keep_reply(self, ts: str) -> None:
        """Keep each new message of the reply as it opens: one too long goes on in the next."""
        self._opened.append(ts)
        # under the reply's first message, streamed or posted, unless Slack shows its own
        if self._at_work and not self.session.offers_stop:
            await self.stop.show()
        await self._keep(opening=False)

    async def _keep_opening(self) -> None:
        """Keep that a stream is being opened for the reply, before it is."""
        await self._keep(opening=True)

    async def _keep(self, *, opening: bool) -> None:
        opened = self._opened
        state = DeliveryState(
            reply=opened[0] if opened else None,
            more=tuple(opened[1:]) if opened else None,
            since=self._since,
            opening=opening,
        )
        if self._proactive:
            place = self._reply.thread_ts or self._thread.thread_ts
            state = dataclasses.replace(state, channel=self._thread.channel, thread_ts=place)
        deliveries = self._renderer.deliveries
        async with deliveries.writing:
            await deliveries.keep(self._thread.session_id, self._turn_id, state)

    def _in_order(self) -> list[str]:
        return [self._said[index] for index in sorted(self._said)]
