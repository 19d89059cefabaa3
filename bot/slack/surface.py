"""The app's agent surface: the greeting, suggested prompts, the thread's context, Slack's Stop.

- A person opens the app's Messages tab (``app_home_opened``, ``tab: messages``): the
  suggested prompts are pinned to the DM under the greeting. Under ``agent_view`` this
  replaces ``assistant_thread_started``, and ``thread_ts`` must not be given
  (docs.slack.dev, assistant.threads.setSuggestedPrompts: with it, the call "will
  silently fail" for an agent app).
- A person starts an assistant thread (``assistant_thread_started``, the older
  ``assistant_view``): the greeting is posted in the thread, once (a second delivery
  finds it), and the prompts are set for that thread.
- The channel the person is looking at (``assistant_thread_context_changed``) is
  kept in the greeting's metadata, where the thread's next turns find it: it is
  ``read_channel``'s default. Under ``agent_view`` each message carries it instead
  (``app_context``, read by `bot.slack.inbound`).
- Slack's own Stop on an agent session (``agent_session_stopped``) stops the thread's
  turn at work, as the bot's Stop button does, with the same rule on who may.

Everything here is best effort and runs after the ack: a greeting Slack refuses
is logged, and the bot answers the thread as ever.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import UnknownTurnError
from bot.slack.admin import is_admin
from bot.slack.channel import SlackChannel
from bot.slack.channel.delivery import Thread
from bot.slack.inbound import session_id
from bot.slack.once import AMBIGUOUS, post_once, tag
from bot.slack.thread_context import GREETING_EVENT, greeting
from bot.slack.workspaces import NotInstalled
from bot.texts import ONLY_PARTICIPANTS_STOP

__all__ = ["greet_in_messages_tab", "register_surface"]

logger = logging.getLogger("bot.slack")


def register_surface(bolt: AsyncApp, channel: SlackChannel) -> None:
    """Add the listeners of the agent surface's events."""

    async def on_thread_started(body: dict[str, Any]) -> None:
        thread = _assistant_thread(body)
        if thread is not None:
            greeting = _greet_thread(channel, body.get("team_id"), *thread)
            channel.spawn(greeting, name="greet a thread")

    async def on_context_changed(body: dict[str, Any]) -> None:
        thread = _assistant_thread(body)
        if thread is not None:
            keeping = _keep_context(channel, body.get("team_id"), *thread)
            channel.spawn(keeping, name="keep a thread's context")

    async def on_session_stopped(body: dict[str, Any]) -> None:
        event = body.get("event") or {}
        found = [body.get("team_id"), *(event.get(k) for k in ("channel", "thread_ts", "user"))]
        given = [v for v in found if isinstance(v, str) and v]
        if len(given) == len(found):
            stopping = _stop_thread(channel, *given)
            channel.spawn(stopping, name="stop an agent session")
        else:
            logger.warning("an agent_session_stopped event without channel, thread or user")

    async def on_app_context_changed() -> None:
        """Acked: each message the person sends carries the context it was sent in."""

    bolt.event("assistant_thread_started")(on_thread_started)
    bolt.event("assistant_thread_context_changed")(on_context_changed)
    bolt.event("agent_session_stopped")(on_session_stopped)
    bolt.event("app_context_changed")(on_app_context_changed)


async def greet_in_messages_tab(channel: SlackChannel, team: object, dm: str) -> None:
    """Pin the suggested prompts, under the greeting, to a person's DM with the app."""
    surface = channel.surface
    try:
        client = await _client(channel, team)
        await client.assistant_threads_setSuggestedPrompts(
            channel_id=dm, title=surface.greeting, prompts=surface.prompt_payload()
        )
    except (SlackApiError, NotInstalled, *AMBIGUOUS) as exc:
        logger.warning("no suggested prompts in %s: %s", dm, _error(exc))


def _assistant_thread(body: dict[str, Any]) -> tuple[str, str, str | None] | None:
    """The DM, the thread and the context channel of an assistant thread event."""
    event = body.get("event") or {}
    thread = event.get("assistant_thread")
    if not isinstance(thread, dict):
        return None
    dm, thread_ts = thread.get("channel_id"), thread.get("thread_ts")
    if not (isinstance(dm, str) and dm and isinstance(thread_ts, str) and thread_ts):
        logger.warning("an assistant thread event without its channel or thread")
        return None
    context = thread.get("context")
    seen = context.get("channel_id") if isinstance(context, dict) else None
    return dm, thread_ts, seen if isinstance(seen, str) and seen else None


async def _greet_thread(
    channel: SlackChannel, team: object, dm: str, thread_ts: str, seen: str | None
) -> None:
    surface = channel.surface
    try:
        client = await _client(channel, team)
        if await greeting(client, dm, thread_ts) is None:  # a second delivery finds it
            await post_once(
                client,
                dm,
                thread_ts,
                tag(GREETING_EVENT, context_channel=seen or ""),
                text=surface.greeting,
            )
        await client.assistant_threads_setSuggestedPrompts(
            channel_id=dm, thread_ts=thread_ts, prompts=surface.prompt_payload()
        )
    except (SlackApiError, NotInstalled, *AMBIGUOUS) as exc:
        logger.warning("the thread %s was not greeted: %s", thread_ts, _error(exc))


async def _keep_context(
    channel: SlackChannel, team: object, dm: str, thread_ts: str, seen: str | None
) -> None:
    try:
        client = await _client(channel, team)
        greeted = await greeting(client, dm, thread_ts)
        if greeted is None:
            return  # not a thread this bot greeted: nothing to keep it on
        await client.chat_update(
            channel=dm,
            ts=str(greeted["ts"]),
            text=str(greeted.get("text") or ""),
            metadata=tag(GREETING_EVENT, context_channel=seen or ""),
        )
    except (SlackApiError, NotInstalled, *AMBIGUOUS) as exc:
        logger.warning("the context of %s was not kept: %s", thread_ts, _error(exc))


async def _stop_thread(
    channel: SlackChannel,
    team: str,
    where: str,
    thread_ts: str,
    user: str,
) -> None:
    """Stop the thread's turns at work (Slack's Stop was pressed), as the Stop button does."""
    session = channel.runtime.session(channel.agent, session_id(team, where, thread_ts))
    turns = await session.turns()
    running = [t.turn_id for t in turns if t.is_unfinished]
    if not running:
        return  # it ended as the button was pressed: the reply says how
    book = channel.policies
    took_part = any(t.input.user == user for t in turns)
    client = await _client(channel, team)
    if not took_part and not await is_admin(client, book.admins if book else (), user):
        thread = Thread(where, thread_ts, session_id(team, where, thread_ts))
        await channel.decisions.renderer.tell(user, thread, ONLY_PARTICIPANTS_STOP)
        return
    renderer = channel.decisions.renderer
    for turn_id in running:
        renderer.stopping(turn_id, user)  # the reply's closing line names them
        try:
            taken = await session.cancel(turn_id, reason="requested")
        except UnknownTurnError:
            taken = False
        if taken:
            logger.info("turn %s stopped by %s with Slack's Stop", turn_id, user)
        else:
            renderer.stopper(turn_id)


async def _client(channel: SlackChannel, team: object) -> AsyncWebClient:
    """The bot's client in the workspace an event came from."""
    return (await channel.workspaces.get(team if isinstance(team, str) else None)).client


def _error(exc: BaseException) -> object:
    return exc.response.get("error") if isinstance(exc, SlackApiError) else type(exc).__name__
