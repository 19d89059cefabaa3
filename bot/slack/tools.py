"""The tools a Slack agent works with: read, post after an approval, remember.

Each tool knows its conversation from the session id
(``slack:<team>:<channel>:<thread_ts>``), never from anything the model says,
so a prompt cannot point ``read_thread`` or ``recall`` at another channel. User
ids are shown with their names (``@ana (U0ANA)``) so the model can address
people without inventing ids.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import EXPIRED, Tool, ToolContext, ToolError, tool
from bot.config_file import Approvals
from bot.notebook import Notebook
from bot.slack.names import SlackNames
from bot.slack.once import AMBIGUOUS, CannotTell, look_for, post_once, tag
from bot.slack.thread_context import thread_context
from bot.slack.workspaces import OneWorkspace, Workspaces

__all__ = ["POST_EVENT", "THREAD_TOOLS", "listed_slack_tools", "post_tag", "slack_tools"]

PAGE = 50
THREAD_PAGE = 200
MAX_PERIOD_READ = 300
"""Messages one ``read_channel`` call with ``since`` returns at most."""
MAX_THREAD_READ = 1_000
"""Replies read to find a thread's latest; a thread longer than this shows its first ones."""
MAX_PROMPT_CHARS = 3_000
"""What an approval shows whole (a section's text): a post whose prompt is longer is refused."""
POST_EVENT = "turnbot_post"
_CHANNEL_NOTES = Notebook("channel_notes", "channel")
"""The metadata event type our posts carry, with the call's idempotency key."""


def post_tag(key: str) -> dict[str, Any]:
    """The metadata of the post a call with this idempotency key makes."""
    return tag(POST_EVENT, key=key)


THREAD_TOOLS = ("read_thread",)
"""The tools that need the turn to be in a Slack thread; other surfaces deny them."""


def _where(ctx: ToolContext) -> tuple[str, str]:
    """The channel and thread of the turn's session."""
    parts = ctx.session_id.split(":")
    if len(parts) < 4 or parts[0] != "slack":
        raise ToolError("this tool only works in a Slack conversation")
    return parts[2], parts[3]


def _team(ctx: ToolContext) -> str | None:
    """The workspace of the turn's session (``slack:<team>:…``); None outside Slack."""
    parts = ctx.session_id.split(":")
    return parts[1] if len(parts) > 2 and parts[0] == "slack" else None


async def _in_view(client: AsyncWebClient, ctx: ToolContext) -> str:
    """The channel the person has open beside the conversation, as Slack last said.

    Under ``agent_view`` each message carries it (``app_context``, kept with the
    turn's event); in an assistant thread it is kept on the thread's greeting.

    Raises:
        ToolError: Slack never said: the model should ask which channel.
    """
    seen = ctx.event.data.get("context_channel") if ctx.event is not None else None
    if not (isinstance(seen, str) and seen) and ctx.event is not None:
        where, thread_ts = _where(ctx)
        with contextlib.suppress(SlackApiError, *AMBIGUOUS):
            seen = await thread_context(client, where, thread_ts)
    if not (isinstance(seen, str) and seen):
        raise ToolError("no channel is open beside this conversation: ask which one to read")
    return seen


def _notebook(ctx: ToolContext) -> str:
    """Whose notes: the Slack channel's, or, for a turn from elsewhere, its session's."""
    try:
        return _where(ctx)[0]
    except ToolError:
        return ctx.session_id


async def _open_to_all(
    client: AsyncWebClient, channel: str, ctx: ToolContext, names: SlackNames
) -> None:
    """Refuse a conversation not every member of the workspace may read, or the bot is not in.

    The turn's own conversation is always fine; elsewhere only public channels:
    a direct message or a private channel would show one person's words to another.

    Raises:
        ToolError: It is private, the bot is not in it, or Slack does not know it.
    """
    if channel == _notebook(ctx):  # the turn's own conversation
        return
    try:
        info = (await client.conversations_info(channel=channel))["channel"]
    except SlackApiError as exc:
        raise ToolError(f"cannot use {channel}: {exc.response.get('error')}") from None
    names.learn_channel(channel, info.get("name"))
    if info.get("is_im") or info.get("is_mpim") or info.get("is_private"):
        raise ToolError(f"{channel} is private: only public channels can be read or posted to")
    if not info.get("is_member"):
        # A bot that is not a member can neither read the channel nor check that a
        # post of its own went out only once.
        name = info.get("name") or channel
        raise ToolError(f"the bot is not in #{name}: ask someone to /invite it there first")


