"""Every request Slack (or anyone) sends gets a 2xx or a precise 4xx, and bad input starts nothing.

Against the real aiohttp server and Bolt app, as `tests/bot/test_slack_app.py`
builds them. Each case here was a 500 or a 404 before: the 404s are requests
real Slack sends and retries when it is not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest

from bot.texts import NO_POLICIES
from tests.bot.slack_harness import SECRET, Bot
from tests.fakes.slack_socket import SocketMode

EVENTS = "/slack/events"


async def post(bot: Bot, body: bytes | str, headers: dict[str, str]) -> tuple[int, Any]:
    async with bot.http.post(f"{bot.url}{EVENTS}", data=body, headers=headers) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text) if text else None
        except ValueError:
            return response.status, text


def signed_bytes(body: bytes, stamp: str) -> dict[str, str]:
    digest = hmac.new(SECRET.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
        "Content-Type": "application/json",
    }


def as_form(payload: dict[str, Any]) -> str:
    return urlencode({"payload": json.dumps(payload)})


async def post_signed(bot: Bot, payload: dict[str, Any], *, form: bool) -> tuple[int, Any]:
    body = as_form(payload) if form else json.dumps(payload)
    headers = bot.signed(body)
    if form:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    return await post(bot, body, headers)


async def still_answers(bot: Bot) -> None:
    """The next good request is served as ever."""
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> still there?")
    assert await bot.deliver(bot.envelope("app_mention", "<@U0BOT> still there?", ts)) == 200
    assert await bot.replies_in(ts) == ["you said: still there?"]


# -- signatures ---------------------------------------------------------------------------


@pytest.mark.parametrize("stamp", ["abc", "", "1796161299.5", " 12", "١٢٣", "9" * 5000])
async def test_a_timestamp_that_is_not_whole_seconds_is_refused_as_unsigned(bot: Bot, stamp: str):
    body = json.dumps(bot.envelope("app_mention", "<@U0BOT> hi", "1.000001"))
    headers = signed_bytes(body.encode(), str(int(time.time()))) | {
        "X-Slack-Request-Timestamp": stamp
    }

    status, answer = await post(bot, body, headers)

    assert status == 401  # slack_sdk's int() raised here: a 500
    assert "X-Slack-Request-Timestamp" in answer["error"] or "signature" in answer["error"]
    assert not bot.model.requests
    await still_answers(bot)


async def test_a_body_that_is_not_utf8_gets_a_400_once_signed_and_a_401_unsigned(bot: Bot):
    body = b'{"type": "event_callback", "x": "\xff\xfe"}'
    stamp = str(int(time.time()))

    assert (await post(bot, body, signed_bytes(body, stamp)))[0] == 400
    forged = signed_bytes(body, stamp) | {"X-Slack-Signature": "v0=" + "0" * 64}
    assert (await post(bot, body, forged))[0] == 401
    assert not bot.model.requests
    await still_answers(bot)


@pytest.mark.parametrize("depth", [100_000, 65], ids=["recursion", "over-the-limit"])
@pytest.mark.parametrize("form", [False, True], ids=["json", "form"])
async def test_a_signed_body_nested_too_deep_gets_a_400(bot: Bot, depth: int, form: bool):
    nested = "[" * depth + "]" * depth
    payload = f'{{"type": "event_callback", "x": {nested}}}'
    body = urlencode({"payload": payload}) if form else payload
    headers = bot.signed(body)
    if form:
        headers["Content-Type"] = "application/x-www-form-urlencoded"

    status, answer = await post(bot, body, headers)

    assert (status, answer) == (400, {"error": "malformed body: nested deeper than 64"})
    await still_answers(bot)


# -- bodies Bolt indexes without looking -----------------------------------------------------

MISSING: dict[str, tuple[dict[str, Any], str]] = {
    "block actions with no action": (
        {"type": "block_actions", "actions": [], "user": {"id": "U0ALICE"}},
        "actions.0",
    ),
    "a view submission whose view has no type": (
        {"type": "view_submission", "view": {"callback_id": "x", "id": "V1"}},
        "view.type",
    ),
    "a legacy attachment click with no actions": (
        {"type": "interactive_message", "callback_id": "poll", "user": {"id": "U0ALICE"}},
        "actions.0",
    ),
    "a block action with no action_id": (
        {"type": "block_actions", "actions": [{"block_id": "b"}]},
        "actions.0.action_id",
    ),
    # found by test_slack_fuzz: Bolt reads the step for every listener's matcher (a 500)
    "a step from apps' edit with no step": (
        {"type": "workflow_step_edit", "callback_id": "U0ALICE"},
        "workflow_step",
    ),
    "a step from apps' save with no step": (
        {"type": "view_submission", "view": {"type": "workflow_step", "callback_id": "x"}},
        "workflow_step",
    ),
}


@pytest.mark.parametrize("case", MISSING)
async def test_a_signed_payload_missing_what_bolt_reads_gets_a_400_naming_it(bot: Bot, case: str):
    payload, named = MISSING[case]

    status, answer = await post_signed(bot, payload, form=True)

    assert (status, answer) == (400, {"error": f"malformed body: missing {named}"})
    await still_answers(bot)


async def test_a_legacy_attachment_button_click_is_acked(bot: Bot):
    # an attachment button of the message-buttons era: name and value, no action_id
    # (https://docs.slack.dev/legacy/legacy-messaging/legacy-message-buttons)
    payload = {
        "type": "interactive_message",
        "callback_id": "wopr_game",
        "actions": [{"name": "choice", "type": "button", "value": "war"}],
        "team": {"id": "T0TEAM", "domain": "example"},
        "channel": {"id": "C0GENERAL", "name": "general"},
        "user": {"id": "U0ALICE", "name": "alice"},
        "action_ts": "1458170917.164398",
        "message_ts": "1458170866.000004",
        "attachment_id": "1",
        "token": "xAB3yVzGS4BQ3O9FACTa8Ho4",
        "response_url": "https://hooks.slack.com/actions/T0/1/x",
    }

    assert await post_signed(bot, payload, form=True) == (200, None)
    assert not bot.model.requests


# -- what real Slack sends and no listener handles ------------------------------------------


def event(bot: Bot, inner: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": bot.slack.team_id,
        "api_app_id": bot.slack.app_id,
        "event_id": "Ev0UNHANDLED",
        "event_time": int(time.time()),
        "event": inner,
    }


UNHANDLED: dict[str, Any] = {
    "app_rate_limited": lambda bot: {
        "token": "x",
        "type": "app_rate_limited",
        "team_id": bot.slack.team_id,
        "minute_rate_limited": 1518467820,
        "api_app_id": bot.slack.app_id,
    },
    "member_joined_channel": lambda bot: event(
        bot, {"type": "member_joined_channel", "user": "U0ALICE", "channel": "C0GENERAL"}
    ),
    "reaction_added": lambda bot: event(
        bot,
        {
            "type": "reaction_added",
            "user": "U0ALICE",
            "reaction": "thumbsup",
            "item": {"type": "message", "channel": "C0GENERAL", "ts": "1.000001"},
            "event_ts": "1.000002",
        },
    ),
}
UNHANDLED_FORMS: dict[str, Any] = {
    "another app's block action": {
        "type": "block_actions",
        "user": {"id": "U0ALICE"},
        "actions": [{"type": "button", "action_id": "someone_elses", "block_id": "b"}],
    },
    "view_closed": {
        "type": "view_closed",
        "user": {"id": "U0ALICE"},
        "view": {"id": "V1", "type": "modal", "callback_id": "x"},
        "is_cleared": False,
    },
    "shortcut": {"type": "shortcut", "callback_id": "do_it", "user": {"id": "U0ALICE"}},
    "message_action": {
        "type": "message_action",
        "callback_id": "do_it",
        "user": {"id": "U0ALICE"},
        "channel": {"id": "C0GENERAL"},
        "message": {"type": "message", "ts": "1.000001", "text": "hi"},
    },
}


@pytest.mark.parametrize("kind", [*UNHANDLED, *UNHANDLED_FORMS])
async def test_what_slack_sends_and_the_bot_does_not_handle_is_acked_and_logged_once(
    bot: Bot, kind: str, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG, logger="bot.slack")
    if kind in UNHANDLED:
        answered = await post_signed(bot, UNHANDLED[kind](bot), form=False)
    else:
        answered = await post_signed(bot, UNHANDLED_FORMS[kind], form=True)

    assert answered == (200, None)  # Bolt answered 404, and Slack would send it again
    said = [r for r in caplog.records if r.name == "bot.slack" and "nothing handles" in r.message]
    assert [r.levelno for r in said] == [logging.DEBUG]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    await asyncio.sleep(0.05)
    assert not bot.model.requests


@pytest.mark.parametrize(
    "inner",
    [
        {"type": "tokens_revoked", "tokens": {"oauth": ["U0ALICE"], "bot": ["U0BOT"]}},
        {"type": "app_uninstalled"},
    ],
    ids=["tokens_revoked", "app_uninstalled"],
)
async def test_an_uninstall_of_the_one_workspace_is_acked_and_says_the_token_is_gone(
    bot: Bot, inner: dict[str, Any], caplog: pytest.LogCaptureFixture
):
    # with OAuth the workspace is forgotten (test_slack_oauth); with one token, nothing is kept
    assert await post_signed(bot, event(bot, inner), form=False) == (200, None)

    warned = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert any("SLACK_BOT_TOKEN no longer works" in m for m in warned)


async def test_an_unknown_slash_command_is_acked(bot: Bot):
    body = urlencode({"command": "/other", "text": "x", "user_id": "U0ALICE", "team_id": "T0"})
    headers = bot.signed(body) | {"Content-Type": "application/x-www-form-urlencoded"}

    assert (await post(bot, body, headers))[0] == 200


@pytest.mark.parametrize("text", ["show payload", "payload", "", "set x"])
async def test_the_policy_command_is_answered_whatever_its_text_says(bot: Bot, text: str):
    # the form of docs.slack.dev/interactivity/implementing-slash-commands, for this command
    body = urlencode(
        {
            "token": "gIkuvaNzQIHg97ATvDxqgjtO",
            "team_id": bot.slack.team_id,
            "team_domain": "example",
            "enterprise_id": "E0001",
            "enterprise_name": "Globular Construct Inc",
            "channel_id": bot.slack.channel_id,
            "channel_name": "test",
            "user_id": "U0ALICE",
            "user_name": "Steve",
            "command": "/agent-policy",
            "text": text,
            "response_url": "https://hooks.slack.com/commands/1234/5678",
            "trigger_id": "13345224609.738474920.8088930838d88f008e0",
            "api_app_id": bot.slack.app_id,
        }
    )
    headers = bot.signed(body) | {"Content-Type": "application/x-www-form-urlencoded"}

    # Bolt read a form saying "payload" anywhere as a click's, {}, and acked it unhandled
    assert await post(bot, body, headers) == (200, NO_POLICIES)


# -- messages that are not a person's ------------------------------------------------------


async def test_slackbot_in_a_direct_message_starts_no_turn(bot: Bot):
    bot.slack.add_user("USLACKBOT", name="slackbot")
    bot.slack.add_channel("D0SLACKBOT", members=["USLACKBOT"], is_im=True)
    said = "Reminder: submit your timesheet."
    ts = bot.slack.post_user_message("D0SLACKBOT", said, user="USLACKBOT")
    envelope = bot.envelope(
        "message", said, ts, channel="D0SLACKBOT", channel_type="im", user="USLACKBOT"
    )

    assert await bot.deliver(envelope) == 200

    await asyncio.sleep(0.2)  # time for a turn, were there one
    assert not bot.model.requests
    assert [m.text for m in bot.slack.messages("D0SLACKBOT")] == [said]


async def test_a_message_with_a_lone_surrogate_is_answered_with_it_replaced(bot: Bot):
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> half a pair")
    envelope = bot.envelope("app_mention", "<@U0BOT> half \ud800 a pair", ts)
    body = json.dumps(envelope)  # ensure_ascii: "\\ud800", as JSON may carry it
    assert "\\ud800" in body

    assert (await post(bot, body, bot.signed(body)))[0] == 200

    assert await bot.replies_in(ts) == ["you said: half \ufffd a pair"]


# -- Socket Mode ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def over_the_socket(bot: Bot) -> AsyncIterator[SocketMode]:
    """The bot's Bolt app, taking Slack's envelopes over Socket Mode while the block runs."""
    from bot.slack.app import bolt_app
    from bot.slack.run import socket_mode

    async with socket_mode(
        bolt_app(bot.channel, bot.client, SECRET), bot.client, bot.slack.app_token
    ):
        yield bot.slack.socket_mode


async def test_in_socket_mode_a_malformed_envelope_leaves_the_socket_serving(bot: Bot):
    async with over_the_socket(bot) as sockets:
        socket = await sockets._connection()
        await socket.send_str("not json")  # each of these once killed nothing but itself
        await socket.send_json({"type": "events_api", "envelope_id": "e-1", "payload": [1]})
        await socket.send_json({"type": "events_api"})
        broken = await sockets.push("interactive", {"type": "block_actions", "actions": []})
        unhandled = await sockets.push("events_api", UNHANDLED["reaction_added"](bot))
        ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> over the socket")
        good = await sockets.push(
            "events_api", bot.envelope("app_mention", "<@U0BOT> over the socket", ts)
        )

        assert await sockets.ack_of(good) == {"envelope_id": good}
        assert await sockets.ack_of(unhandled) == {"envelope_id": unhandled}  # was a 404: none
        assert await bot.replies_in(ts) == ["you said: over the socket"]
        assert await sockets.ack_of(broken) == {"envelope_id": broken}  # was a 500: none
        assert sockets.connections == 1


SOCKET_MALFORMED: dict[str, tuple[str, dict[str, Any], str]] = {
    **{
        case: ("interactive", payload, f"missing {named}")
        for case, (payload, named) in MISSING.items()
    },
    "an event whose user is a number": (
        "events_api",
        {"type": "event_callback", "event": {"type": "message", "user": 5}},
        "unexpected event.user",
    ),
    "a payload with no type": ("events_api", {"event": {"type": "message"}}, "missing type"),
    "a payload that is text": ("interactive", "just text", "missing type"),  # type: ignore[dict-item]
    "a slash command with no command": ("slash_commands", {"text": "x"}, "missing command"),
    "a slash command whose command is a list": (
        "slash_commands",
        {"command": ["/agent-policy"], "user_id": "U0ALICE"},
        "unexpected command",
    ),
}


@pytest.mark.parametrize("case", SOCKET_MALFORMED)
async def test_in_socket_mode_a_payload_slack_does_not_send_is_acked_and_dropped_with_a_warning(
    bot: Bot, case: str, caplog: pytest.LogCaptureFixture
):
    kind, payload, named = SOCKET_MALFORMED[case]
    async with over_the_socket(bot) as sockets:
        envelope_id = await sockets.push(kind, payload)

        # acked: a 500 is not, so Slack would send it again, up to three times
        assert await sockets.ack_of(envelope_id) == {"envelope_id": envelope_id}
        [warned] = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert warned.name == "bot.slack"
        assert warned.getMessage().endswith(named)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> still there?")
        await sockets.push("events_api", bot.envelope("app_mention", "<@U0BOT> still there?", ts))
        assert await bot.replies_in(ts) == ["you said: still there?"]
    assert len(bot.model.requests) == 1  # the mention's: the dropped payload started nothing


async def test_in_socket_mode_the_policy_command_is_answered_over_the_socket(bot: Bot):
    # the slash_commands envelope of docs.slack.dev/apis/events-api/using-socket-mode
    command = {
        "token": "bHKJ2n9AW6Ju3MjciOHfbA1b",
        "team_id": bot.slack.team_id,
        "team_domain": "example",
        "channel_id": bot.slack.channel_id,
        "channel_name": "general",
        "user_id": "U0ALICE",
        "user_name": "alice",
        "command": "/agent-policy",
        "text": "show payload",
        "api_app_id": bot.slack.app_id,
        "response_url": "https://hooks.slack.com/commands/T0/1/x",
        "trigger_id": "1.2.3",
    }
    async with over_the_socket(bot) as sockets:
        envelope_id = await sockets.push("slash_commands", command)

        ack = await sockets.ack_of(envelope_id)

    assert ack == {"envelope_id": envelope_id, "payload": {"text": NO_POLICIES}}
