"""Posting exactly once: each message the bot posts carries a key, and is looked for first.

Slack has no idempotency key for ``chat.postMessage`` or ``chat.startStream``: a
call whose connection dropped may or may not have been applied, and sending it
again may post twice (`bot.slack.run.REPEATABLE` keeps slack_sdk from doing
so). What the bot posts therefore carries message metadata naming what it is
(``turnbot_reply`` with the turn, ``turnbot_ask`` with the request), and after
an ambiguous failure, or at a restart, the bot reads the conversation back
(``include_all_metadata``) before it posts again. A read that Slack will not
answer is asked again a few times; when it never is, nobody can tell whether the
message is there, and `CannotTell` is raised rather than a second post made on a
guess (a reply then stays owed, and is finished at the next start).

``chat.startStream`` takes no ``metadata`` (docs.slack.dev/reference/methods/
chat.startStream lists none; ``chat.stopStream`` and ``chat.update`` do): a
stream is tagged when it stops or is updated. Until then, a stream of the bot's
own that carries no tag and is newer than every message of the bot that does
is the one a dropped connection or a crash left behind.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Collection
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

__all__ = [
    "AMBIGUOUS",
    "ASK_EVENT",
    "REPLY_EVENT",
    "CannotTell",
    "find_posted",
    "look_for",
    "look_for_button",
    "post_once",
    "tag",
]

logger = logging.getLogger("bot.slack")

REPLY_EVENT = "turnbot_reply"
ASK_EVENT = "turnbot_ask"
AMBIGUOUS = (aiohttp.ClientError, asyncio.TimeoutError)
"""What a call raises when nobody can tell whether Slack applied it."""
PAGE = 200
READ_AGAIN_AFTER = (0.25, 0.5, 1.0)
"""Seconds before each new try of a read Slack did not answer (slack_sdk has already
sent it again at once after a dropped connection, and waited out a 429)."""
PASSING = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
"""Refusals of a read that may not come again."""


class CannotTell(Exception):
    """Slack would not show the conversation: whether a message is in it is unknown."""


_bot_users: weakref.WeakKeyDictionary[AsyncWebClient, str] = weakref.WeakKeyDictionary()


def tag(event_type: str, **payload: str | int) -> dict[str, Any]:
    """Message metadata naming what a message is."""
    return {"event_type": event_type, "event_payload": payload}


async def find_posted(
    client: AsyncWebClient,
    channel: str,
    thread_ts: str | None,
    metadata: dict[str, Any],
    *,
    untagged: bool = False,
    after: str | None = None,
    skip: Collection[str] = (),
) -> str | None:
    """The ts of the bot's message carrying ``metadata``, if the conversation holds one.

    Args:
        client: Slack's Web API.
        channel: Where it was posted.
        thread_ts: Its thread; None looks among the channel's newest top-level messages.
        metadata: The tag the message was posted with.
        untagged: Also take the newest message of the bot's own with no tag at all that
            is newer than every tagged one (a stream, tagged only when it stops).
        after: Only messages newer than this ts.
        skip: Messages that are known to be another's (another turn's stream in the
            same thread): never taken for an untagged one.

    Raises:
        slack_sdk.errors.SlackApiError: Slack refused to show the conversation.
    """
    if thread_ts is None:
        found = await client.conversations_history(
            channel=channel, limit=PAGE, include_all_metadata=True, oldest=after or "0"
        )
        messages = list(reversed(found["messages"]))
    else:
        messages = []
        cursor: str | None = None
        while True:
            page = await client.conversations_replies(
                channel=channel,
                ts=thread_ts,
                limit=PAGE,
                include_all_metadata=True,
                oldest=after or "0",
                cursor=cursor,
            )
            messages += page["messages"]
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
    me = await _bot_user(client)
    orphan: str | None = None
    for message in messages:
        if message.get("user") != me or message.get("ts") == thread_ts:
            continue
        kept = message.get("metadata")
        if kept == metadata:
            return str(message["ts"])
        if kept is None and message.get("ts") not in skip:
            orphan = str(message["ts"])
        elif isinstance(kept, dict) and kept.get("event_type") in (REPLY_EVENT, ASK_EVENT):
            orphan = None  # an untagged one before a tagged one belongs to an earlier reply
    return orphan if untagged else None


async def look_for(
    client: AsyncWebClient,
    channel: str,
    thread_ts: str | None,
    metadata: dict[str, Any],
    untagged: bool = False,
    after: str | None = None,
    skip: Collection[str] = (),
) -> str | None:
    """`find_posted`, asked again a few times while Slack does not answer it.

    Raises:
        CannotTell: Slack never showed the conversation, or refused it for good
            (``missing_scope``, ``channel_not_found``...).
    """
    where = thread_ts or channel
    for wait in (*READ_AGAIN_AFTER, None):
        try:
            return await find_posted(
                client, channel, thread_ts, metadata, untagged=untagged, after=after, skip=skip
            )
        except SlackApiError as exc:
            error = exc.response.get("error")
            if wait is None or error not in PASSING:
                raise CannotTell(f"Slack would not show {where}: {error}") from None
        except AMBIGUOUS as exc:
            if wait is None:
                raise CannotTell(f"Slack could not show {where}: {type(exc).__name__}") from None
        logger.info("reading %s back again in %.2f s", where, wait)
        await asyncio.sleep(wait)
    raise AssertionError("unreachable")


async def look_for_button(
    client: AsyncWebClient, channel: str, thread_ts: str | None, metadata: dict[str, Any]
) -> str | None:
    """`look_for` a message that holds a button (Stop, Retry): None when it cannot tell.

    Such a message matters less than the reply it sits under: one that cannot be
    found is logged, and the reply goes on without it.
    """
    if thread_ts is None:
        return None
    try:
        return await look_for(client, channel, thread_ts, metadata)
    except CannotTell as exc:
        logger.warning("the message %s is not known: %s", metadata.get("event_payload"), exc)
        return None


async def post_once(
    client: AsyncWebClient,
    channel: str,
    thread_ts: str | None,
    metadata: dict[str, Any],
    *,
    after: str | None = None,
    **content: Any,
) -> str:
    """Post a message tagged ``metadata``; a post whose answer was lost is looked for first.

    Returns:
        The message's ts.

    Raises:
        SlackApiError: Slack refused the post.
        aiohttp.ClientError: Slack could not be reached, three times.
        CannotTell: a post's answer was lost and the conversation could not be read
            back: posting again might post twice.
    """
    for attempt in range(3):
        try:
            posted = await client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, metadata=metadata, **content
            )
            return str(posted["ts"])
        except AMBIGUOUS:
            found = await look_for(client, channel, thread_ts, metadata, after=after)
            if found is not None:
                return found
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _bot_user(client: AsyncWebClient) -> str:
    if client not in _bot_users:
        _bot_users[client] = str((await client.auth_test())["user_id"])
    return _bot_users[client]
