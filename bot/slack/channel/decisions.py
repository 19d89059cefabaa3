"""Answers to requests: a click or a typed answer settles the request it names, and shows it.

The click (or the modal's submission) is signed by Slack, so its user is the
attested answerer; which turn and thread it is about comes from the button's
value (or the modal's metadata) and the session it was made for, never from
the payload's other fields. A ``{"policy": ...}`` request is granted by the
agent's ``authorize_answer`` hook (`grant_answer`) before it is answered. A
request can also be settled without an answer of ours (it expired, or an
admin withdrew it); its buttons are then replaced in the same way.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from agent import (
    AgentRuntime,
    AssistantMessage,
    AuthorizeAnswerError,
    ConflictError,
    InputRequest,
    InvalidAnswerError,
    JsonValue,
    Message,
    PolicyAnswerer,
    ResumeAuthorizationError,
    ResumeConflictError,
    StoredAnswer,
    grant_answer,
)
from bot.slack.blocks import (
    Decision,
    decided_blocks,
    expired_blocks,
    options_of,
    read_decision,
    shown_answer,
    who_may_answer,
    withdrawn_blocks,
)
from bot.slack.channel.delivery import Deliveries, Thread
from bot.slack.channel.render import ReplyRenderer, slack_error
from bot.slack.channel.watching import Watching
from bot.slack.once import ASK_EVENT, look_for, tag
from bot.texts import (
    CLICK_FAILED,
    EXPIRED_REQUEST,
    NOTHING_TO_WITHDRAW,
    not_waiting,
    only_answerers,
    withdrawn,
    withdrawn_by,
)

__all__ = ["Decisions"]

logger = logging.getLogger("bot.slack")


class Decisions:
    """Settles the answers to one agent's requests, and shows how each request ended."""

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

    @property
    def renderer(self) -> ReplyRenderer:
        """What shows turns and tells people things privately."""
        return self._renderer

    async def thread_of(self, session_id: str, turn_id: str) -> Thread | None:
        """Where a turn is shown: the session's thread, or what was kept for a turn nobody typed."""
        return await self._deliveries.thread_for(session_id, turn_id)

    async def waiting_request(self, decision: Decision) -> InputRequest | None:
        """The request a click names, if its turn still waits on it."""
        session = self._runtime.session(self._agent, decision.session_id)
        suspended = await session.suspended()
        if suspended is None or suspended.turn_id != decision.turn_id:
            return None
        return suspended.request_for(decision.input_id)

    def on_decision(self, body: dict[str, Any]) -> None:
        """Take a verified click on an answer button; it is settled in a task of the channel's."""
        actions = body.get("actions")
        decision = read_decision(actions[0]) if isinstance(actions, list) and actions else None
        user = body.get("user")
        clicker = user.get("id") if isinstance(user, dict) else None
        if decision is None or not isinstance(clicker, str):
            logger.warning("a button click this app cannot read was ignored")
            return
        self._watching.spawn(
            self._decide(decision, clicker, shown_ts(body)), name=f"decide {decision.turn_id}"
        )

    async def submit(
        self, decision: Decision, value: JsonValue, by: str, shown: str | None
    ) -> str | None:
        """A typed answer: None once it is applied (the turn is shown going on), else why not.

        It is applied before this returns, so that a modal can say what was wrong.
        """
        thread = await self.thread_of(decision.session_id, decision.turn_id)
        if thread is None:
            return "This request's conversation is not known here."
        self._watching.claim(decision.turn_id)
        try:
            resumed = await self._resume(decision, value, thread, by, privately=False)
        except Exception:
            self._watching.release(decision.turn_id)
            raise
        if resumed is None or isinstance(resumed, str):
            self._watching.release(decision.turn_id)
            return resumed
        self._watching.spawn(
            self._go_on(thread, decision, resumed, by, shown), name=f"answer {decision.turn_id}"
        )
        return None

    async def withdraw(self, decision: Decision, by: str, shown: str | None) -> None:
        """An admin withdraws the request a click names: its turn ends, cancelled."""
        thread = await self.thread_of(decision.session_id, decision.turn_id)
        request = await self.waiting_request(decision)
        if thread is None or request is None:
            if thread is not None:
                await self._renderer.tell(by, thread, NOTHING_TO_WITHDRAW)
            return
        session = self._runtime.session(self._agent, decision.session_id)
        await session.cancel(decision.turn_id, reason="withdrawn")
        logger.info("turn %s: request %s withdrawn by %s", decision.turn_id, request.id, by)
        if shown is not None:
            blocks = withdrawn_blocks(request.prompt, by=by)
            await self._replace_buttons(thread, shown, withdrawn(by), blocks)
        await self._renderer.end_waiting(thread, decision.turn_id, withdrawn_by(by))

    async def settled_elsewhere(self, session_id: str, turn_id: str) -> None:
        """A request no answer of ours settled (it expired): say so on it, then show the rest.

        The caller holds a claim on the turn; the reply gives it back.
        """
        thread = await self._deliveries.thread_for(session_id, turn_id)
        if thread is None:
            logger.error("turn %s went on, but where to show it is not known", turn_id)
            self._watching.release(turn_id)
            return
        try:
            state = await self._deliveries.load(thread.session_id, turn_id)
            if state.asked is not None and state.shown is not None:
                session = self._runtime.session(self._agent, thread.session_id)
                answer = await session.answer_of(turn_id, state.asked)
                if answer is not None:
                    await self._show_settled(thread, state.shown, answer)
        finally:
            await self._watching.reply(thread, turn_id)

    async def _decide(self, decision: Decision, clicker: str, shown: str | None) -> None:
        """Answer the request a click names, by the clicker, and show the turn go on.

        The thread comes from the session the button was made for (or, for a turn
        nobody typed, from what was kept of where it is shown).
        """
        thread = await self.thread_of(decision.session_id, decision.turn_id)
        if thread is None:
            logger.warning(
                "a click on turn %s, whose thread is not known, was ignored", decision.turn_id
            )
            return
        turn_id = decision.turn_id
        # This click shows the continuation; the runtime's events leave it alone.
        self._watching.claim(turn_id)
        value: JsonValue = decision.approved
        try:
            if decision.action == "choose":
                value = await self._option(decision)
            resumed = await self._resume(decision, value, thread, clicker, privately=True)
        except Exception:
            logger.exception("turn %s: a click could not be applied", turn_id)
            await self._renderer.tell(clicker, thread, CLICK_FAILED)
            resumed = None
        handed = self._runtime.session(self._agent, decision.session_id).was_handed_over(turn_id)
        if resumed is None or isinstance(resumed, str) or handed:
            # handed over: the replica that writes the thread shows the answer and goes on
            self._watching.release(turn_id)
            return
        await self._go_on(thread, decision, resumed, clicker, shown)

    async def _option(self, decision: Decision) -> JsonValue:
        """The option a click chose, from the request the turn waits on."""
        request = await self.waiting_request(decision)
        options = options_of(request) if request is not None else None
        if options is None or decision.option is None or decision.option >= len(options):
            # not waiting (any more): let the resume say how it was settled
            return None
        return options[decision.option]

    async def _go_on(
        self,
        thread: Thread,
        decision: Decision,
        resumed: tuple[str, int, JsonValue],
        by: str,
        shown: str | None,
    ) -> None:
        prompt, since, value = resumed
        if shown is not None:
            await self._show_decided(thread, shown, prompt, by, value)
        await self._show_expired_beside(thread, decision.turn_id, decision.input_id)
        await self._watching.reply(thread, decision.turn_id, since=since, reader=by)

    async def _show_expired_beside(self, thread: Thread, turn_id: str, clicked: str) -> None:
        """Settle the cards of requests of the clicked one's batch that expired meanwhile.

        An expiry that leaves the turn waiting on other requests emits nothing, so its
        card is brought up to date here, by the click that lets the turn go on.
        """
        session = self._runtime.session(self._agent, thread.session_id)
        steps = await self._runtime.store.load_steps(session.key, turn_id)
        answers = [StoredAnswer.from_memo(memo) for memo in steps.values()]
        settled = {a.request.call_id: a for a in answers if a is not None}
        clicked_call = next((c for c, a in settled.items() if a.request.id == clicked), None)
        batch = _batch_of(await session.transcript(), clicked_call)
        for call_id in batch - {clicked_call}:
            answer = settled.get(call_id)
            if answer is None or not answer.expired:
                continue  # open still, or decided by its own click (which showed it)
            request = answer.request
            card = tag(ASK_EVENT, turn=turn_id, request=request.id, call=request.call_id)
            client = await self._renderer.client_for(thread.session_id)
            shown = await look_for(client, thread.channel, thread.thread_ts, card)
            if shown is not None:
                await self._show_settled(thread, shown, answer)

    async def _resume(
        self, decision: Decision, value: JsonValue, thread: Thread, by: str, *, privately: bool
    ) -> tuple[str, int, JsonValue] | str | None:
        """Resume the turn with the answer: its prompt, where its continuation starts, the value.

        Otherwise what was wrong: told privately (then None), or returned as text.
        """
        session = self._runtime.session(self._agent, decision.session_id)
        suspended = await session.suspended()
        asked = suspended.request_for(decision.input_id) if suspended is not None else None
        since = len(await session.transcript())  # the continuation's first message comes next
        refusal: str | None = None
        try:
            granted = None
            if asked is not None and isinstance(asked.answerers, PolicyAnswerer):
                granted = await grant_answer(
                    session, turn_id=decision.turn_id, input_id=decision.input_id, by=by
                )
            await session.resume(decision.turn_id, decision.input_id, value, by=by, granted=granted)
        except ResumeAuthorizationError:
            who = who_may_answer(asked) if asked is not None else "someone else"
            refusal = only_answerers(who)
        except ResumeConflictError as exc:
            refusal = not_waiting(exc)
            if exc.expired:
                await self._expired_at_click(thread, decision)
        except InvalidAnswerError as exc:
            if privately:
                logger.warning("turn %s: a click could not be applied: %s", decision.turn_id, exc)
                refusal = CLICK_FAILED
            else:
                refusal = str(exc).split(": ", 1)[-1]
        except (ConflictError, AuthorizeAnswerError) as exc:
            logger.warning("turn %s: an answer could not be applied: %s", decision.turn_id, exc)
            refusal = CLICK_FAILED
        if refusal is None:
            return (asked.prompt if asked is not None else ""), since, value
        if not privately:
            return refusal
        await self._renderer.tell(by, thread, refusal)
        return None

    async def _expired_at_click(self, thread: Thread, decision: Decision) -> None:
        """A click found its request past its time: the engine settled it as expired just now.

        Its continuation then runs while this click holds the claim on it, so the
        runtime's events leave it alone: show it here, unless someone already took
        it up.
        """
        kept = await self._deliveries.load(thread.session_id, decision.turn_id)
        if kept.asked == decision.input_id and kept.reply is None:
            self._watching.claim(decision.turn_id)
            self._watching.spawn(
                self.settled_elsewhere(thread.session_id, decision.turn_id),
                name=f"reply {decision.turn_id}",
            )

    async def _show_settled(self, thread: Thread, shown: str, answer: StoredAnswer) -> None:
        """Replace a request's buttons with how it was settled, as its stored answer says."""
        prompt = answer.request.prompt
        if answer.expired:
            await self._replace_buttons(thread, shown, EXPIRED_REQUEST, expired_blocks(prompt))
        elif answer.by is not None:
            await self._show_decided(thread, shown, prompt, answer.by, answer.value)

    async def _show_decided(
        self, thread: Thread, shown: str, prompt: str, by: str, value: JsonValue
    ) -> None:
        verdict = shown_answer(value)
        blocks = decided_blocks(prompt, by=by, verdict=verdict)
        await self._replace_buttons(thread, shown, f"{verdict} by <@{by}>", blocks)

    async def _replace_buttons(
        self, thread: Thread, shown: str, text: str, blocks: list[Any]
    ) -> None:
        """Update a request's message so it no longer offers its buttons (best effort)."""
        try:
            await (await self._renderer.client_for(thread.session_id)).chat_update(
                channel=thread.channel, ts=shown, text=text, blocks=blocks
            )
        except SlackApiError as exc:
            logger.error("could not show how request %s was settled: %s", shown, slack_error(exc))


def shown_ts(body: dict[str, Any]) -> str | None:
    """The ts of the message a click was made on (its request's card)."""
    container = body.get("container")
    shown = container.get("message_ts") if isinstance(container, dict) else None
    return str(shown) if shown else None


def _batch_of(transcript: list[Message], call_id: str | None) -> set[str]:
    """The ids of the calls made in one reply with ``call_id`` (empty if none is found)."""
    for message in reversed(transcript):
        if isinstance(message, AssistantMessage):
            ids = {c.id for c in message.tool_calls}
            if call_id in ids:
                return ids
    return set()
