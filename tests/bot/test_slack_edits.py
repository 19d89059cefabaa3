"""Edits, deletions and group DMs, through the real Bolt app against the fake Slack.

The envelopes are Slack's own shapes: ``message_changed`` and ``message_deleted``
as slackapi/bolt-python records them in tests/scenario_tests_async/
test_message_changed.py and test_message_deleted.py (at a2f21ae), where the
edited ``message`` repeats neither its ``ts`` nor its thread.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agent import Cancelled
from bot.slack.edits import Deleted, Edited, read_change
from bot.slack.inbound import Ignored
from bot.texts import CANCELLED, SUPERSEDED
from tests.bot.slack_harness import WAIT, Bot

BOT = "U0BOT"


def changed(bot: Bot, ts: str, before: str, after: str, *, edited_at: str, **where: Any) -> Any:
    """A ``message_changed`` envelope, shaped as Slack's recorded one."""
    slack = bot.slack
    inner = {
        "type": "message",
        "subtype": "message_changed",
        "message": {
            "type": "message",
            "text": after,
            "user": slack.user_id,
            "team": slack.team_id,
            "edited": {"user": slack.user_id, "ts": edited_at},
        },
        "previous_message": {
            "type": "message",
            "text": before,
            "user": slack.user_id,
            "team": slack.team_id,
            "ts": ts,
            **where,
        },
        "channel": slack.channel_id,
        "hidden": True,
        "ts": edited_at,
        "event_ts": edited_at,
        "channel_type": "channel",
    }
    return envelope(bot, inner, f"Ev-edit-{edited_at}")


def deleted(bot: Bot, ts: str, text: str) -> Any:
    slack = bot.slack
    inner = {
        "type": "message",
        "subtype": "message_deleted",
        "previous_message": {
            "type": "message",
            "text": text,
            "user": slack.user_id,
            "team": slack.team_id,
            "ts": ts,
        },
        "channel": slack.channel_id,
        "hidden": True,
        "deleted_ts": ts,
        "event_ts": "1700000999.000100",
        "ts": "1700000999.000100",
        "channel_type": "channel",
    }
    return envelope(bot, inner, f"Ev-delete-{ts}")


def envelope(bot: Bot, inner: dict[str, Any], event_id: str) -> dict[str, Any]:
    return {
        "token": "verification-token",
        "team_id": bot.slack.team_id,
        "api_app_id": bot.slack.app_id,
        "event": inner,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
    }


# -- what a change asks, read off the envelope -------------------------------------------


def test_bolts_recorded_edit_and_deletion_are_read_as_slack_sends_them():
    edit = {
        "team_id": "T111",
        "event": {
            "type": "message",
            "subtype": "message_changed",
            "message": {
                "type": "message",
                "text": "<@U0BOT> updated message",
                "user": "U111",
                "team": "T111",
                "edited": {"user": "U111", "ts": "1665102362.000000"},
            },
            "previous_message": {
                "type": "message",
                "text": "original message",
                "user": "U222",
                "team": "T111",
                "ts": "1665102338.901939",
            },
            "channel": "C111",
            "hidden": True,
            "ts": "1665102362.013600",
            "channel_type": "channel",
        },
    }
    read = read_change(edit, bot_user_id=BOT)
    assert isinstance(read, Edited)
    assert read.newly_mentioned
    assert read.inbound.turn_id == read.original_turn == "T111:C111:1665102338.901939"
    assert read.inbound.input.text == "updated message"
    assert read.inbound.input.user == "U111"  # who the message is now from, as Slack says

    edit["event"]["previous_message"]["text"] = "<@U0BOT> original message"  # type: ignore[index]
    again = read_change(edit, bot_user_id=BOT)
    assert isinstance(again, Edited)
    assert not again.newly_mentioned
    assert again.inbound.turn_id == "T111:C111:1665102338.901939~1665102362.000000"
    assert again.inbound.input_ts == "1665102362.000000"

    deletion = {
        "team_id": "T111",
        "event": {
            "type": "message",
            "subtype": "message_deleted",
            "previous_message": {"type": "message", "text": "x", "user": "U111", "ts": "1.000001"},
            "channel": "C111",
            "hidden": True,
            "deleted_ts": "1.000001",
            "channel_type": "channel",
        },
    }
    assert read_change(deletion, bot_user_id=BOT) == Deleted(
        "slack:T111:C111:1.000001", "T111:C111:1.000001"
    )


def test_an_unfurl_or_a_bots_own_edit_asks_nothing():
    same = {
        "team_id": "T1",
        "event": {
            "type": "message",
            "subtype": "message_changed",
            "message": {"text": "see https://x", "user": "U1", "ts": "1.1"},
            "previous_message": {"text": "see https://x", "user": "U1", "ts": "1.1"},
            "channel": "C1",
        },
    }
    assert isinstance(read_change(same, bot_user_id=BOT), Ignored)
    bots = {
        "team_id": "T1",
        "event": {
            "type": "message",
            "subtype": "message_changed",
            "message": {"text": "a reply, updated", "user": BOT, "bot_id": "B0BOT", "ts": "1.2"},
            "previous_message": {"text": "a reply", "user": BOT, "bot_id": "B0BOT", "ts": "1.2"},
            "channel": "C1",
        },
    }
    assert isinstance(read_change(bots, bot_user_id=BOT), Ignored)


