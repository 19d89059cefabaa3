"""What a reply's last message ends with (its footer: the feedback buttons), and how it is sent.

A streamed message takes the footer as its stream stops: ``chat.stopStream``
appends ``blocks`` under the streamed words. A message that is updated instead
cannot send ``markdown_text`` beside ``blocks`` (Slack answers
``markdown_text_conflict``), so its words go as a ``markdown`` block (which holds
the same 12,000 characters, and renders the same markdown) followed by the
footer, with ``text`` as the fallback notifications and screen readers show.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

__all__ = ["ending", "error_of", "update_reply"]

logger = logging.getLogger("bot.slack")

MAX_FALLBACK_CHARS = 3_900
"""A message's ``text`` beside blocks: Slack refuses one much over 4,000 (``msg_too_long``)."""


def ending(
    chunks: Sequence[dict[str, Any]], metadata: dict[str, Any], footer: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The fields of the ``chat.stopStream`` that ends a stream with ``chunks`` and ``footer``."""
    return {"chunks": list(chunks) or None, "metadata": metadata, "blocks": list(footer) or None}


def content(text: str, footer: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The fields of a ``chat.update`` that shows ``text`` (markdown), and ``footer`` under it."""
    if not footer:
        return {"markdown_text": text}
    fallback = text if len(text) <= MAX_FALLBACK_CHARS else text[: MAX_FALLBACK_CHARS - 1] + "…"
    return {"text": fallback, "blocks": [{"type": "markdown", "text": text}, *footer]}


async def update_reply(
    client: AsyncWebClient,
    channel: str,
    ts: str,
    text: str,
    metadata: dict[str, Any],
    footer: Sequence[dict[str, Any]] = (),
) -> bool:
    """Rewrite a reply message as ``text`` with ``footer`` under it; False if Slack refused.

    A refusal is logged, not raised: the reply goes on (its next update says it all).
    """
    try:
        await client.chat_update(channel=channel, ts=ts, metadata=metadata, **content(text, footer))
    except SlackApiError as exc:
        logger.error("could not update reply %s: %s", ts, error_of(exc))
        return False
    return True


def error_of(exc: Exception) -> Any:
    """What a failed call to Slack came to: its error code, or the kind of failure."""
    return exc.response.get("error") if isinstance(exc, SlackApiError) else type(exc).__name__
