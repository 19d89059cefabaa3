"""The Slack channel: a signed event becomes an attested turn; its reply lands in the thread.

Bolt acknowledges an event before its listener runs and keeps no reference to
the listener's task, so the listener only hands the event over: admitting the
turn and delivering its reply run in tasks this channel owns, waits for on
shutdown, and logs when they fail. The turn itself runs in the engine's
session worker; a crash leaves it on disk for the next start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import AgentRuntime
from agent.events import TurnEvent
from bot.slack.inbound import Ignored, Inbound, read_event

__all__ = ["SlackChannel"]

logger = logging.getLogger("bot.slack")

FAILED_PREFIX = "Sorry, I could not finish this:"


class SlackChannel:
    """Turns of one agent, fed by Slack events and answered in their threads.

    Args:
        runtime: Runs the turns.
        agent: The agent that answers.
        client: Slack's Web API, with the bot token.
        bot_user_id: The bot's own user id (``auth.test``).
    """

    def __init__(
        self, runtime: AgentRuntime, agent: str, client: AsyncWebClient, *, bot_user_id: str
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.client = client
        self.bot_user_id = bot_user_id
        self._tasks: set[asyncio.Task[None]] = set()
        self._claimed: set[str] = set()
        """Turns this process is admitting or answering: a second delivery waits for none."""

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
        """Wait up to ``grace`` seconds for the tasks in flight, then cancel the rest."""
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=grace)
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
            session = self.runtime.session(self.agent, inbound.session_id)
            if inbound.needs_thread and await session.status() == "new":
                return  # a thread the bot takes no part in
            if any(t.turn_id == turn_id for t in await session.turns()):
                return  # admitted before: its reply is on its way, or landed
            await session.start(inbound.input, turn_id=turn_id)
            await self._reply(inbound, turn_id)
        finally:
            self._claimed.discard(turn_id)

    async def _reply(self, inbound: Inbound, turn_id: str) -> None:
        session = self.runtime.session(self.agent, inbound.session_id)
        async for event in session.stream(turn_id):
            text = _final_text(event)
            if text is not None:
                await self._post(inbound, turn_id, text)

    async def _post(self, inbound: Inbound, turn_id: str, text: str) -> None:
        try:
            await self.client.chat_postMessage(
                channel=inbound.channel, thread_ts=inbound.thread_ts, text=text
            )
        except SlackApiError as exc:
            logger.error("turn %s: Slack refused the reply: %s", turn_id, exc.response.get("error"))


def _final_text(event: TurnEvent) -> str | None:
    """What the thread shows for an event that ends the turn's reply, if it does."""
    if event.type == "turn.completed":
        return event.text or "(no text)"
    if event.type == "turn.failed":
        return f"{FAILED_PREFIX} {event.error}"
    return None
