"""Ways out of a stuck thread, and answers that are not yes / no.

- an option of an ``enum`` request is a button, settled like Approve / Deny;
- Answer… opens a modal (``views.open`` with the click's ``trigger_id``); its
  submission is applied before it is acknowledged, so a wrong answer is shown
  under the field (``response_action: errors``) and the modal stays open;
- Withdraw (admins) ends the turn waiting on a request;
- Stop (the person who asked, the thread's people, admins) cancels a running turn;
- Retry (the person who asked, admins) asks a failed or interrupted turn again;
- the *Start over* message shortcut (the thread's people, admins) resets the
  thread's session and says so in the thread. A slash command carries no
  thread, so a message shortcut is the way to name one.

Who someone is comes from the signed payload's ``user``; which turn, from the
button's value or the modal's metadata; which thread, from the session.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    ConflictError,
    InputRequest,
    JsonValue,
    SessionSuspendedError,
    UnknownTurnError,
    UserAnswerer,
)
from bot.slack.admin import is_admin
from bot.slack.blocks import (
    ANSWER,
    ANSWER_BLOCK,
    ANSWER_INPUT,
    ANSWER_VIEW,
    CHOOSE,
    RESET_SHORTCUT,
    RETRY,
    STOP,
    WITHDRAW,
    Decision,
    answer_view,
    read_decision,
    read_view_address,
    retried_blocks,
    stamp,
    who_may_answer,
)
from bot.slack.channel import SlackChannel, waiting_for
from bot.slack.channel.decisions import shown_ts
from bot.slack.channel.delivery import Thread, thread_of
from bot.slack.inbound import session_id
from bot.texts import (
    ANSWER_BY_MODAL_FAILED,
    NOT_A_THREAD,
    NOTHING_TO_RETRY,
    NOTHING_TO_STOP,
    NOTHING_TO_WITHDRAW,
    ONLY_ADMINS_WITHDRAW,
    ONLY_ASKER_RETRIES,
    ONLY_PARTICIPANTS_RESET,
    ONLY_PARTICIPANTS_STOP,
    invalid_answer,
    only_answerers,
    retried_by,
    thread_reset,
)

__all__ = ["register_hatches"]

logger = logging.getLogger("bot.slack")


def register_hatches(bolt: AsyncApp, channel: SlackChannel, client: AsyncWebClient) -> None:
    """Add the listeners for options, typed answers, Withdraw, Stop, Retry and Start over."""
    hatches = _Hatches(channel, client)

    async def on_option(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        channel.on_decision(body)

    async def on_click(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()  # at once: what the click asks for runs in a task of the channel's
        found = _clicked(body)
        if found is not None:
            decision, user = found
            channel.spawn(hatches.clicked(decision, user, body), name=f"{decision.action} click")

    async def on_answer(ack: AsyncAck, body: dict[str, Any]) -> None:
        # applied before the ack, so that a wrong answer is shown in the modal
        errors = await hatches.submitted(body)
        if errors is None:
            await ack()
        else:
            await ack(response_action="errors", errors={ANSWER_BLOCK: errors})

    async def on_reset(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        channel.spawn(hatches.reset(body), name="start over")

    bolt.action(CHOOSE)(on_option)
    for action_id in (ANSWER, WITHDRAW, STOP, RETRY):
        bolt.action(action_id)(on_click)
    bolt.view_submission(ANSWER_VIEW)(on_answer)
    bolt.message_shortcut(RESET_SHORTCUT)(on_reset)


class _Hatches:
    def __init__(self, channel: SlackChannel, client: AsyncWebClient) -> None:
        self.channel = channel
        self.client = client
        """The app's client, as Bolt was given it; each thread's own is its workspace's."""
        self.decisions = channel.decisions

    async def client_in(self, thread: Thread) -> AsyncWebClient:
        """Slack's Web API as the bot in ``thread``'s workspace."""
        return await self.decisions.renderer.client_for(thread.session_id)

    async def is_admin(self, user: str, thread: Thread) -> bool:
        book = self.channel.policies
        client = await self.client_in(thread)
        return await is_admin(client, book.admins if book else (), user)

    async def clicked(self, decision: Decision, user: str, body: dict[str, Any]) -> None:
        thread = await self.decisions.thread_of(decision.session_id, decision.turn_id)
        if thread is None:
            logger.warning("a click on turn %s, whose thread is not known", decision.turn_id)
            return
        if decision.action == "answer":
            await self._open_answer(decision, user, thread, body)
        elif decision.action == "withdraw":
            if not await self.is_admin(user, thread):
                await self._tell(user, thread, ONLY_ADMINS_WITHDRAW)
                return
            await self.decisions.withdraw(decision, user, shown_ts(body))
        elif decision.action == "stop":
            await self._stop(decision, user, thread)
        elif decision.action == "retry":
            await self._retry(decision, user, thread, shown_ts(body))

    async def _open_answer(
        self, decision: Decision, user: str, thread: Thread, body: dict[str, Any]
    ) -> None:
        request = await self.decisions.waiting_request(decision)
        if request is None:
            await self._tell(user, thread, NOTHING_TO_WITHDRAW)
            return
        if not _may_answer(request, user):
            await self._tell(user, thread, only_answerers(who_may_answer(request)))
            return
        address = {
            "s": decision.session_id,
            "t": decision.turn_id,
            "i": decision.input_id,
            "m": shown_ts(body),
        }
        try:
            await (await self.client_in(thread)).views_open(
                trigger_id=str(body.get("trigger_id") or ""), view=answer_view(request, address)
            )
        except SlackApiError as exc:
            logger.warning("the answer modal did not open: %s", exc.response.get("error"))
            await self._tell(user, thread, ANSWER_BY_MODAL_FAILED)

    async def submitted(self, body: dict[str, Any]) -> str | None:
        """Apply a typed answer; None once applied, else what to show under the field."""
        view, user = body.get("view"), body.get("user")
        address = read_view_address(view) if isinstance(view, dict) else None
        by = user.get("id") if isinstance(user, dict) else None
        if address is None or not isinstance(by, str) or not isinstance(view, dict):
            logger.warning("a modal this app cannot read was submitted")
            return "This form is not one of mine."
        decision = Decision(address["s"], address["t"], address["i"], "answer")
        request = await self.decisions.waiting_request(decision)
        if request is None:
            return "This request is no longer waiting for an answer."
        value = _typed(request, _text_of(view))
        if isinstance(value, _Wrong):
            return invalid_answer(value.reason)
        shown = address.get("m")
        try:
            refused = await self.decisions.submit(
                decision, value, by, shown if isinstance(shown, str) else None
            )
        except Exception:
            logger.exception("turn %s: a typed answer could not be applied", decision.turn_id)
            return "That answer could not be applied just now; please try again."
        return None if refused is None else invalid_answer(refused)

    async def _stop(self, decision: Decision, user: str, thread: Thread) -> None:
        session = self.channel.runtime.session(self.channel.agent, decision.session_id)
        turns = await session.turns()
        if not (_took_part(turns, user) or await self.is_admin(user, thread)):
            await self._tell(user, thread, ONLY_PARTICIPANTS_STOP)
            return
        renderer = self.decisions.renderer
        renderer.stopping(decision.turn_id, user)  # the reply's closing line names them
        try:
            taken = await session.cancel(decision.turn_id, reason="requested")
        except UnknownTurnError:
            taken = False
        if not taken:
            renderer.stopper(decision.turn_id)  # nothing to name: forget it
            await self._tell(user, thread, NOTHING_TO_STOP)
        else:
            logger.info("turn %s stopped by %s", decision.turn_id, user)

    async def _retry(
        self, decision: Decision, user: str, thread: Thread, shown: str | None
    ) -> None:
        session = self.channel.runtime.session(self.channel.agent, decision.session_id)
        asked = next((t for t in await session.turns() if t.turn_id == decision.turn_id), None)
        if asked is None:
            await self._tell(user, thread, NOTHING_TO_RETRY)
            return
        if asked.input.user != user and not await self.is_admin(user, thread):
            await self._tell(user, thread, ONLY_ASKER_RETRIES)
            return
        try:
            new_id = await self.channel.retry(thread, decision.turn_id)
        except SessionSuspendedError:
            await self._tell(user, thread, await waiting_for(session))
            return
        except (ConflictError, UnknownTurnError) as exc:
            logger.info("turn %s: a Retry was refused: %s", decision.turn_id, exc)
            await self._tell(user, thread, NOTHING_TO_RETRY)
            return
        logger.info("turn %s retried as %s by %s", decision.turn_id, new_id, user)
        if shown is None:
            return
        line = retried_by(user, stamp(None))
        try:  # the button is spent: a second click would only show the same retry
            await (await self.client_in(thread)).chat_update(
                channel=thread.channel, ts=shown, text=line, blocks=retried_blocks(line)
            )
        except SlackApiError as exc:
            logger.warning("turn %s: Retry left up: %s", decision.turn_id, exc)

    async def reset(self, body: dict[str, Any]) -> None:
        """The *Start over* shortcut on a message: reset the session of its thread."""
        user, team, where = body.get("user"), body.get("team"), body.get("channel")
        message = body.get("message")
        by = user.get("id") if isinstance(user, dict) else None
        team_id = team.get("id") if isinstance(team, dict) else None
        channel_id = where.get("id") if isinstance(where, dict) else None
        if not (isinstance(by, str) and isinstance(team_id, str) and isinstance(channel_id, str)):
            logger.warning("a Start over shortcut this app cannot read was ignored")
            return
        said = message if isinstance(message, dict) else {}
        root = said.get("thread_ts") or said.get("ts") or body.get("message_ts")
        if not isinstance(root, str):
            logger.warning("a Start over shortcut named no message")
            return
        thread = thread_of(session_id(team_id, channel_id, root))
        assert thread is not None  # a session id made just now
        runtime, agent = self.channel.runtime, self.channel.agent
        key_session = runtime.session(agent, thread.session_id)
        turns = await key_session.turns()
        if not turns:
            await self._tell(by, thread, NOT_A_THREAD)
            return
        if not (_took_part(turns, by) or await self.is_admin(by, thread)):
            await self._tell(by, thread, ONLY_PARTICIPANTS_RESET)
            return
        archived = await key_session.reset()
        logger.info("%s reset by %s (archived as %s)", thread.session_id, by, archived)
        try:
            await (await self.client_in(thread)).chat_postMessage(
                channel=thread.channel, thread_ts=thread.thread_ts, text=thread_reset(by)
            )
        except SlackApiError as exc:
            logger.error("could not say that %s was reset: %s", thread.session_id, exc)

    async def _tell(self, user: str, thread: Thread, text: str) -> None:
        await self.decisions.renderer.tell(user, thread, text)


