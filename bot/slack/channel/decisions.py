"""Approve / Deny: a click answers the request it names, and the request shows how it ended.

The click is signed by Slack, so its user is the attested answerer; which
turn and thread it is about comes from the button's value and the session it
was made for, never from the payload's other fields. A request can also be
settled without a click of ours (it expired); its buttons are then replaced
in the same way.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from agent import (
    AgentRuntime,
    ConflictError,
    InvalidAnswerError,
    ResumeAuthorizationError,
    ResumeConflictError,
    StoredAnswer,
)
from bot.slack.blocks import Decision, decided_blocks, expired_blocks, read_decision, who_may_answer
from bot.slack.channel.delivery import Deliveries, Thread
from bot.slack.channel.render import ReplyRenderer, slack_error
from bot.slack.channel.watching import Watching
from bot.texts import CLICK_FAILED, EXPIRED_REQUEST, not_waiting, only_answerers

__all__ = ["Decisions"]

logger = logging.getLogger("bot.slack")


class Decisions:
    """Settles the clicks on one agent's requests, and shows how each request ended."""

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

    def on_decision(self, body: dict[str, Any]) -> None:
        """Take a verified click on Approve or Deny; it is settled in a task of the channel's."""
        actions = body.get("actions")
        decision = read_decision(actions[0]) if isinstance(actions, list) and actions else None
        user = body.get("user")
        clicker = user.get("id") if isinstance(user, dict) else None
        if decision is None or not isinstance(clicker, str):
            logger.warning("a button click this app cannot read was ignored")
            return
        container = body.get("container")
        shown = container.get("message_ts") if isinstance(container, dict) else None
        self._watching.spawn(
            self._decide(decision, clicker, str(shown) if shown else None),
            name=f"decide {decision.turn_id}",
        )

    async def settled_elsewhere(self, session_id: str, turn_id: str) -> None:
        """A request no click of ours settled (it expired): say so on it, then show the rest.

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
                    await self._show_settled(thread.channel, state.shown, answer)
        finally:
            await self._watching.reply(thread, turn_id)

    async def _decide(self, decision: Decision, clicker: str, shown_ts: str | None) -> None:
        """Answer the request a click names, by the clicker, and show the turn go on.

        The thread comes from the session the button was made for (or, for a turn
        nobody typed, from what was kept of where it is shown).
        """
        thread = await self._deliveries.thread_for(decision.session_id, decision.turn_id)
        if thread is None:
            logger.warning(
                "a click on turn %s, whose thread is not known, was ignored", decision.turn_id
            )
            return
        turn_id = decision.turn_id
        # This click shows the continuation; the runtime's events leave it alone.
        self._watching.claim(turn_id)
        try:
            resumed = await self._apply(decision, thread, clicker)
        except Exception:
            logger.exception("turn %s: a click could not be applied", turn_id)
            await self._renderer.tell(clicker, thread, CLICK_FAILED)
            resumed = None
        if resumed is None:
            self._watching.release(turn_id)
            return
        prompt, since = resumed
        if shown_ts is not None:
            await self._show_decided(thread.channel, shown_ts, prompt, clicker, decision.approved)
        await self._watching.reply(thread, turn_id, since=since, reader=clicker)

    async def _apply(
        self, decision: Decision, thread: Thread, clicker: str
    ) -> tuple[str, int] | None:
        """Resume the turn with the click; its prompt and where its continuation starts.

        None when the click answered nothing (the clicker has been told why).
        """
        session = self._runtime.session(self._agent, decision.session_id)
        suspended = await session.suspended()
        since = len(await session.transcript())  # the continuation's first message comes next
        try:
            await session.resume(decision.turn_id, decision.input_id, decision.approved, by=clicker)
        except ResumeAuthorizationError:
            who = who_may_answer(suspended.request) if suspended else "someone else"
            await self._renderer.tell(clicker, thread, only_answerers(who))
            return None
        except ResumeConflictError as exc:
            await self._renderer.tell(clicker, thread, not_waiting(exc))
            if exc.expired:
                await self._expired_at_click(thread, decision)
            return None
        except (ConflictError, InvalidAnswerError) as exc:
            logger.warning("turn %s: a click could not be applied: %s", decision.turn_id, exc)
            await self._renderer.tell(clicker, thread, CLICK_FAILED)
            return None
        return (suspended.request.prompt if suspended else ""), since

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
            await self._renderer.client.chat_update(
                channel=channel, ts=shown_ts, text=text, blocks=blocks
            )
        except SlackApiError as exc:
            logger.error(
                "could not show how request %s was settled: %s", shown_ts, slack_error(exc)
            )
