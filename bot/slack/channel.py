"""The Slack channel: a signed event becomes an attested turn; its reply lands in the thread.

Bolt acknowledges an event before its listener runs and keeps no reference to
the listener's task, so the listener only hands the event over: admitting the
turn and delivering its reply run in tasks this channel owns, waits for on
shutdown, and logs when they fail. The turn itself runs in the engine's
session worker; a crash leaves it on disk for the next start.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    AgentRuntime,
    ConflictError,
    InputRequest,
    InvalidAnswerError,
    JsonValue,
    ResumeAuthorizationError,
    ResumeConflictError,
    SessionKey,
    SessionSuspendedError,
    StoredAnswer,
    Suspended,
    TurnEvent,
    TurnRecord,
    UnknownTurnError,
    is_terminal,
)
from bot.slack.blocks import (
    Decision,
    approval_blocks,
    decided_blocks,
    expired_blocks,
    read_decision,
    who_may_answer,
)
from bot.slack.inbound import Ignored, Inbound, read_event
from bot.slack.reply import ThreadReply
from bot.texts import (
    CANCELLED,
    CLICK_FAILED,
    EXPIRED_REQUEST,
    FAILED_PREFIX,
    RETRYING,
    WAITING_FOR_APPROVAL,
    not_waiting,
    only_answerers,
)

if TYPE_CHECKING:
    from agent import TurnPolicy
    from bot.policies import PolicyBook

__all__ = ["SlackChannel"]

logger = logging.getLogger("bot.slack")

MAX_FALLBACK_CHARS = 300
"""The notification text beside blocks: a summary (Slack refuses ~4,000 and more)."""


class SlackChannel:
    """Turns of one agent, fed by Slack events and answered in their threads.

    Args:
        runtime: Runs the turns.
        agent: The agent that answers.
        client: Slack's Web API, with the bot token.
        bot_user_id: The bot's own user id (``auth.test``).
        replace_in_flight: A newer message in a thread supersedes the thread's
            unfinished turn (never one waiting for an approval).
        flush_every: Seconds between appends to a streamed reply.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        agent: str,
        client: AsyncWebClient,
        *,
        bot_user_id: str,
        replace_in_flight: bool = True,
        flush_every: float = 1.0,
        policies: PolicyBook | None = None,
    ) -> None:
        self.runtime = runtime
        self.policies = policies
        """The policies turns start under, by channel; None runs every turn on the base."""
        self.agent = agent
        self.client = client
        self.bot_user_id = bot_user_id
        self.replace_in_flight = replace_in_flight
        self.flush_every = flush_every
        self._tasks: set[asyncio.Task[None]] = set()
        self._claimed: set[str] = set()
        """Turns this process is admitting or answering: a second delivery waits for none."""
        self._watching: collections.Counter[str] = collections.Counter()
        """Claims on showing a turn, by turn id: a click, an admission, a start-up each hold
        one while they may show it; the runtime's events show a turn nobody claims."""
        self._admitting: dict[str, _Gate] = {}
        """One admission at a time per thread: which turn supersedes which is read and
        acted on together."""
        self._keeping = asyncio.Lock()
        """Delivery states that are read, then written, are written one at a time."""
        self._unsubscribe = runtime.add_sink(self)

    def close(self) -> None:
        """Stop watching the runtime's turns (those already shown run on until drained)."""
        self._unsubscribe()

    @property
    def in_flight(self) -> int:
        """How many of this channel's tasks (turns being admitted or shown) are still running."""
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run ``work`` in a task this channel keeps, and log it if it fails."""
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s failed", task.get_name(), exc_info=task.exception())

    async def drain(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for the tasks in flight, then cancel the rest.

        Tasks started meanwhile (a turn resumed while draining) are waited for too.
        """
        deadline = asyncio.get_running_loop().time() + grace
        while self._tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            await asyncio.wait(set(self._tasks), timeout=left)
        late = set(self._tasks)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    def on_event(self, body: dict[str, Any]) -> None:
        """Take a verified Events API envelope; the turn, if any, starts in a task of ours."""
        found = read_event(body, bot_user_id=self.bot_user_id)
        if isinstance(found, Ignored):
            logger.debug("event %s ignored: %s", body.get("event_id"), found.reason)
            return
        self.spawn(self._admit(found), name=f"admit {found.turn_id}")

    async def _admit(self, inbound: Inbound) -> None:
        turn_id = inbound.turn_id
        if turn_id in self._claimed:
            return  # the same message again (a retry, or its other event type)
        self._claimed.add(turn_id)
        try:
            key = SessionKey(self.agent, inbound.session_id)
            if inbound.needs_thread and not await self.runtime.store.has_session(key):
                return  # a thread the bot takes no part in: asked of the store, nothing loaded
            thread = _Thread(inbound.channel, inbound.thread_ts, inbound.session_id)
            async with self._admission(inbound.session_id):
                admitted = await self._start(inbound, thread)
            if admitted:
                await self._reply(thread, turn_id, since=0)
        finally:
            self._claimed.discard(turn_id)

    async def _start(self, inbound: Inbound, thread: _Thread) -> bool:
        """Admit the turn, superseding what it should; False if it is not to be shown here."""
        session = self.runtime.session(self.agent, inbound.session_id)
        turns = await session.turns()
        if any(t.turn_id == inbound.turn_id for t in turns):
            return False  # admitted before: its reply is on its way, or landed
        # a late retry of an older message must not supersede a newer one
        replace = self.replace_in_flight and not any(
            t.status in ("queued", "running") and _said_at(t) > float(inbound.input_ts)
            for t in turns
        )
        # the channel is the signed event's: no message can choose its own policy
        opening = dataclasses.replace(inbound.input, policy=await self.policy_for(inbound.channel))
        try:
            await session.start(opening, turn_id=inbound.turn_id, replace=replace)
        except SessionSuspendedError:
            speaker = inbound.input.user or ""
            await self._tell(inbound.channel, speaker, thread, WAITING_FOR_APPROVAL)
            return False
        self._watch(inbound.turn_id)  # before the engine may emit: the reply below is its
        return True

    async def policy_for(self, channel: str) -> TurnPolicy | None:
        """The policy a turn in ``channel`` starts under now (None: no policies are kept)."""
        return await self.policies.for_channel(channel) if self.policies else None

    @contextlib.asynccontextmanager
    async def _admission(self, session_id: str) -> AsyncIterator[None]:
        gate = self._admitting.setdefault(session_id, _Gate())
        gate.users += 1
        try:
            async with gate.lock:
                yield
        finally:
            gate.users -= 1
            if not gate.users:
                del self._admitting[session_id]  # nobody else waits: do not keep it

    def _watch(self, turn_id: str) -> None:
        self._watching[turn_id] += 1

    def _unwatch(self, turn_id: str) -> None:
        self._watching[turn_id] -= 1
        if self._watching[turn_id] <= 0:
            del self._watching[turn_id]

    def emit(self, event: TurnEvent) -> None:
        """See every turn start: one resumed with nobody watching (its request expired) is shown."""
        if event.type != "turn.started" or event.trigger != "resume" or event.agent != self.agent:
            return
        if event.session.startswith("slack:") and not self._watching[event.turn_id]:
            self._watch(event.turn_id)
            self.spawn(
                self._settled_elsewhere(event.session, event.turn_id),
                name=f"reply {event.turn_id}",
            )

    async def _settled_elsewhere(self, session_id: str, turn_id: str) -> None:
        """A request no click of ours settled (it expired): say so on it, then show the rest."""
        thread = await self._thread_for(session_id, turn_id)
        if thread is None:
            logger.error("turn %s went on, but where to show it is not known", turn_id)
            self._unwatch(turn_id)
            return
        try:
            key = SessionKey(self.agent, thread.session_id)
            state = _state(await self.runtime.store.load_delivery(key, turn_id))
            asked, shown = state.get("asked"), state.get("shown")
            if isinstance(asked, str) and isinstance(shown, str):
                session = self.runtime.session(self.agent, thread.session_id)
                answer = await session.answer_of(turn_id, asked)
                if answer is not None:
                    await self._show_settled(thread.channel, shown, answer)
        finally:
            await self._reply(thread, turn_id)

    async def _show_settled(self, channel: str, shown_ts: str, answer: StoredAnswer) -> None:
        """Replace a request's buttons with how it was settled, as its stored answer says."""
        prompt = answer.request.prompt
        if answer.expired:
            await self._replace_buttons(channel, shown_ts, EXPIRED_REQUEST, expired_blocks(prompt))
        elif answer.by is not None:
            await self._show_decided(channel, shown_ts, prompt, answer.by, answer.value is True)

    async def _show_decided(
        self, channel: str, shown_ts: str, prompt: str, by: str, approved: bool
    ) -> None:
        text = f"{'Approved' if approved else 'Denied'} by <@{by}>"
        blocks = decided_blocks(prompt, by=by, approved=approved)
        await self._replace_buttons(channel, shown_ts, text, blocks)

    async def _replace_buttons(
        self, channel: str, shown_ts: str, text: str, blocks: list[Any]
    ) -> None:
        """Update a request's message so it no longer offers its buttons (best effort)."""
        try:
            await self.client.chat_update(channel=channel, ts=shown_ts, text=text, blocks=blocks)
        except SlackApiError as exc:
            logger.error("could not show how request %s was settled: %s", shown_ts, _error(exc))

    async def _reply(
        self,
        thread: _Thread,
        turn_id: str,
        *,
        since: int | None = None,
        taking_up: bool = False,
        reader: str | None = None,
    ) -> None:
        """Show the turn in its thread until it ends or waits for a person.

        What the thread shows is kept in the store as it changes (the reply
        messages being written, the request shown), so a process that starts
        after a crash finishes that reply instead of posting a second one.

        Args:
            thread: Where the reply goes.
            turn_id: The turn.
            since: The transcript index this reply starts at: a continuation after
                an approval leaves what came before the request to the first reply
                (by default, where the kept state says).
            taking_up: At start-up: carry on in the reply a stopped process left
                half written, as the kept state names it.
            reader: Who the reply is for when nobody spoke the turn (the person who
                approved its request): a stream in a channel must name someone.

        The caller holds a claim on the turn (`_watch`); this releases it.
        """
        try:
            await self._show(thread, turn_id, since=since, taking_up=taking_up, reader=reader)
        except SlackApiError as exc:
            logger.error("turn %s: Slack refused the reply: %s", turn_id, _error(exc))
        except Exception:
            # a timeout or a dropped connection: the turn goes on, its reply is lost
            logger.exception("turn %s: its reply could not be delivered", turn_id)
        finally:
            self._unwatch(turn_id)

    async def _show(
        self,
        thread: _Thread,
        turn_id: str,
        *,
        since: int | None,
        taking_up: bool,
        reader: str | None = None,
    ) -> None:
        key = SessionKey(self.agent, thread.session_id)
        kept: dict[str, Any] = {}
        if since is None or taking_up:
            kept = _state(await self.runtime.store.load_delivery(key, turn_id))
        if since is None:
            since = kept["since"] if isinstance(kept.get("since"), int) else 0
        adopt = kept.get("reply") if isinstance(kept.get("reply"), str) else None
        await self._delete(thread.channel, kept.get("more"))  # rewritten from the first
        session = self.runtime.session(self.agent, thread.session_id)
        record = next((t for t in await session.turns() if t.turn_id == turn_id), None)
        speaker = record.input.event if record is not None else None
        opened: list[str] = [adopt] if adopt else []
        proactive = record is not None and record.input.trigger == "proactive"

        def place() -> dict[str, Any]:
            """Where a proactive turn is shown (its session says nothing of it)."""
            if not proactive:
                return {}
            return {"channel": thread.channel, "thread_ts": reply.thread_ts or thread.thread_ts}

        async def keep_reply(ts: str) -> None:
            opened.append(ts)  # a reply too long for one message goes on in the next
            state = {"reply": opened[0], "more": opened[1:], "since": since} | place()
            async with self._keeping:
                await self._keep(key, turn_id, state)

        reply = ThreadReply(
            self.client,
            channel=thread.channel,
            thread_ts=thread.thread_ts,
            recipient_user=speaker.user if speaker else reader,
            team=str(speaker.data.get("team")) if speaker else _team_of(thread.session_id),
            on_open=keep_reply,
            flush_every=self.flush_every,
        )
        if adopt is not None:
            await reply.adopt(adopt)
        # its turn.started may have gone by before this watched: the first event will do
        at_work = adopt is None and record is not None and record.is_unfinished
        said: dict[int, str] = {}
        """What the turn's steps committed for this reply, by transcript index."""
        attempt, new_step, step_streamed = 1, False, False
        try:
            async for event in session.stream(turn_id):
                if event.type == "turn.started" or at_work:
                    at_work = False
                    await reply.thinking()
                if event.type == "message.delta":
                    if event.attempt > attempt:  # the model's reply broke off and is asked again
                        attempt = event.attempt
                        await reply.add_text(f"\n\n{RETRYING}\n\n")
                    if new_step and reply.has_text:  # a step of its own: a paragraph of its own
                        await reply.add_text("\n\n")
                    new_step, step_streamed = False, True
                    await reply.add_text(event.text)
                elif event.type == "message.completed" and event.index >= since:
                    said[event.index] = event.text
                    if not step_streamed:  # a replayed step: its words come whole
                        await reply.add_text(f"\n\n{event.text}" if reply.has_text else event.text)
                    new_step, step_streamed = True, False
                elif event.type == "action.requested":
                    await reply.task(event.call_id, event.name, "in_progress", note=event.note)
                elif event.type == "action.completed":
                    await reply.task(
                        event.call_id, event.name, "error" if event.error else "complete"
                    )
                    new_step = True
                elif event.type == "input.requested":
                    call_id = event.request.get("call_id")
                    if isinstance(call_id, str):
                        await reply.waiting(call_id)
                    await reply.finish(whole=_in_order(said))
                    here = _Thread(thread.channel, reply.thread_ts, thread.session_id)
                    await self._ask(here, key, turn_id, event.request, place())
                elif is_terminal(event):
                    await reply.finish(whole=_in_order(said), note=_closing_line(event))
                    # a proactive turn may be delivered again (its firing, twice): say it was
                    await self._keep(key, turn_id, {"done": True} if proactive else None)
        except UnknownTurnError:
            await self._keep(key, turn_id, None)  # a reset archived it: nothing left to show

    async def _ask(
        self,
        thread: _Thread,
        key: SessionKey,
        turn_id: str,
        asked: dict[str, Any],
        place: dict[str, Any],
    ) -> None:
        """Show a request with its Approve / Deny buttons, and keep that it was shown."""
        request = InputRequest.from_dict(asked)
        blocks = approval_blocks(thread.session_id, turn_id, request)
        summary = f"Approval needed: {request.prompt}"[:MAX_FALLBACK_CHARS]
        posted = await self.client.chat_postMessage(
            channel=thread.channel, thread_ts=thread.thread_ts, text=summary, blocks=blocks
        )
        # the answer's continuation starts after everything the turn said so far
        since = len(await self.runtime.session(self.agent, key.session_id).transcript())
        shown = str(posted["ts"])
        async with self._keeping:
            kept = _state(await self.runtime.store.load_delivery(key, turn_id))
            if "reply" in kept and kept.get("since", 0) >= since:
                return  # a click was quicker: the continuation's own state is the newer
            if place and place.get("thread_ts") is None:
                place = place | {"thread_ts": shown}  # the request opened the conversation
            state = {"asked": request.id, "since": since, "shown": shown} | place
            await self._keep(key, turn_id, state)

    async def _keep(self, key: SessionKey, turn_id: str, state: JsonValue | None) -> None:
        """Keep (or forget, with None) what the thread shows of a turn, for the next start."""
        await self.runtime.store.save_delivery(key, turn_id, state)

    async def resume_replies(self) -> int:
        """Finish showing what a stopped process left unfinished or unshown (at start-up).

        Call it before the runtime's start: a resumed turn may end at once, and
        its reply must still reach the thread its speaker waits in (the reply's
        stream replays a turn that already ended). Covered: a turn still to run
        (its half-written reply is taken up), a turn that parked before its
        request was shown (it is shown now), and a turn that ended before its
        reply was finished.

        Returns:
            How many replies it took up.
        """
        kept = {
            (key.session_id, turn_id): _state(state)
            for key, turn_id, state in await self.runtime.store.deliveries(self.agent)
        }
        # a kept state means the thread is not done with the turn (it is forgotten at its end)
        owed = set(kept)
        proactive: set[tuple[str, str]] = set()
        for key, record in await self.runtime.store.unfinished_turns():
            if key.agent == self.agent:
                owed.add((key.session_id, record.turn_id))
                if record.input.trigger == "proactive":
                    proactive.add((key.session_id, record.turn_id))
        for key, record in await self.runtime.store.suspended_turns():
            at = (key.session_id, record.turn_id)
            if record.input.trigger == "proactive":
                proactive.add(at)
            parked = record.result
            request = parked.request.id if isinstance(parked, Suspended) else None
            if key.agent != self.agent:
                continue
            if kept.get(at, {}).get("asked") == request:
                owed.discard(at)  # its request is showing: the click does the rest
            else:
                owed.add(at)
        count = 0
        for session_id, turn_id in sorted(owed):
            if kept.get((session_id, turn_id), {}).get("done"):
                continue  # a proactive turn, shown to its end
            thread = await self._thread_for(session_id, turn_id)
            if thread is None:
                continue
            unclaimed = (session_id, turn_id) in proactive and (session_id, turn_id) not in kept
            if unclaimed and not await self._claim(thread, turn_id):
                continue  # a firing, taken up meanwhile by whoever delivers it
            self._watch(turn_id)  # before the runtime starts it: its events are ours
            self.spawn(self._reply(thread, turn_id, taking_up=True), name=f"reply {turn_id}")
            count += 1
        return count

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
        thread = _Thread(self.check_target(target), None, session_id)
        if not await self._claim(thread, turn_id):
            return  # shown already, or being shown (by another process, or a restart)
        self._watch(turn_id)
        try:
            await self._show(thread, turn_id, since=0, taking_up=False)
        except SlackApiError as exc:
            key = SessionKey(self.agent, session_id)
            await self._keep(key, turn_id, {"done": True, "refused": str(_error(exc))})
            raise
        finally:
            self._unwatch(turn_id)

    def check_target(self, target: JsonValue) -> str:
        """The channel id ``target`` names (``{"channel": "C…"}``), checked before a turn starts.

        Raises:
            ValueError: ``target`` names no channel.
        """
        channel = target.get("channel") if isinstance(target, dict) else None
        if not isinstance(channel, str) or not channel:
            raise ValueError(f"a Slack target names a channel, as {{'channel': 'C…'}}: {target!r}")
        return channel

    async def _claim(self, thread: _Thread, turn_id: str) -> bool:
        """Take on showing a proactive turn; False if someone (or something) already has."""
        key = SessionKey(self.agent, thread.session_id)
        where = {"channel": thread.channel, "thread_ts": thread.thread_ts}
        return await self.runtime.store.claim_delivery(key, turn_id, where)

    async def _thread_for(self, session_id: str, turn_id: str) -> _Thread | None:
        """Where a turn is shown: its session's thread, or where a proactive turn was put."""
        thread = _thread_of(session_id)
        if thread is not None:
            return thread
        key = SessionKey(self.agent, session_id)
        kept = _state(await self.runtime.store.load_delivery(key, turn_id))
        channel, root = kept.get("channel"), kept.get("thread_ts")
        if not isinstance(channel, str):
            turns = await self.runtime.session(self.agent, session_id).turns()
            target = next((t.input.target for t in turns if t.turn_id == turn_id), None)
            channel = target.get("channel") if isinstance(target, dict) else None
        if not isinstance(channel, str):
            return None
        return _Thread(channel, root if isinstance(root, str) else None, session_id)

    # -- Approve / Deny ---------------------------------------------------------------

    def on_decision(self, body: dict[str, Any]) -> None:
        """Take a verified click on Approve or Deny; it is settled in a task of ours."""
        actions = body.get("actions")
        decision = read_decision(actions[0]) if isinstance(actions, list) and actions else None
        user = body.get("user")
        clicker = user.get("id") if isinstance(user, dict) else None
        if decision is None or not isinstance(clicker, str):
            logger.warning("a button click this app cannot read was ignored")
            return
        container = body.get("container")
        shown = container.get("message_ts") if isinstance(container, dict) else None
        self.spawn(
            self._decide(decision, clicker, str(shown) if shown else None),
            name=f"decide {decision.turn_id}",
        )

    async def _decide(self, decision: Decision, clicker: str, shown_ts: str | None) -> None:
        """Answer the request a click names, by the clicker (attested: the payload was signed).

        The thread comes from the session the button was made for (or, for a turn
        nobody typed, from what was kept of where it is shown), never from the
        payload's other fields.
        """
        thread = await self._thread_for(decision.session_id, decision.turn_id)
        if thread is None:
            logger.warning(
                "a click on turn %s, whose thread is not known, was ignored", decision.turn_id
            )
            return
        turn_id = decision.turn_id
        self._watch(turn_id)  # this click shows the continuation, not the runtime's events
        try:
            resumed = await self._apply(decision, thread, clicker)
        except Exception:
            logger.exception("turn %s: a click could not be applied", turn_id)
            await self._tell(thread.channel, clicker, thread, CLICK_FAILED)
            resumed = None
        if resumed is None:
            self._unwatch(turn_id)
            return
        prompt, since = resumed
        if shown_ts is not None:
            await self._show_decided(thread.channel, shown_ts, prompt, clicker, decision.approved)
        await self._reply(thread, turn_id, since=since, reader=clicker)

    async def _apply(
        self, decision: Decision, thread: _Thread, clicker: str
    ) -> tuple[str, int] | None:
        """Resume the turn with the click; its prompt and where its continuation starts.

        None when the click answered nothing (the clicker has been told why).
        """
        session = self.runtime.session(self.agent, decision.session_id)
        parked = await session.suspended()
        since = len(await session.transcript())  # the continuation's first message comes next
        try:
            await session.resume(decision.turn_id, decision.input_id, decision.approved, by=clicker)
        except ResumeAuthorizationError:
            who = who_may_answer(parked.request) if parked else "someone else"
            await self._tell(thread.channel, clicker, thread, only_answerers(who))
            return None
        except ResumeConflictError as exc:
            await self._tell(thread.channel, clicker, thread, not_waiting(exc))
            if exc.expired:
                await self._expired_at_click(thread, decision)
            return None
        except (ConflictError, InvalidAnswerError) as exc:
            logger.warning("turn %s: a click could not be applied: %s", decision.turn_id, exc)
            await self._tell(thread.channel, clicker, thread, CLICK_FAILED)
            return None
        return (parked.request.prompt if parked else ""), since

    async def _expired_at_click(self, thread: _Thread, decision: Decision) -> None:
        """A click found its request past its time: the engine settled it as expired just now.

        Its continuation then runs with this click's claim on it, so the runtime's
        events leave it alone: show it here, unless someone already took it up.
        """
        key = SessionKey(self.agent, thread.session_id)
        kept = _state(await self.runtime.store.load_delivery(key, decision.turn_id))
        if kept.get("asked") == decision.input_id and "reply" not in kept:
            self._watch(decision.turn_id)
            self.spawn(
                self._settled_elsewhere(thread.session_id, decision.turn_id),
                name=f"reply {decision.turn_id}",
            )

    async def _delete(self, channel: str, messages: object) -> None:
        """Delete the bot's own messages (best effort)."""
        for ts in messages if isinstance(messages, list) else ():
            try:
                await self.client.chat_delete(channel=channel, ts=str(ts))
            except SlackApiError as exc:
                logger.warning("could not delete reply %s: %s", ts, _error(exc))

    async def _tell(self, channel: str, user: str, thread: _Thread, text: str) -> None:
        try:
            await self.client.chat_postEphemeral(
                channel=channel, user=user, thread_ts=thread.thread_ts, text=text
            )
        except SlackApiError as exc:
            logger.error("could not tell %s privately: %s", user, _error(exc))


