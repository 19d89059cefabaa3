"""Showing one turn in its thread: each event of the turn's stream has its own handler.

The reply streams into one message (see `bot.slack.reply.ThreadReply`); a tool
call shows as a task line; a request for a person shows as a message with
Approve / Deny buttons, and the reply stops there; the turn's end closes the
reply, with a closing line when it ended without its answer. What the thread
shows is kept in the store as it changes (`DeliveryState`), so a process that
starts after a crash finishes that reply instead of posting a second one.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    ActionCompleted,
    ActionProgress,
    ActionRequested,
    AgentRuntime,
    InputRequest,
    InputRequested,
    JsonValue,
    MessageCompleted,
    MessageDelta,
    SessionKey,
    TurnEvent,
    TurnRecord,
    TurnSteered,
    UnknownTurnError,
    is_terminal,
)
from bot.slack.blocks import approval_blocks
from bot.slack.channel.children import show_child_step
from bot.slack.channel.delivery import Deliveries, DeliveryState, Thread, team_of, thread_of
from bot.slack.channel.endings import RETRYABLE_ENDINGS, closing_line
from bot.slack.channel.neighbours import Neighbours, ThreadsShowing
from bot.slack.channel.retrying import RetryOffer
from bot.slack.channel.stopping import StopMessage
from bot.slack.once import ASK_EVENT, REPLY_EVENT, look_for, post_once, tag
from bot.slack.reply import ThreadReply
from bot.texts import FOLLOW_UP_TAKEN, RETRYING

__all__ = ["MAX_FALLBACK_CHARS", "ReplyRenderer", "slack_error"]

logger = logging.getLogger("bot.slack")

MAX_FALLBACK_CHARS = 300
"""The notification text beside blocks: a summary (Slack refuses ~4,000 and more)."""


class ReplyRenderer:
    """Shows turns of one agent in their Slack threads.

    Args:
        runtime: Runs the turns (their streams and transcripts are read from it).
        agent: The agent whose turns these are.
        client: Slack's Web API, with the bot token.
        deliveries: Where what each thread shows is kept.
        flush_every: Seconds between appends to a streamed reply.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        agent: str,
        client: AsyncWebClient,
        deliveries: Deliveries,
        *,
        flush_every: float,
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.client = client
        self.deliveries = deliveries
        self.flush_every = flush_every
        self._threads = ThreadsShowing(deliveries)
        self._stoppers: dict[str, str] = {}
        """Who ended a turn from Slack (Stop, Withdraw), by turn id, until its end is shown."""

    def stopping(self, turn_id: str, by: str) -> None:
        """Note that ``by`` asked for ``turn_id`` to end: its closing line names them."""
        self._stoppers[turn_id] = by

    def stopper(self, turn_id: str) -> str | None:
        """Who ended ``turn_id`` from Slack, as noted in this process (forgotten once told)."""
        return self._stoppers.pop(turn_id, None)

    async def show(
        self,
        thread: Thread,
        turn_id: str,
        *,
        since: int | None,
        taking_up: bool,
        reader: str | None = None,
    ) -> TurnRecord | None:
        """Show the turn in its thread until it ends or waits for a person.

        Args:
            thread: Where the reply goes.
            turn_id: The turn.
            since: The transcript index this reply starts at: a continuation after
                an approval leaves what came before the request to the first reply
                (None: where the kept state says).
            taking_up: At start-up: carry on in the reply a stopped process left
                half written, as the kept state names it.
            reader: Who the reply is for when nobody spoke the turn (the person who
                approved its request): a stream in a channel must name someone.

        Returns:
            The turn's record as it stood when the showing began (None: no such turn).

        Raises:
            SlackApiError: Slack refused a message of the reply.
        """
        kept = DeliveryState()
        if since is None or taking_up:
            kept = await self.deliveries.load(thread.session_id, turn_id)
        # The reply is written again from its first message: the ones after it go.
        await self.delete(thread.channel, kept.more or ())
        session = self.runtime.session(self.agent, thread.session_id)
        record = next((t for t in await session.turns() if t.turn_id == turn_id), None)
        start = since if since is not None else (kept.since or 0)
        neighbours = self._threads.join(thread, turn_id)
        shown = _ShownReply(self, thread, turn_id, start, record, reader, neighbours)
        try:
            if kept.reply is not None or taking_up:  # a Stop button a stopped process put up
                await shown.stop.recover()
            if taking_up:  # a stopped process may have shown the ending, Retry included
                await shown.retry.recover()
            if kept.reply is not None:
                await shown.adopt(kept.reply)
            elif taking_up and kept.opening:  # a stream opened before a crash, its ts unkept
                await shown.recover()
            async for event in session.stream(turn_id):
                await shown.on(event)
        except UnknownTurnError:
            # a reset archived the turn: there is nothing left to show
            await shown.stop.remove()
            await self.deliveries.keep(thread.session_id, turn_id, None)
        finally:
            neighbours.leave()
        return record

    async def ask(self, thread: Thread, turn_id: str, asked: JsonValue, *, proactive: bool) -> None:
        """Show a request with its Approve / Deny buttons, and keep that it was shown."""
        request = InputRequest.from_dict(asked)
        blocks = approval_blocks(thread.session_id, turn_id, request)
        summary = f"Approval needed: {request.prompt}"[:MAX_FALLBACK_CHARS]
        call = asked.get("call_id") if isinstance(asked, dict) else None
        card = tag(ASK_EVENT, turn=turn_id, request=request.id, call=str(call or ""))
        # shown before a crash, or a replay: the card is up already
        shown = await look_for(self.client, thread.channel, thread.thread_ts, card)
        if shown is None:
            shown = await post_once(
                self.client, thread.channel, thread.thread_ts, card, text=summary, blocks=blocks
            )
        # the answer's continuation starts after everything the turn said so far
        since = len(await self.runtime.session(self.agent, thread.session_id).transcript())
        state = DeliveryState(asked=request.id, since=since, shown=shown)
        if proactive:
            # a request that opened the conversation is the root of its thread
            state = dataclasses.replace(
                state, channel=thread.channel, thread_ts=thread.thread_ts or shown
            )
        async with self.deliveries.writing:
            kept = await self.deliveries.load(thread.session_id, turn_id)
            if (kept.reply is not None or kept.opening) and (kept.since or 0) >= since:
                return  # a click was quicker: the continuation's own state is the newer
            await self.deliveries.keep(thread.session_id, turn_id, state)

    async def end_waiting(self, thread: Thread, turn_id: str, note: str) -> None:
        """End a turn's reply that stopped at a request, with ``note``, once (a withdrawal).

        The note is posted as the reply's continuation would be (the same tag), so a
        restart that shows the turn again finds it and posts no second.
        """
        kept = await self.deliveries.load(thread.session_id, turn_id)
        mark = tag(REPLY_EVENT, turn=turn_id, since=kept.since or 0, part=0)
        if await look_for(self.client, thread.channel, thread.thread_ts, mark) is None:
            await post_once(self.client, thread.channel, thread.thread_ts, mark, markdown_text=note)
        # as at the end of any reply: a turn nobody typed keeps that it was shown
        done = DeliveryState(done=True) if thread_of(thread.session_id) is None else None
        await self.deliveries.keep(thread.session_id, turn_id, done)

    async def intend(self, thread: Thread, turn_id: str) -> bool:
        """Keep that the thread is owed the turn's reply, before the turn is started.

        A process that dies before the reply's first message exists (the turn
        done or not) leaves this state, and the next start shows the reply. A
        state kept already is left as it is: another replica took the same message
        first and may be showing it (its reply's ts is in it). True if this kept it.
        """
        key = SessionKey(self.agent, thread.session_id)
        owed = DeliveryState(since=0).to_json()
        return await self.runtime.store.claim_delivery(key, turn_id, owed)

    async def delete(self, channel: str, messages: tuple[str, ...]) -> None:
        """Delete the bot's own messages (best effort)."""
        for ts in messages:
            try:
                await self.client.chat_delete(channel=channel, ts=ts)
            except SlackApiError as exc:
                logger.warning("could not delete reply %s: %s", ts, slack_error(exc))

    async def tell(self, user: str, thread: Thread, text: str) -> None:
        """Say ``text`` to ``user`` alone, in the thread (best effort)."""
        try:
            await self.client.chat_postEphemeral(
                channel=thread.channel, user=user, thread_ts=thread.thread_ts, text=text
            )
        except SlackApiError as exc:
            logger.error("could not tell %s privately: %s", user, slack_error(exc))


