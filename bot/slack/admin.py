"""Policies from inside Slack: the ``/agent-policy`` command and the Home tab.

Who may see and change a channel's policy is decided here, from Slack's own word
on the user (a signed request's ``user_id``, then ``users.info``): workspace
admins and owners, and the users ``BOT_CONFIG`` names as ``admins``. A policy
can say what a channel is told to keep quiet, so nobody else sees it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import ConfigError, Feedback
from bot.policies import PolicyBook, PolicyChange
from bot.schedules import CHANNEL_ID
from bot.slack.feedback_blocks import week_blocks
from bot.texts import (
    NOT_A_CHANNEL,
    ONLY_ADMINS_CHANGE_POLICIES,
    POLICY_HELP,
    policy_lines,
)

__all__ = ["home_view", "is_admin", "is_policy_admin", "run_policy_command"]

logger = logging.getLogger("bot.slack")

MAX_HOME_BLOCKS = 100


async def is_policy_admin(client: AsyncWebClient, book: PolicyBook, user: str) -> bool:
    """Whether ``user`` may change policies: named in BOT_CONFIG, or a workspace admin."""
    return await is_admin(client, book.admins, user)


async def is_admin(client: AsyncWebClient, admins: Collection[str], user: str) -> bool:
    """Whether ``user`` is one of ``admins`` (BOT_CONFIG's), or a workspace admin or owner."""
    if user in admins:
        return True
    try:
        answer = await client.users_info(user=user)
    except SlackApiError as exc:
        logger.warning("users.info for %s failed: %s", user, exc.response.get("error"))
        return False
    found: dict[str, Any] = answer.get("user") or {}
    return any(found.get(flag) is True for flag in ("is_admin", "is_owner", "is_primary_owner"))


async def run_policy_command(
    client: AsyncWebClient, book: PolicyBook, *, user: str, channel: str, text: str
) -> str:
    """What ``/agent-policy TEXT``, typed by ``user`` in ``channel``, comes to: the reply."""
    words = text.split(maxsplit=1)
    verb = words[0].lower() if words else "show"
    rest = words[1].strip() if len(words) > 1 else ""
    if verb == "help":
        return POLICY_HELP
    if not CHANNEL_ID.fullmatch(channel):
        return NOT_A_CHANNEL
    if not await is_policy_admin(client, book, user):
        return ONLY_ADMINS_CHANGE_POLICIES
    if verb == "show" and not rest:
        return "\n".join(policy_lines(await book.describe(channel), in_slack=True))
    change = _change(verb, rest)
    if change is None:
        return f"I cannot read `{_clipped(text)}`.\n{POLICY_HELP}"
    try:
        now = await book.change(channel, change, by=user)
    except ConfigError as exc:
        return f"Nothing changed: {exc}."
    logger.info("policy of %s changed by %s: %s %s", channel, user, change.action, rest[:80])
    lines = policy_lines(now, in_slack=True)
    return "\n".join(["Changed; from the next turn here:", *lines])


def _change(verb: str, rest: str) -> PolicyChange | None:
    one_word = rest if rest and len(rest.split()) == 1 else ""
    if verb == "deny" and one_word:
        return PolicyChange("deny", one_word)
    if verb == "allow" and one_word:
        return PolicyChange("allow", one_word)
    if verb == "mode" and one_word:
        return PolicyChange("mode", one_word.lower())
    if verb == "instructions" and rest:
        return PolicyChange("instructions", None if rest.lower() == "clear" else rest)
    if verb == "reset" and not rest:
        return PolicyChange("reset")
    return None


async def home_view(
    client: AsyncWebClient,
    book: PolicyBook,
    user: str,
    feedback: Callable[[], Awaitable[Sequence[Feedback]]] | None = None,
) -> dict[str, Any]:
    """The Home tab for ``user``: how to use the bot; for admins, the policies.

    With ``feedback`` (what reads the week's feedback) admins also see the
    week's 👍 / 👎 counts and its latest comments; nobody else has it read.
    """
    blocks: list[dict[str, Any]] = [
        _text(
            "*Mention me in a thread* and I answer there; a tool that needs a person asks "
            "with Approve / Deny buttons."
        )
    ]
    if await is_policy_admin(client, book, user):
        if feedback is not None:
            blocks += [{"type": "divider"}, *week_blocks(await feedback())]
        blocks += [{"type": "divider"}, _text("*Policies* (change one with `/agent-policy`)")]
        for view in await book.describe_all():
            blocks.append(_text("\n".join(policy_lines(view, in_slack=True))))
    if len(blocks) > MAX_HOME_BLOCKS:
        shown = MAX_HOME_BLOCKS - 1
        blocks = [
            *blocks[:shown],
            _text(f"_…and {len(blocks) - shown} more: see `python -m bot policies`_"),
        ]
    return {"type": "home", "blocks": blocks}


def _clipped(text: str, limit: int = 40) -> str:
    flat = " ".join(text.split()).replace("`", "'")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _text(markdown: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": markdown[:3000]}}