class _Wrong:
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _typed(request: InputRequest, text: str | None) -> JsonValue | _Wrong:
    """The answer a modal's text comes to, by the request's schema (the engine checks it)."""
    if text is None or not text.strip():
        return _Wrong("it is empty")
    kind = (request.schema or {}).get("type")
    if kind == "integer":
        try:
            return int(text.strip())
        except ValueError:
            return _Wrong(f"“{text.strip()[:40]}” is not a whole number")
    if kind == "number":
        try:
            number = float(text.strip())
        except ValueError:
            return _Wrong(f"“{text.strip()[:40]}” is not a number")
        if number != number or number in (float("inf"), float("-inf")):
            return _Wrong("it is not a finite number")
        return int(number) if number.is_integer() and "." not in text else number
    return text


def _text_of(view: dict[str, Any]) -> str | None:
    state = view.get("state")
    values = state.get("values") if isinstance(state, dict) else None
    block = values.get(ANSWER_BLOCK) if isinstance(values, dict) else None
    field = block.get(ANSWER_INPUT) if isinstance(block, dict) else None
    value = field.get("value") if isinstance(field, dict) else None
    return value if isinstance(value, str) else None


def _may_answer(request: InputRequest, user: str) -> bool:
    """Whether ``user`` can answer, as far as is known before the answer (a policy decides then)."""
    answerers = request.answerers
    return not isinstance(answerers, UserAnswerer) or answerers.user == user


def _took_part(turns: list[Any], user: str) -> bool:
    """Whether ``user`` opened a turn of the session: asked, or said something in the thread."""
    return any(t.input.user == user for t in turns)


def _clicked(body: dict[str, Any]) -> tuple[Decision, str] | None:
    actions, user = body.get("actions"), body.get("user")
    decision = read_decision(actions[0]) if isinstance(actions, list) and actions else None
    clicker = user.get("id") if isinstance(user, dict) else None
    if decision is None or not isinstance(clicker, str):
        logger.warning("a button click this app cannot read was ignored")
        return None
    return decision, clicker