class _ShownReply:
    """One reply being shown: what the stream's handlers share while they write it."""

    def __init__(
        self,
        renderer: ReplyRenderer,
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
        self._opened: list[str] = []
        """The reply's messages, in order: one, unless it outgrew what a message holds."""
        speaker = record.input.event if record is not None else None
        after = str(speaker.data.get("ts")) if speaker and since == 0 else None
        # a turn nobody typed has nobody to stop it from its thread
        where = thread if not self._proactive else Thread(thread.channel, None, thread.session_id)
        self.stop = StopMessage(renderer.client, where, turn_id, after=after)
        """The message with the turn's Stop button, while it is at work."""
        self.retry = RetryOffer(renderer.client, thread, turn_id)
        """The message with its Retry button, once it failed or was interrupted."""
        self._reply = ThreadReply(
            renderer.client,
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
        )
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
            await self._reply.thinking()
        if event.type == "turn.started":
            self._at_work = True
        if isinstance(event, MessageDelta):
            await self._on_delta(event)
        elif isinstance(event, MessageCompleted):
            await self._on_message(event)
        elif isinstance(event, ActionRequested):
            await self._reply.task(event.call_id, event.name, "in_progress", note=event.note)
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
        await self._reply.finish(whole=self._in_order())
        here = Thread(self._thread.channel, self._reply.thread_ts, self._thread.session_id)
        for request in asked:
            await self._renderer.ask(here, self._turn_id, request, proactive=self._proactive)

    async def _on_end(self, event: TurnEvent) -> None:
        by = self._renderer.stopper(self._turn_id) if event.type == "turn.cancelled" else None
        # gone before the reply's last words land (which may open it): it stands alone
        self._at_work = False
        await self.stop.remove()
        await self._reply.finish(whole=self._in_order(), note=closing_line(event, by))
        if event.type in RETRYABLE_ENDINGS and not self._proactive:
            await self.retry.show(after=self._reply.ts)
        # A turn nobody typed may be delivered again (its firing, twice): keep that it was
        # shown. Any other turn's state is forgotten: nothing is owed to its thread.
        done = DeliveryState(done=True) if self._proactive else None
        await self._renderer.deliveries.keep(self._thread.session_id, self._turn_id, done)

    async def _keep_reply(self, ts: str) -> None:
        """Keep each new message of the reply as it opens: one too long goes on in the next."""
        self._opened.append(ts)
        if self._at_work:  # under the reply's first message, streamed or posted
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


def slack_error(exc: SlackApiError) -> Any:
    """The error code of a refusal from Slack's Web API (``channel_not_found``...)."""
    return exc.response.get("error")