# -- through the app -----------------------------------------------------------------


async def test_a_message_edited_to_mention_the_bot_is_answered_once(bot: Bot):
    ts = bot.slack.post_user_message(bot.slack.channel_id, "what is the plan")
    await bot.deliver(bot.envelope("message", "what is the plan", ts, channel_type="channel"))
    mentioned = "<@U0BOT> what is the plan"

    for _ in range(2):  # Slack sends an event again when an ack is late
        edit = changed(bot, ts, "what is the plan", mentioned, edited_at="1700000050.000000")
        assert await bot.deliver(edit) == 200
    said = await bot.replies_in(ts)
    # and an edit after that, with the mention kept, asks nothing new: the turn is over
    later = changed(bot, ts, mentioned, "<@U0BOT> what is the plan?", edited_at="1700000060.000000")
    assert await bot.deliver(later) == 200
    await asyncio.sleep(0.2)

    assert said == ["you said: what is the plan"]
    assert await bot.replies_in(ts) == said
    assert len(bot.model.requests) == 1


async def test_an_edit_of_a_question_still_being_answered_supersedes_its_reply(bot: Bot):
    asked = "<@U0BOT> think slowly"
    ts = bot.slack.post_user_message(bot.slack.channel_id, asked)
    await bot.deliver(bot.envelope("app_mention", asked, ts))
    await asyncio.wait_for(bot.held.wait(), WAIT)

    edit = changed(bot, ts, asked, "<@U0BOT> actually, quickly", edited_at="1700000050.000000")
    assert await bot.deliver(edit) == 200

    said = await bot.replies_in(ts, 2)
    assert said == [SUPERSEDED, "you said: actually, quickly"]


async def test_deleting_a_question_whose_reply_is_at_work_stops_it(bot: Bot):
    asked = "<@U0BOT> think slowly"
    ts = bot.slack.post_user_message(bot.slack.channel_id, asked)
    await bot.deliver(bot.envelope("app_mention", asked, ts))
    await asyncio.wait_for(bot.held.wait(), WAIT)

    assert await bot.deliver(deleted(bot, ts, asked)) == 200

    turn_id = f"{bot.slack.team_id}:{bot.slack.channel_id}:{ts}"
    session = bot.runtime.session("bot", f"slack:{bot.slack.team_id}:{bot.slack.channel_id}:{ts}")
    result = await asyncio.wait_for(session.result(turn_id), WAIT)
    assert isinstance(result, Cancelled)
    assert result.reason == "deleted"
    assert await bot.replies_in(ts) == [CANCELLED["deleted"]]


async def test_deleting_an_answered_question_or_a_strangers_message_changes_nothing(bot: Bot):
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> hello")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> hello", ts))
    said = await bot.replies_in(ts)
    other = bot.slack.post_user_message(bot.slack.channel_id, "not for the bot")

    assert await bot.deliver(deleted(bot, ts, "<@U0BOT> hello")) == 200
    assert await bot.deliver(deleted(bot, other, "not for the bot")) == 200
    await asyncio.sleep(0.2)

    assert await bot.replies_in(ts) == said == ["you said: hello"]


async def test_a_group_dm_is_answered_when_the_bot_is_mentioned_and_in_its_threads(bot: Bot):
    slack = bot.slack
    slack.add_user("U0BEN", name="ben")
    slack.add_channel("G0GROUP", is_private=True, members=[slack.user_id, "U0BEN"])
    chatter = slack.post_user_message("G0GROUP", "lunch?")
    await bot.deliver(
        bot.envelope("message", "lunch?", chatter, channel="G0GROUP", channel_type="mpim")
    )
    asked = slack.post_user_message("G0GROUP", "<@U0BOT> hello")
    await bot.deliver(
        bot.envelope("message", "<@U0BOT> hello", asked, channel="G0GROUP", channel_type="mpim")
    )
    [first] = await bot.written_replies(asked, channel="G0GROUP")
    follow = slack.post_user_message("G0GROUP", "and you?", user="U0BEN", thread_ts=asked)
    await bot.deliver(
        bot.envelope(
            "message",
            "and you?",
            follow,
            channel="G0GROUP",
            channel_type="mpim",
            thread_ts=asked,
            user="U0BEN",
        )
    )

    said = [m.text for m in await bot.written_replies(asked, 3, channel="G0GROUP")]
    assert first.text == "you said: hello"
    assert said[-1] == "you said: and you?"
    assert slack.replies("G0GROUP", chatter) == []  # people talking among themselves
