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
from collections.abc import Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    AgentRuntime,
    InputRequest,
    JsonValue,
    SessionKey,
    TurnRecord,
    UnknownTurnError,
)
from bot.slack.blocks import approval_blocks
from bot.slack.channel.delivery import Deliveries, DeliveryState, Thread, team_of, thread_of
from bot.slack.channel.neighbours import ThreadsShowing
from bot.slack.channel.shown import ShownReply
from bot.slack.once import ASK_EVENT, REPLY_EVENT, look_for, post_once, tag
from bot.slack.workspaces import NotInstalled, Workspaces

__all__ = ["MAX_FALLBACK_CHARS", "ReplyRenderer", "slack_error"]

logger = logging.getLogger("bot.slack")

MAX_FALLBACK_CHARS = 300
"""The notification text beside blocks: a summary (Slack refuses ~4,000 and more)."""


class ReplyRenderer:
    """Shows turns of one agent in their Slack threads.

    Args:
        runtime: Runs the turns (their streams and transcripts are read from it).
        agent: The agent whose turns these are.
        workspaces: Slack's Web API in each workspace, with the bot's token there.
        deliveries: Where what each thread shows is kept.
        flush_every: Seconds between appends to a streamed reply.
        loading_messages: What the status line rotates through while a turn thinks.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        agent: str,
        workspaces: Workspaces,
        deliveries: Deliveries,
        *,
        flush_every: float,
        loading_messages: Sequence[str] = (),
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.workspaces = workspaces
        self.deliveries = deliveries
        self.flush_every = flush_every
        self.loading_messages = loading_messages
        """What the thread's status rotates through while a turn thinks."""
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
        session = self.runtime.session(self.agent, thread.session_id)
        record = next((t for t in await session.turns() if t.turn_id == turn_id), None)
        start = since if since is not None else (kept.since or 0)
        neighbours = self._threads.join(thread, turn_id)
        client = await self.client_for(thread.session_id)
        await self.delete(thread, kept.more or ())
        shown = ShownReply(self, client, thread, turn_id, start, record, reader, neighbours)
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
        client = await self.client_for(thread.session_id)
        shown = await look_for(client, thread.channel, thread.thread_ts, card)
        if shown is None:
            shown = await post_once(
                client, thread.channel, thread.thread_ts, card, text=summary, blocks=blocks
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
        client = await self.client_for(thread.session_id)
        if await look_for(client, thread.channel, thread.thread_ts, mark) is None:
            await post_once(client, thread.channel, thread.thread_ts, mark, markdown_text=note)
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

    async def client_for(self, session_id: str) -> AsyncWebClient:
        """Slack's Web API in the workspace of ``session_id``, as the bot there.

        Raises:
            NotInstalled: The app is not installed in that workspace (any more).
        """
        return (await self.workspaces.get(team_of(session_id))).client

    async def delete(self, thread: Thread, messages: tuple[str, ...]) -> None:
        """Delete the bot's own messages in ``thread``'s conversation (best effort)."""
        if not messages:
            return
        client = await self.client_for(thread.session_id)
        for ts in messages:
            try:
                await client.chat_delete(channel=thread.channel, ts=ts)
            except SlackApiError as exc:
                logger.warning("could not delete reply %s: %s", ts, slack_error(exc))

    async def tell(self, user: str, thread: Thread, text: str) -> None:
        """Say ``text`` to ``user`` alone, in the thread (best effort)."""
        try:
            client = await self.client_for(thread.session_id)
            await client.chat_postEphemeral(
                channel=thread.channel, user=user, thread_ts=thread.thread_ts, text=text
            )
        except (SlackApiError, NotInstalled) as exc:
            logger.error("could not tell %s privately: %s", user, _reason(exc))


def _reason(exc: Exception) -> Any:
    return slack_error(exc) if isinstance(exc, SlackApiError) else str(exc)


def slack_error(exc: SlackApiError) -> Any:
    """The error code of a refusal from Slack's Web API (``channel_not_found``...)."""
    return exc.response.get("error")
