"""Which Slack events start a turn, in which session, under which turn id.

Pure functions of the event envelope, so the rules are tested without Slack.
The session is the thread: ``slack:<team>:<channel>:<thread_ts>``, where a
top-level message opens its own thread. The turn id is the triggering
message's address ``<team>:<channel>:<ts>``: a Slack retry of an event, and the
same message delivered once as ``app_mention`` and once as ``message``, both
replay one turn instead of starting two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from agent import InboundEvent, TurnInput

__all__ = ["Ignored", "Inbound", "read_event", "session_id"]

Json = dict[str, Any]

# message subtypes a person sends; every other subtype is an edit, a join, a bot...
_PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>[ \t]*")
"""A user mention, with the spaces after it (they go when the bot's own mention does)."""
EMPTY_MENTION = "(an @mention with no text)"
SLACKBOT = "USLACKBOT"
"""Slackbot's user id: its messages (reminders, notices) carry no ``bot_id``, yet it is a bot."""
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{2,}")
"""JSON may escape half a UTF-16 pair (``"\\ud800"``); Python keeps it, but it cannot be stored."""


@dataclass(frozen=True, slots=True)
class Inbound:
    """A person's message that is for the bot."""

    session_id: str
    turn_id: str
    input: TurnInput
    channel: str
    thread_ts: str
    """Where the reply goes: the thread, rooted at the message when it is top level."""
    input_ts: str
    """The triggering message's own ts."""
    needs_thread: bool
    """Only a turn if the bot already takes part in this thread (a follow-up without
    a mention): the caller checks that the session exists before starting it."""
    files: tuple[Json, ...] = ()
    """The files the message carries (``file_share``), as Slack describes them; read
    (`bot.slack.files.read_files`) only once the turn is about to be admitted."""


@dataclass(frozen=True, slots=True)
class Ignored:
    """An event that starts nothing, and why (for the debug log)."""

    reason: str


def session_id(team: str, channel: str, thread_ts: str) -> str:
    """The engine session of a Slack thread."""
    return f"slack:{team}:{channel}:{thread_ts}"


def read_event(body: Json, *, bot_user_id: str) -> Inbound | Ignored:
    """What an Events API envelope asks of the bot.

    Args:
        body: The whole envelope, as Bolt verified it (its signature is why the
            speaker counts as attested).
        bot_user_id: The bot's own user id, from ``auth.test``.
    """
    event = body.get("event")
    if not isinstance(event, dict):
        return Ignored("no event in the envelope")
    kind = event.get("type")
    if kind not in ("app_mention", "message"):
        return Ignored(f"{kind} events start no turn")
    if event.get("bot_id") or event.get("subtype") not in _PERSON_SUBTYPES:
        return Ignored(f"not a person's message ({event.get('subtype') or 'bot'})")
    if event.get("user") == SLACKBOT:
        return Ignored("not a person's message (Slackbot)")
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    # the workspace the app is installed in: in a Slack Connect channel the speaker's
    # own ``team`` differs, and one thread must stay one session
    team = body.get("team_id") or event.get("team")
    if not (_given(user) and _given(channel) and _given(ts) and _given(team)):
        return Ignored("a message without user, channel, ts or team")
    if user == bot_user_id:
        return Ignored("the bot's own message")
    # a lone surrogate is replaced, as a UTF-8 decoder does: the person still gets an answer
    text = _LONE_SURROGATE.sub("\ufffd", str(event.get("text") or ""))
    mentioned = kind == "app_mention" or any(
        m.group(1) == bot_user_id for m in _MENTION.finditer(text)
    )
    is_direct = event.get("channel_type") == "im"
    thread_ts = event.get("thread_ts")
    in_thread = isinstance(thread_ts, str) and thread_ts != ts
    if not (mentioned or is_direct or in_thread):
        return Ignored("a channel message that is not for the bot")
    root = thread_ts if isinstance(thread_ts, str) and in_thread else ts
    given = TurnInput(
        text=_without_bot_mention(text, bot_user_id),
        user=user,
        event=InboundEvent(
            source="slack",
            user=user,
            attested=True,
            data={
                "team": team,
                "channel": channel,
                "thread_ts": root,
                "ts": ts,
                **_in_view(event),
            },
        ),
    )
    return Inbound(
        session_id=session_id(team, channel, root),
        turn_id=f"{team}:{channel}:{ts}",
        input=given,
        channel=channel,
        thread_ts=root,
        input_ts=ts,
        needs_thread=not (mentioned or is_direct),
        files=tuple(f for f in event.get("files") or () if isinstance(f, dict)),
    )


def _in_view(event: Json) -> dict[str, str]:
    """``context_channel``: the channel the person had open beside the agent, if Slack said.

    Under ``agent_view`` a message carries ``app_context``: the entities the person was
    viewing, most relevant first (docs.slack.dev, app_context_changed); a channel, or a
    message in one, names the channel.
    """
    context = event.get("app_context")
    entities = context.get("entities") if isinstance(context, dict) else None
    for entity in entities if isinstance(entities, list) else ():
        if not isinstance(entity, dict):
            continue
        value = entity.get("value")
        if entity.get("type") == "slack#/types/message_context" and isinstance(value, dict):
            value = value.get("channel_id")
        elif entity.get("type") != "slack#/types/channel_id":
            continue
        if _given(value) and _CHANNEL_ID.fullmatch(value):
            return {"context_channel": value}
    return {}


def _given(value: object) -> TypeGuard[str]:
    """A Slack id or ts: a non-empty string (Slack's are ASCII; one with a surrogate is not)."""
    return isinstance(value, str) and bool(value) and not _LONE_SURROGATE.search(value)


def _without_bot_mention(text: str, bot_user_id: str) -> str:
    """The message as the model should read it: the bot's own mention taken out."""
    # only the mention goes: line breaks and indentation (a code block) are the person's
    kept = _MENTION.sub(lambda m: "" if m.group(1) == bot_user_id else m.group(0), text).strip()
    return kept or EMPTY_MENTION
