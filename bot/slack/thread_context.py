"""Where an assistant thread's person is looking: kept on the thread's greeting, in Slack.

``assistant_thread_context_changed`` says which channel the person has open beside
the thread. Bolt's own thread-context store keeps it in the metadata of the bot's
first message in the thread; so does this bot, on its greeting
(`bot.slack.surface`), so that it outlives the process without a table of its own,
and any replica reads the same. ``read_channel`` reads it when no channel is named.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

__all__ = ["GREETING_EVENT", "greeting", "thread_context"]

GREETING_EVENT = "turnbot_greeting"
"""The metadata event type of the greeting of an assistant thread; its payload keeps the
channel the person is looking at (``context_channel``)."""


async def thread_context(client: AsyncWebClient, channel: str, thread_ts: str) -> str | None:
    """The channel the person was last seen looking at, as kept on the thread's greeting."""
    greeted = await greeting(client, channel, thread_ts)
    payload = (greeted or {}).get("metadata", {}).get("event_payload") or {}
    found = payload.get("context_channel")
    return found if isinstance(found, str) and found else None


async def greeting(client: AsyncWebClient, dm: str, thread_ts: str) -> dict[str, Any] | None:
    """The bot's greeting in an assistant thread: its first message tagged as one."""
    page = await client.conversations_replies(
        channel=dm, ts=thread_ts, limit=20, include_all_metadata=True
    )
    for message in page["messages"]:
        metadata = message.get("metadata")
        if isinstance(metadata, dict) and metadata.get("event_type") == GREETING_EVENT:
            return dict(message)
    return None