def listed_slack_tools() -> Sequence[Tool]:
    """The Slack tools with a client that has no token: to list and check them, never to run."""
    return slack_tools(AsyncWebClient())


def slack_tools(
    slack: AsyncWebClient | Workspaces, approvals: Approvals | None = None
) -> Sequence[Tool]:
    """``read_thread``, ``read_channel``, ``post_message``, ``remember`` and ``recall``.

    Args:
        slack: The bot's client in its one workspace, or its workspaces (OAuth): a call
            speaks to the workspace of its turn's session.
        approvals: How long a post waits for its approval (BOT_CONFIG's, or the default).
    """
    approvals = approvals or Approvals()
    workspaces = (
        OneWorkspace(slack, team="", bot_user_id="") if isinstance(slack, AsyncWebClient) else slack
    )
    known: dict[str | None, SlackNames] = {}
    """Names by workspace: each has its own people and channels."""

    async def slack_of(ctx: ToolContext) -> tuple[AsyncWebClient, SlackNames]:
        team = _team(ctx)
        client = (await workspaces.get(team)).client
        names = known.get(team)
        if names is None or names.client is not client:  # a new token: names asked again
            names = known[team] = SlackNames(client)
        return client, names

    async def shown(
        names: SlackNames, messages: list[dict[str, Any]], channel: str
    ) -> list[dict[str, Any]]:
        read: list[dict[str, Any]] = []
        for m in messages:
            message: dict[str, Any] = {
                "from": await names.user(m.get("user")),
                "ts": str(m["ts"]),
                "text": await names.readable(str(m.get("text") or "")),
            }
            link = await names.link(channel, str(m["ts"]))
            if link:
                message["link"] = link
            if m.get("reply_count"):
                message["replies"] = int(m["reply_count"])  # a thread: worth a link
            read.append(message)
        return read

    @tool
    async def read_thread(ctx: ToolContext) -> dict[str, Any]:
        """Read the current thread: its first message and the latest 50 replies, oldest first."""
        channel, thread_ts = _where(ctx)
        client, names = await slack_of(ctx)
        replies: list[dict[str, Any]] = []
        cursor: str | None = None
        while len(replies) < MAX_THREAD_READ:
            answer = await client.conversations_replies(
                channel=channel, ts=thread_ts, limit=THREAD_PAGE, cursor=cursor
            )
            replies += answer["messages"]
            cursor = (answer.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                break
        root, rest = replies[:1], replies[1:]
        latest = rest[-(PAGE - 1) :] if len(rest) >= PAGE else rest
        read: dict[str, Any] = {
            "channel": await names.channel(channel),
            "messages": await shown(names, root + latest, channel),
        }
        if len(rest) > len(latest) or cursor is not None:
            read["skipped"] = "older replies between the first message and these were left out"
        return read

    @tool
    async def read_channel(
        ctx: ToolContext,
        channel: str | None = None,
        since: str | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """Read a channel's top-level messages: the latest 50, or all since a time.

        Without ``since``: newest first, 50 at a time (``next_cursor`` reads further
        back). With ``since``: the period's messages, oldest first, for a summary;
        past 300 these are its newest 300, and ``next_cursor`` reads the older ones.
        Each message has its ``link``; ``replies`` counts a thread's answers.

        Args:
            ctx: The call's context (the engine fills it in).
            channel: A public channel: its name (``#general``) or id (``C…``). Left
                out: the channel the person has open beside this conversation.
            since: Seconds since the epoch, or a message's ``ts``: only what came after.
            cursor: From a previous call's ``next_cursor``, to read on.
        """
        client, names = await slack_of(ctx)
        channel = channel or await _in_view(client, ctx)
        found = await names.channel_id(channel)
        await _open_to_all(client, found, ctx, names)
        oldest = _epoch(since) if since else None
        messages: list[dict[str, Any]] = []
        stopped: str | None = None
        while True:
            try:
                answer = await client.conversations_history(
                    channel=found, limit=PAGE, cursor=cursor or None, oldest=oldest
                )
            except SlackApiError as exc:
                error = exc.response.get("error")
                if error == "ratelimited" and messages:
                    # what was read is worth a summary; Slack may allow one read a minute
                    stopped = (
                        f"Slack's rate limit stopped the read after the newest {len(messages)}"
                        " messages; next_cursor reads the older ones, later"
                    )
                    break
                raise ToolError(f"cannot read {channel}: {error}") from None
            messages += answer["messages"]
            cursor = (answer.get("response_metadata") or {}).get("next_cursor") or None
            if oldest is None or cursor is None or len(messages) >= MAX_PERIOD_READ:
                break
        if oldest is not None:
            messages.reverse()  # a period reads best in the order it happened
        read: dict[str, Any] = {
            "channel": await names.channel(found),
            "messages": await shown(names, messages, found),
            "next_cursor": cursor,
        }
        return read | ({"stopped": stopped} if stopped else {})

    @tool
    async def post_message(channel: str, text: str, ctx: ToolContext) -> dict[str, Any]:
        """Post a message to a channel, once a person allowed to approves it.

        Args:
            channel: A public channel: its name (``#general``) or id (``C…``).
            text: The message, in Slack markdown.
            ctx: The call's context (the engine fills it in).
        """
        client, names = await slack_of(ctx)
        channel = await names.channel_id(channel)
        quoted = "\n".join(f">{line}" for line in text.splitlines() or [""])
        prompt = f"Post to <#{channel}>?\n{quoted}"
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ToolError(
                f"the post is {len(text)} characters on {len(text.splitlines())} lines; an "
                f"approval shows {MAX_PROMPT_CHARS} characters with the quote marks, so nobody "
                "could see all of what they approve: shorten it"
            )
        await _open_to_all(client, channel, ctx, names)
        ttl = approvals.ttl(_notebook(ctx))  # BOT_CONFIG's [approvals], by the thread's channel
        approved = await ctx.request_input(
            id="post", prompt=prompt, schema={"type": "boolean"}, ttl=ttl
        )
        if approved is EXPIRED:
            return {"posted": False, "reason": "nobody answered in time"}
        if approved is not True:
            return {"posted": False, "reason": "a person denied it"}
        key = post_tag(ctx.idempotency_key)
        # a replay after a crash, or after a post whose answer was lost: posted once
        try:
            already = await look_for(client, channel, None, key)
            if already is not None:
                return {"posted": True, "ts": already}
            posted = await post_once(client, channel, None, key, text=text)
        except SlackApiError as exc:
            raise ToolError(f"Slack refused the post: {exc.response.get('error')}") from None
        except CannotTell as exc:
            raise ToolError(
                f"{exc}, so it cannot be told whether this post was made already: it is not"
                " made again on a guess"
            ) from None
        except AMBIGUOUS as exc:
            raise ToolError(
                f"Slack could not be reached ({type(exc).__name__}), and the post is not in"
                f" <#{channel}>'s newest messages"
            ) from None
        return {"posted": True, "ts": posted}

    @tool
    def remember(note: str, ctx: ToolContext) -> dict[str, int]:
        """Keep a note for this channel; every thread of the channel can recall it."""
        return {"notes": _CHANNEL_NOTES.add(ctx, _notebook(ctx), note)}

    @tool
    def recall(ctx: ToolContext) -> dict[str, list[str]]:
        """The notes kept for this channel, oldest first."""
        return {"notes": _CHANNEL_NOTES.read(ctx, _notebook(ctx))}

    return [read_thread, read_channel, post_message, remember, recall]


def _epoch(since: str) -> str:
    """``since`` as Slack's ``oldest`` (seconds since the epoch, as text).

    Raises:
        ToolError: It is not a number of seconds.
    """
    try:
        return f"{float(since):.6f}"
    except ValueError:
        raise ToolError(
            f"since is seconds since the epoch or a message ts, not {since!r}"
        ) from None
