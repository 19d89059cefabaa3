"""Replies a stopped process still owed, and turns nobody typed, shown once each.

At start-up the store says what is owed: a delivery state is kept while a turn
is being shown and forgotten at the end of its reply, so each state left is a
reply to finish. A turn still to run, or waiting on a request nobody was shown,
is owed too. A turn nobody typed (a schedule's firing) is shown by whoever
claims it first in the store, so two processes delivering it post it once.

A stream carries no tag until it stops, so a process that died between opening
a stream and keeping its ts left an untagged message only the reply that was
opening it may take (its kept state says so). Those are settled first, one by
one and before any reply goes on, so no other reply of the thread, taken up or
new, can take one for its own.
"""

from __future__ import annotations

import dataclasses
import logging

from slack_sdk.errors import SlackApiError

from agent import AgentRuntime, JsonValue, Suspended
from bot.slack.channel.delivery import Deliveries, DeliveryState, Thread, messages_of_others
from bot.slack.channel.render import ReplyRenderer, slack_error
from bot.slack.channel.watching import Watching
from bot.slack.once import REPLY_EVENT, CannotTell, look_for, tag

__all__ = ["Recovery", "check_target"]

logger = logging.getLogger("bot.slack")

Owed = tuple[str, str]
"""A turn owed a reply: its session id and turn id."""


