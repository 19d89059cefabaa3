"""Which Slack events start a turn, in which session, and under which turn id."""

from __future__ import annotations

from typing import Any

import pytest

from bot.slack.inbound import EMPTY_MENTION, Ignored, Inbound, read_event

BOT = "U0BOT"


def envelope(**event: Any) -> dict[str, Any]:
    base = {"user": "U0ANA", "channel": "C0GEN", "ts": "1700000000.000200", "team": "T0"}
    return {"type": "event_callback", "team_id": "T0", "event_id": "Ev1", "event": base | event}


def inbound(**event: Any) -> Inbound:
    found = read_event(envelope(**event), bot_user_id=BOT)
    assert isinstance(found, Inbound), found
    return found


def test_a_top_level_mention_opens_a_thread_under_itself():
    found = inbound(type="app_mention", text="<@U0BOT> when is the deploy?")

    assert found.session_id == "slack:T0:C0GEN:1700000000.000200"
    assert found.turn_id == "T0:C0GEN:1700000000.000200"
    assert (found.channel, found.thread_ts, found.needs_thread) == (
        "C0GEN",
        "1700000000.000200",
        False,
    )
    assert found.input.text == "when is the deploy?"
    assert found.input.user == "U0ANA"
    assert found.input.event is not None
    assert (found.input.event.user, found.input.event.attested) == ("U0ANA", True)
    assert found.input.event.data["thread_ts"] == "1700000000.000200"


def test_a_mention_in_a_thread_joins_that_thread():
    found = inbound(type="app_mention", text="<@U0BOT> and now?", thread_ts="1700000000.000100")

    assert found.session_id == "slack:T0:C0GEN:1700000000.000100"
    assert found.thread_ts == "1700000000.000100"


def test_the_message_copy_of_a_mention_is_the_same_turn():
    mention = inbound(type="app_mention", text="<@U0BOT> hi", event_ts="1")
    copy = inbound(type="message", channel_type="channel", text="<@U0BOT> hi")

    assert (copy.session_id, copy.turn_id, copy.input) == (
        mention.session_id,
        mention.turn_id,
        mention.input,
    )


def test_a_direct_message_starts_a_turn_without_a_mention():
    found = inbound(type="message", channel="D0ANA", channel_type="im", text="hello")

    assert found.session_id == "slack:T0:D0ANA:1700000000.000200"
    assert not found.needs_thread


def test_a_follow_up_in_a_thread_is_a_turn_only_where_the_bot_takes_part():
    found = inbound(
        type="message", channel_type="channel", text="thanks", thread_ts="1700000000.000100"
    )

    assert found.needs_thread
    assert found.session_id == "slack:T0:C0GEN:1700000000.000100"


@pytest.mark.parametrize(
    ("event", "why"),
    [
        ({"type": "message", "channel_type": "channel", "text": "lunch?"}, "not for the bot"),
        ({"type": "message", "text": "hi", "bot_id": "B0OTHER"}, "not a person"),
        ({"type": "message", "text": "hi", "subtype": "message_changed"}, "not a person"),
        ({"type": "message", "text": "hi", "subtype": "channel_join"}, "not a person"),
        ({"type": "app_mention", "text": "<@U0BOT> hi", "user": BOT}, "own message"),
        ({"type": "app_mention", "text": "hi", "user": None}, "without user"),
        ({"type": "reaction_added"}, "start no turn"),
    ],
    ids=["chatter", "other-bot", "edit", "join", "own", "no-user", "reaction"],
)
def test_what_starts_nothing(event, why):
    found = read_event(envelope(**event), bot_user_id=BOT)

    assert isinstance(found, Ignored)
    assert why in found.reason


def test_an_envelope_without_an_event_starts_nothing():
    assert isinstance(read_event({"type": "event_callback"}, bot_user_id=BOT), Ignored)


def test_other_mentions_stay_and_an_empty_mention_still_says_something():
    kept = inbound(type="app_mention", text="<@U0BOT>  ask <@U0BEN|ben> about <@U0BOT> it")
    empty = inbound(type="app_mention", text="<@U0BOT>")

    assert kept.input.text == "ask <@U0BEN|ben> about it"
    assert empty.input.text == EMPTY_MENTION


def test_the_message_keeps_its_lines_and_indentation():
    text = "<@U0BOT> why does this fail?\n\n```\ndef f():\n    return  1\n```"

    found = inbound(type="app_mention", text=text)

    assert found.input.text == "why does this fail?\n\n```\ndef f():\n    return  1\n```"


def test_a_file_share_and_a_thread_broadcast_are_a_persons_messages():
    for subtype in ("file_share", "thread_broadcast"):
        assert inbound(type="message", channel_type="im", subtype=subtype, text="see this")


def test_a_mention_of_another_bot_whose_id_starts_alike_is_not_for_us():
    found = read_event(
        envelope(type="message", channel_type="channel", text="<@U0BOT2> deploy?"),
        bot_user_id=BOT,
    )
    assert isinstance(found, Ignored)


def test_a_slack_connect_speaker_stays_in_the_installing_workspaces_session():
    body = envelope(type="app_mention", text="<@U0BOT> hi", team="T0OTHER")
    found = read_event(body, bot_user_id=BOT)

    assert isinstance(found, Inbound)
    assert found.session_id == "slack:T0:C0GEN:1700000000.000200"


def test_slackbot_is_a_bot_though_its_messages_carry_no_bot_id():
    found = read_event(
        envelope(type="message", user="USLACKBOT", channel="D0SB", channel_type="im", text="hi"),
        bot_user_id=BOT,
    )

    assert found == Ignored("not a person's message (Slackbot)")


def test_a_lone_surrogate_in_the_text_is_replaced_and_one_in_an_id_starts_nothing():
    assert inbound(type="app_mention", text="<@U0BOT> a \ud800 b").input.text == "a \ufffd b"
    assert inbound(type="app_mention", text="<@U0BOT> \U0001f600").input.text == "\U0001f600"
    found = read_event(envelope(type="app_mention", user="U0\udc00"), bot_user_id=BOT)
    assert isinstance(found, Ignored)
