"""The Slack channel: a signed event becomes an attested turn; its reply lands in the thread.

Slack never sends an acknowledged event again, so an event is acknowledged only
once its turn is admitted (in the store); showing its reply runs in a task this
channel keeps, waits for at shutdown, and logs when it fails (Bolt keeps no
reference to a listener's work). The turn itself runs in the engine's
session worker; a crash leaves it on disk for the next start.

The channel's parts, each in a module of its own: `delivery` (what a thread
shows of a turn, kept in the store), `render` (showing a turn, one handler per
event), `watching` (the tasks, and the claims on showing each turn),
`decisions` (Approve / Deny), `recovery` (replies owed at start-up, and
turns nobody typed), `stopping` (the Stop button) and `neighbours` (replies
shown in one thread at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slack_sdk.web.async_client import AsyncWebClient

from agent import AgentRuntime, JsonValue, SessionKey, SessionSuspendedError, TurnEvent, TurnRecord
from bot.config_file import FollowUps
from bot.slack.blocks import stamp, who_may_answer
from bot.slack.channel.decisions import Decisions
from bot.slack.channel.delivery import Deliveries, Thread
from bot.slack.channel.follow_ups import steered
from bot.slack.channel.recovery import Recovery, check_target
from bot.slack.channel.render import ReplyRenderer
from bot.slack.channel.watching import REPLY_RETRIES, Watching
from bot.slack.edits import Deleted, Edited, read_change
from bot.slack.files import read_files
from bot.slack.inbound import Ignored, Inbound, read_event
from bot.slack.workspaces import NotInstalled, OneWorkspace, Workspaces
from bot.surface_config import AgentSurface
from bot.texts import WAITING_FOR_APPROVAL, waiting_for_approval

if TYPE_CHECKING:
    from agent import AgentSession, TurnPolicy
    from bot.policies import PolicyBook

__all__ = ["SlackChannel", "waiting_for"]

logger = logging.getLogger("bot.slack")


class SlackChannel:
    """Turns of one agent, fed by Slack events and answered in their threads.

    Args:
        runtime: Runs the turns.
        agent: The agent that answers.
        client: Slack's Web API, with the bot token.
        bot_user_id: The bot's own user id (``auth.test``).
        replace_in_flight: A newer message in a thread supersedes the thread's
            unfinished turn (never one waiting for an approval), unless ``follow_ups``
            says otherwise for the channel.
        follow_ups: How a follow-up in a thread with a turn at work is taken, by
            channel: it supersedes that turn, steers it, or queues behind it.
        flush_every: Seconds between appends to a streamed reply.
        policies: The policies turns start under, by channel.
        reply_retries: Seconds before each new try at a reply Slack could not take
            for a passing reason (see `bot.slack.channel.watching`).
        surface: The words of the agent surface (greeting, prompts, loading lines).
        workspaces: The bot in each workspace it is installed in (OAuth); unset, the one
            of ``client`` and ``bot_user_id``.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        agent: str,
        client: AsyncWebClient,
        *,
        bot_user_id: str,
        replace_in_flight: bool = True,
        follow_ups: FollowUps | None = None,
        flush_every: float = 1.0,
        policies: PolicyBook | None = None,
        reply_retries: Sequence[float] = REPLY_RETRIES,
        surface: AgentSurface | None = None,
        workspaces: Workspaces | None = None,
    ) -> None:
        self.runtime = runtime
        self.policies = policies
        """The policies turns start under, by channel; None runs every turn on the base."""
        self.agent = agent
        self.client = client
        self.bot_user_id = bot_user_id
        self.workspaces = workspaces or OneWorkspace(client, team="", bot_user_id=bot_user_id)
        """The bot in each workspace: its client, and its user id there."""
        self.replace_in_flight = replace_in_flight
        self.follow_ups = follow_ups or FollowUps()
        deliveries = Deliveries(runtime, agent)
        self.surface = surface or AgentSurface()
        """The greeting, suggested prompts and loading lines (BOT_CONFIG's, or the defaults)."""
        self._renderer = ReplyRenderer(
            runtime,
            agent,
            self.workspaces,
            deliveries,
            flush_every=flush_every,
            loading_messages=self.surface.loading_messages,
        )
        self._watching = Watching(self._renderer, retries=reply_retries)
        self._decisions = Decisions(runtime, agent, self._renderer, deliveries, self._watching)
        self._recovery = Recovery(runtime, agent, self._renderer, deliveries, self._watching)
        self._admitting_now: set[str] = set()
        """Turns this process is admitting: the same message delivered again waits for none."""
        self._admissions: dict[str, _ThreadAdmission] = {}
        """One admission at a time per thread, so that which turn supersedes which is read
        and acted on together."""
        self._unsubscribe = runtime.add_sink(self)

    def close(self) -> None:
        """Stop watching the runtime's turns (those already shown run on until drained)."""
        self._unsubscribe()

    @property
    def in_flight(self) -> int:
        """How many of this channel's tasks (turns being admitted or shown) are still running."""
        return self._watching.in_flight

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run ``work`` in a task this channel keeps, and log it if it fails."""
        self._watching.spawn(work, name=name)

    async def drain(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for the tasks in flight, then cancel the rest.

        Tasks started meanwhile (a turn resumed while draining) are waited for too.
        """
        await self._watching.drain(grace)

    async def policy_for(self, channel: str) -> TurnPolicy | None:
        """The policy a turn in ``channel`` starts under now (None: no policies are kept)."""
        return await self.policies.for_channel(channel) if self.policies else None

    # -- intake ----------------------------------------------------------------------

    async def on_event(self, body: dict[str, Any]) -> None:
        """Take a verified Events API envelope: admit its turn, if any, before returning.

        The caller acknowledges the event to Slack only after this returns, and
        Slack never sends an acknowledged event again: so the turn is durably
        admitted first (a few milliseconds), and only its reply runs in a task
        of ours.
        """
        try:
            me = await self.workspaces.get(_team_of(body))
        except NotInstalled as exc:  # uninstalled since Slack sent it: nobody to answer as
            logger.info("event %s ignored: %s", body.get("event_id"), exc)
            return
        found: Inbound | Ignored = read_event(body, bot_user_id=me.bot_user_id)
        if isinstance(found, Ignored) and _is_change(body):
            found = await self._changed(read_change(body, bot_user_id=me.bot_user_id))
        if isinstance(found, Ignored):
            logger.debug("event %s ignored: %s", body.get("event_id"), found.reason)
            return
        thread = await self._admit(found)
        if thread is not None:
            self.spawn(
                self._watching.reply(thread, found.turn_id, since=0),
                name=f"reply {found.turn_id}",
            )

    async def _changed(self, change: Edited | Deleted | Ignored) -> Inbound | Ignored:
        """The turn an edit asks for, if any; a deletion cancels its message's turn here."""
        if isinstance(change, Ignored):
            return change
        if isinstance(change, Edited) and change.newly_mentioned:
            return change.inbound  # asked for the first time: the message's own turn
        session_id = change.inbound.session_id if isinstance(change, Edited) else change.session_id
        turn_id = change.original_turn if isinstance(change, Edited) else change.turn_id
        key = SessionKey(self.agent, session_id)
        if not await self.runtime.store.has_session(key):
            return Ignored("a changed message of a thread the bot takes no part in")
        session = self.runtime.session(self.agent, session_id)
        turn = next((t for t in await session.turns() if t.turn_id == turn_id), None)
        if turn is None or not turn.is_unfinished:
            return Ignored("a changed message whose turn is over, or never was")
        if isinstance(change, Edited):
            return change.inbound  # supersedes the turn it changes, as a follow-up would
        await session.cancel(turn_id, reason="deleted")  # the reply says the question went
        return Ignored("a deleted question: its turn was cancelled")

    async def _admit(self, inbound: Inbound) -> Thread | None:
        """Admit the inbound turn; the thread to show its reply in, or None if not here."""
        turn_id = inbound.turn_id
        if turn_id in self._admitting_now:
            return None  # the same message again (a retry, or its other event type)
        self._admitting_now.add(turn_id)
        try:
            key = SessionKey(self.agent, inbound.session_id)
            if inbound.needs_thread and not await self.runtime.store.has_session(key):
                return None  # a thread the bot takes no part in: asked of the store alone
            thread = Thread(inbound.channel, inbound.thread_ts, inbound.session_id)
            async with self._admission(inbound.session_id):
                admitted = await self._start(inbound, thread)
            return thread if admitted else None
        finally:
            self._admitting_now.discard(turn_id)

    async def _start(self, inbound: Inbound, thread: Thread) -> bool:
        """Admit the turn, superseding what it should; False if it is not to be shown here."""
        session = self.runtime.session(self.agent, inbound.session_id)
        turns = await session.turns()
        if any(t.turn_id == inbound.turn_id for t in turns):
            return False  # admitted before: its reply is on its way, or landed
        mode = self.follow_ups.mode_in(inbound.channel, replace_in_flight=self.replace_in_flight)
        if mode == "steer" and await steered(session, inbound, turns):
            return False  # the turn at work takes it in, and its reply shows that
        # a late retry of an older message must not supersede a newer one
        replace = mode == "replace" and not any(
            t.status in ("queued", "running") and _said_at(t) > float(inbound.input_ts)
            for t in turns
        )
        # the channel is the signed event's: no message can choose its own policy
        opening = dataclasses.replace(inbound.input, policy=await self.policy_for(inbound.channel))
        if inbound.files:  # read before admission, within seconds (see bot.slack.files)
            client = await self._renderer.client_for(inbound.session_id)
            files = await read_files(client, inbound.files)
            opening = dataclasses.replace(opening, files=files)
        # kept before anything is shown
        intended = await self._renderer.intend(thread, inbound.turn_id)
        try:
            await session.start(opening, turn_id=inbound.turn_id, replace=replace)
        except SessionSuspendedError:
            if intended:
                await self._renderer.deliveries.keep(inbound.session_id, inbound.turn_id, None)
            speaker = inbound.input.user or ""
            await self._renderer.tell(speaker, thread, await waiting_for(session))
            return False
        if session.was_handed_over(inbound.turn_id):
            return False  # another replica writes the thread: it runs the turn, and shows it
        if self._watching.is_claimed(inbound.turn_id):
            return False  # shown here already: a start-up took up what a dead process owed it
        # Claimed before the engine can emit the turn's first event, so that the reply
        # this admission shows is the only one.
        self._watching.claim(inbound.turn_id)
        return True

    @contextlib.asynccontextmanager
    async def _admission(self, session_id: str) -> AsyncIterator[None]:
        admission = self._admissions.setdefault(session_id, _ThreadAdmission())
        admission.holders += 1
        try:
            async with admission.lock:
                yield
        finally:
            admission.holders -= 1
            if not admission.holders:
                del self._admissions[session_id]  # nobody waits for this thread: drop its lock

    def emit(self, event: TurnEvent) -> None:
        """See every turn start here that nobody here shows, and show it.

        One resumed with nobody watching (its request expired) says how its request
        was settled, then goes on. One a person's message opened was admitted by
        another process, which died or froze since (this one took the session
        over): its reply is taken up where that process left it.
        """
        if event.type != "turn.started" or event.agent != self.agent or event.parent:
            return  # a delegated turn is shown by the reply of the turn that delegated it
        if not event.session.startswith("slack:") or self._watching.is_claimed(event.turn_id):
            return
        if event.trigger == "resume":
            work = self._decisions.settled_elsewhere(event.session, event.turn_id)
        elif event.trigger == "inbound":
            work = self._recovery.take_over(event.session, event.turn_id)
        else:
            return  # a schedule's firing: shown by whoever claimed its delivery
        self._watching.claim(event.turn_id)
        self.spawn(work, name=f"reply {event.turn_id}")

    # -- clicks, start-up and turns nobody typed ----------------------------------------

    @property
    def decisions(self) -> Decisions:
        """What settles the answers to requests (and withdraws them)."""
        return self._decisions

    def on_decision(self, body: dict[str, Any]) -> None:
        """Take a verified click on Approve or Deny; it is settled in a task of ours."""
        self._decisions.on_decision(body)

    async def retry(self, thread: Thread, turn_id: str) -> str:
        """Ask a failed or interrupted turn's question again in its thread, and show it.

        The new turn is ``<turn id>.retry``, so a second click on the same Retry shows
        that retry rather than making another. Its reply is promised to the thread
        before the turn is admitted, as a message's is, so a process that dies between
        the two shows it at the next start.

        Returns:
            The new turn's id.

        Raises:
            ConflictError: The turn cannot be retried (it completed, or has not ended).
            UnknownTurnError: A reset archived it.
            SessionSuspendedError: The thread waits for an approval.
        """
        new_id = f"{turn_id}.retry"
        session = self.runtime.session(self.agent, thread.session_id)
        if any(t.turn_id == new_id for t in await session.turns()):
            return new_id  # retried already: whoever did shows it
        # Promised first; a promise kept already is another click's, which shows it.
        intended = await self._renderer.intend(thread, new_id)
        try:
            await session.retry(turn_id, new_turn_id=new_id)
        except Exception:
            if intended:  # nothing was admitted: nothing is owed
                await self._renderer.deliveries.keep(thread.session_id, new_id, None)
            raise
        if intended and not self._watching.is_claimed(new_id):
            self._watching.claim(new_id)
            self.spawn(self._watching.reply(thread, new_id, since=0), name=f"reply {new_id}")
        return new_id

    async def resume_replies(self) -> int:
        """Finish showing what a stopped process left unfinished or unshown (at start-up).

        Call it before the runtime's start (see `Recovery.resume_replies`).

        Returns:
            How many replies it took up.
        """
        return await self._recovery.resume_replies()

    async def deliver(self, session_id: str, turn_id: str, target: JsonValue) -> None:
        """Show a turn nobody typed as a new conversation in ``target``'s channel.

        ``target`` is ``{"channel": "C…"}``. The reply opens a message at the top of
        the channel; what follows it (a request, the rest of the reply) goes in
        its thread. Delivering a turn that was, or is being, delivered does
        nothing, so a schedule's firing delivered twice posts once.

        Raises:
            ValueError: ``target`` names no channel.
            SlackApiError: Slack refused what the turn had to show. It is not tried
                again at the next start (that could post it days late): the caller
                hears why now.
        """
        await self._recovery.deliver(session_id, turn_id, target)

    def check_target(self, target: JsonValue) -> str:
        """The channel id ``target`` names (``{"channel": "C…"}``), checked before a turn starts.

        Raises:
            ValueError: ``target`` names no channel.
        """
        return check_target(target)


def _team_of(body: dict[str, Any]) -> str | None:
    """The workspace an event is for: the envelope's (the installing one's)."""
    team = body.get("team_id")
    return team if isinstance(team, str) and team else None


def _is_change(body: dict[str, Any]) -> bool:
    event = body.get("event")
    return isinstance(event, dict) and event.get("subtype") in (
        "message_changed",
        "message_deleted",
    )


@dataclass(slots=True)
class _ThreadAdmission:
    """A thread's admission lock, and how many admissions hold it or wait for it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    holders: int = 0


def _said_at(record: TurnRecord) -> float:
    """When the message that opened a turn was sent (its Slack ts), 0 if not from Slack."""
    event = record.input.event
    try:
        return float(event.data.get("ts", 0)) if event is not None else 0.0
    except (TypeError, ValueError):
        return 0.0


async def waiting_for(session: AgentSession) -> str:
    """What to tell someone whose message the thread cannot take: who may answer, until when."""
    pending = await session.pending()
    if not pending:
        return WAITING_FOR_APPROVAL
    request = pending[0]
    until = stamp(request.expires_at) if request.expires_at is not None else None
    return waiting_for_approval(who_may_answer(request), until)