@dataclass(slots=True)
class _Gate:
    """A thread's admission lock, and how many admissions hold it or wait for it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


@dataclass(frozen=True, slots=True)
class _Thread:
    """Where a turn's reply goes, and the session it belongs to."""

    channel: str
    thread_ts: str | None
    """None for a turn nobody typed, until its first message opens a thread."""
    session_id: str


def _thread_of(session_id: str) -> _Thread | None:
    """The thread of a Slack session id (``slack:<team>:<channel>:<thread_ts>``)."""
    parts = session_id.split(":")
    if len(parts) != 4 or parts[0] != "slack":
        return None
    return _Thread(parts[2], parts[3], session_id)


def _team_of(session_id: str) -> str | None:
    """The workspace of a Slack session id (``slack:<team>:…``)."""
    parts = session_id.split(":")
    return parts[1] if len(parts) > 2 and parts[0] == "slack" else None


def _said_at(record: TurnRecord) -> float:
    """When the message that opened a turn was sent (its Slack ts), 0 if not from Slack."""
    event = record.input.event
    try:
        return float(event.data.get("ts", 0)) if event is not None else 0.0
    except (TypeError, ValueError):
        return 0.0


def _closing_line(event: TurnEvent) -> str | None:
    """The line a reply ends with when its turn ended without its answer."""
    if event.type == "turn.failed":
        return f"{FAILED_PREFIX} {event.error}"
    if event.type == "turn.cancelled":
        return CANCELLED.get(event.reason, f"_(stopped: {event.reason})_")
    return None


def _in_order(said: dict[int, str]) -> list[str]:
    return [said[index] for index in sorted(said)]


def _state(kept: JsonValue | None) -> dict[str, Any]:
    """A kept delivery state as a dict (empty when none was kept)."""
    return kept if isinstance(kept, dict) else {}


def _error(exc: SlackApiError) -> object:
    return exc.response.get("error")