class Recovery:
    """Takes up the replies of one agent's turns that no process is showing."""

    def __init__(
        self,
        runtime: AgentRuntime,
        agent: str,
        renderer: ReplyRenderer,
        deliveries: Deliveries,
        watching: Watching,
    ) -> None:
        self._runtime = runtime
        self._agent = agent
        self._renderer = renderer
        self._deliveries = deliveries
        self._watching = watching

    async def resume_replies(self) -> int:
        """Finish showing what a stopped process left unfinished or unshown (at start-up).

        Call it before the runtime's start: a resumed turn may end at once, and
        its reply must still reach the thread its speaker waits in (the reply's
        stream replays a turn that already ended). Covered: a turn still to run
        (its half-written reply is taken up), a turn that was suspended before
        its request was shown (it is shown now), and a turn that ended before
        its reply was finished.

        Returns:
            How many replies it took up.
        """
        kept = await self._deliveries.every_kept()
        owed, proactive = await self._owed(kept)
        # a session a live replica writes is its to show, half-opened streams and all
        elsewhere = {
            session_id
            for session_id in {s for s, _ in owed}
            if await self._runtime.session(self._agent, session_id).is_written_elsewhere()
        }
        for (session_id, turn_id), state in sorted(kept.items()):
            if state.opening and session_id not in elsewhere:
                settled = await self._settle_opening(session_id, turn_id, state, kept)
                kept[session_id, turn_id] = settled
        count = 0
        for session_id, turn_id in sorted(owed):
            if kept.get((session_id, turn_id), DeliveryState()).done:
                continue  # a turn nobody typed, shown to its end
            if session_id in elsewhere:
                continue
            if not await self._is_admitted(session_id, turn_id):
                # The process died between keeping that the reply is owed and admitting the
                # turn: the event was never acknowledged, so Slack sends it again, and that
                # delivery shows it (its speaker known, so it streams).
                continue
            thread = await self._deliveries.thread_for(session_id, turn_id)
            if thread is None:
                continue
            unclaimed = (session_id, turn_id) in proactive and (session_id, turn_id) not in kept
            if unclaimed and not await self._deliveries.claim(thread, turn_id):
                continue  # the process delivering this firing claimed it meanwhile
            # Claimed before the runtime starts the turn, so its events are ours to show.
            self._watching.claim(turn_id)
            self._watching.spawn(
                self._watching.reply(thread, turn_id, taking_up=True), name=f"reply {turn_id}"
            )
            count += 1
        return count

    async def _is_admitted(self, session_id: str, turn_id: str) -> bool:
        """Whether the store has the turn, live or archived by a reset (its state then goes)."""
        session = self._runtime.session(self._agent, session_id)
        if any(t.turn_id == turn_id for t in await session.turns()):
            return True
        stored = await self._runtime.store.load(session.key)
        return turn_id in stored.turns or turn_id in stored.retired

    async def take_over(self, session_id: str, turn_id: str) -> None:
        """Show the rest of a turn this process took over from a replica that died or froze.

        As at start-up, for one turn: a stream the other was opening is settled
        first, then the reply is taken up where its kept state says. The caller
        holds a claim on the turn; the reply gives it back.
        """
        try:
            kept = await self._deliveries.every_kept()
            state = kept.get((session_id, turn_id))
            if state is not None and state.opening:
                await self._settle_opening(session_id, turn_id, state, kept)
            thread = await self._deliveries.thread_for(session_id, turn_id)
        except BaseException:
            self._watching.release(turn_id)
            raise
        if thread is None:
            logger.error("turn %s was taken over, but where to show it is not known", turn_id)
            self._watching.release(turn_id)
            return
        logger.info("turn %s: taken over from another process; its reply goes on here", turn_id)
        await self._watching.reply(thread, turn_id, taking_up=True)

    async def _settle_opening(
        self, session_id: str, turn_id: str, state: DeliveryState, kept: dict[Owed, DeliveryState]
    ) -> DeliveryState:
        """Keep which message a stopped reply was opening as its own, if Slack holds one.

        ``kept`` is every state kept, as settled so far: the other turns' messages in it
        are never taken.
        """
        thread = await self._deliveries.thread_for(session_id, turn_id)
        if thread is None or thread.thread_ts is None:
            return state  # a stream opens only in a thread
        earlier = (state.reply, *(state.more or ())) if state.reply is not None else ()
        mark = tag(REPLY_EVENT, turn=turn_id, since=state.since or 0, part=len(earlier))
        held = messages_of_others(kept, session_id, turn_id)
        client = await self._renderer.client_for(thread.session_id)
        try:
            found = await look_for(
                client, thread.channel, thread.thread_ts, mark, True, skip=held | set(earlier)
            )
        except CannotTell as exc:  # the reply looks again itself when it is taken up
            logger.warning("turn %s: its opened stream is not known: %s", turn_id, exc)
            return state
        if found is None:
            settled = dataclasses.replace(state, opening=False)
        elif state.reply is None:
            settled = dataclasses.replace(state, reply=found, more=(), opening=False)
        else:  # a later message of the reply: it goes, as the reply is written again
            settled = dataclasses.replace(state, more=(*(state.more or ()), found), opening=False)
        await self._deliveries.keep(session_id, turn_id, settled)
        return settled

    async def _owed(self, kept: dict[Owed, DeliveryState]) -> tuple[set[Owed], set[Owed]]:
        """The turns owed a reply, and which of them nobody typed."""
        # A kept state means its thread is not done with the turn (it is forgotten at its end).
        owed = set(kept)
        proactive: set[Owed] = set()
        store = self._runtime.store
        for key, record in await store.unfinished_turns():
            if key.agent == self._agent:
                owed.add((key.session_id, record.turn_id))
                if record.input.trigger == "proactive":
                    proactive.add((key.session_id, record.turn_id))
        for key, record in await store.suspended_turns():
            at = (key.session_id, record.turn_id)
            if record.input.trigger == "proactive":
                proactive.add(at)
            suspended = record.result
            # the card kept as shown is the last of the batch's requests to be shown
            request = suspended.requests[-1].id if isinstance(suspended, Suspended) else None
            if key.agent != self._agent:
                continue
            if kept.get(at, DeliveryState()).asked == request:
                owed.discard(at)  # its request is showing: the click does the rest
            else:
                owed.add(at)
        return owed, proactive

    async def deliver(self, session_id: str, turn_id: str, target: JsonValue) -> None:
        """Show a turn nobody typed as a new conversation in ``target``'s channel.

        See `bot.slack.channel.SlackChannel.deliver`.

        Raises:
            ValueError: ``target`` names no channel.
            SlackApiError: Slack refused what the turn had to show.
        """
        thread = Thread(check_target(target), None, session_id)
        if not await self._deliveries.claim(thread, turn_id):
            return  # shown already, or being shown (by another process, or a restart)
        self._watching.claim(turn_id)
        try:
            await self._renderer.show(thread, turn_id, since=0, taking_up=False)
        except SlackApiError as exc:
            refused = DeliveryState(done=True, refused=str(slack_error(exc)))
            await self._deliveries.keep(session_id, turn_id, refused)
            raise
        finally:
            self._watching.release(turn_id)


def check_target(target: JsonValue) -> str:
    """The channel id ``target`` names (``{"channel": "C…"}``), checked before a turn starts.

    Raises:
        ValueError: ``target`` names no channel.
    """
    channel = target.get("channel") if isinstance(target, dict) else None
    if not isinstance(channel, str) or not channel:
        raise ValueError(f"a Slack target names a channel, as {{'channel': 'C…'}}: {target!r}")
    return channel
