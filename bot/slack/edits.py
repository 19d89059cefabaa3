"""A person's message changed after it was sent: an edit, or a deletion.

Slack sends both as ``message`` events with a subtype: ``message_changed`` carries the
message as it now reads (``message``) and as it read before (``previous_message``);
``message_deleted`` carries ``deleted_ts`` and the message as it was. Pure functions of
the envelope, as `bot.slack.inbound` is:

- an edit that adds a mention of the bot asks it, once: the turn is the message's own
  (``<team>:<channel>:<ts>``), so a second edit, or the message already answered (in a
  DM, a thread the bot is in), starts nothing new;
- any other edit of a message whose turn has not finished supersedes that turn as a
  follow-up would: its turn id is the message's with the edit's ts (``…~<edited ts>``);
- a deletion cancels the message's turn if it has not finished (reason ``deleted``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.slack.inbound import Ignored, Inbound, read_event, session_id

__all__ = ["Deleted", "Edited", "read_change"]

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Edited:
    """A person's message, edited."""

    inbound: Inbound
    """The message as it now reads, as a turn: the message's own turn id when the edit
    mentions the bot for the first time, else the edit's."""
    original_turn: str
    """The turn of the message as first sent."""
    newly_mentioned: bool


@dataclass(frozen=True, slots=True)
class Deleted:
    """A person's message, deleted."""

    session_id: str
    turn_id: str
    """The turn the message opened, if it opened one."""


def read_change(body: Json, *, bot_user_id: str) -> Edited | Deleted | Ignored:
    """What an edit or a deletion asks of the bot."""
    event = body.get("event")
    if not isinstance(event, dict) or event.get("type") != "message":
        return Ignored("not a message event")
    if event.get("subtype") == "message_deleted":
        return _deleted(body, event)
    if event.get("subtype") != "message_changed":
        return Ignored(f"{event.get('subtype')} is neither an edit nor a deletion")
    now, before = event.get("message"), event.get("previous_message")
    if not isinstance(now, dict) or not isinstance(before, dict):
        return Ignored("an edit without the message before and after")
    if now.get("text") == before.get("text"):
        return Ignored("an edit that left the text as it was (an unfurl, a reaction...)")
    # the message as it now reads, as if it had just been sent; its ts and thread are the
    # message's own (Slack's recorded payloads do not always repeat them in ``message``)
    kept = {k: before[k] for k in ("ts", "thread_ts", "user") if k in before}
    as_sent = {**kept, **now, "channel": event.get("channel"), "type": "message"}
    as_sent.setdefault("channel_type", event.get("channel_type"))
    read = read_event({**body, "event": as_sent}, bot_user_id=bot_user_id)
    if isinstance(read, Ignored):
        return read
    mention = f"<@{bot_user_id}"
    newly_mentioned = mention in str(now.get("text")) and mention not in str(before.get("text"))
    original = read.turn_id
    if newly_mentioned:
        return Edited(read, original, newly_mentioned=True)
    edited = now.get("edited")
    edited_ts = edited.get("ts") if isinstance(edited, dict) else None
    if not isinstance(edited_ts, str) or not edited_ts:
        return Ignored("an edit without its edited.ts")
    # an edit is a message of its own: it may supersede the turn it changes
    again = Inbound(
        session_id=read.session_id,
        turn_id=f"{original}~{edited_ts}",
        input=read.input,
        channel=read.channel,
        thread_ts=read.thread_ts,
        input_ts=edited_ts,
        needs_thread=True,
        files=read.files,
    )
    return Edited(again, original, newly_mentioned=False)


def _deleted(body: Json, event: Json) -> Deleted | Ignored:
    before = event.get("previous_message")
    channel, team = event.get("channel"), body.get("team_id") or event.get("team")
    deleted = event.get("deleted_ts")
    if not (isinstance(before, dict) and isinstance(channel, str) and isinstance(team, str)):
        return Ignored("a deletion without the message, its channel or team")
    if not isinstance(deleted, str) or before.get("bot_id"):
        return Ignored("a deletion of a bot's message, or without deleted_ts")
    thread_ts = before.get("thread_ts")
    root = thread_ts if isinstance(thread_ts, str) and thread_ts else deleted
    return Deleted(session_id(team, channel, root), f"{team}:{channel}:{deleted}")
