"""Signed bodies of any shape, posted to the real app: never a 5xx, never a turn, never a crash.

Hypothesis builds events, interactivity payloads and slash commands out of the
keys Slack and Bolt use, with values of every JSON type in them, signs each
and posts it to the real aiohttp server and Bolt app (built as in
`tests/bot/test_slack_app.py`, one for all examples). Each must get a 2xx or a
4xx; none may start a turn (none is a person's message for the bot: no
``app_mention``, no direct message, no mention of the bot); nothing may be
logged as an error; and afterwards the app still answers a real mention.
Derandomized, so every run tries the same bodies. The same payloads come over
Socket Mode too, where each envelope must be acknowledged (Slack sends an
unacknowledged one again).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.bot.slack_harness import SECRET, Bot, running_bot

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
ids = st.sampled_from(["U0ALICE", "C0GENERAL", "T0TEAM", "1700000000.000100", "", "x"])
anything = ids | json_values


def shaped(keys: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of ``keys`` (each of its own shape, or of any), and maybe more."""
    return st.fixed_dictionaries({}, optional={k: v | anything for k, v in keys.items()}).flatmap(
        lambda d: st.dictionaries(st.text(max_size=6), json_values, max_size=2).map(
            lambda extra: extra | d
        )
    )


addressed = {
    "user": ids | shaped({"id": ids, "team_id": ids}),
    "team": ids | shaped({"id": ids, "enterprise_id": ids}),
    "channel": ids | shaped({"id": ids}),
    "enterprise": ids | shaped({"id": ids}),
    "team_id": ids,
    "user_id": ids,
    "channel_id": ids,
}
EVENT_TYPES = [
    "message",
    "reaction_added",
    "app_home_opened",
    "assistant_thread_started",
    "function_executed",
    "workflow_step_execute",
    "tokens_revoked",
]
PAYLOAD_TYPES = [
    "event_callback",
    "block_actions",
    "interactive_message",
    "view_submission",
    "view_closed",
    "shortcut",
    "message_action",
    "block_suggestion",
    "dialog_submission",
    "workflow_step_edit",
    "url_verification",
    "app_rate_limited",
]
events = shaped(
    {
        "type": st.sampled_from(EVENT_TYPES),
        "subtype": st.sampled_from(["bot_message", "message_changed", "file_share"]),
        "channel_type": st.sampled_from(["channel", "group", "mpim"]),
        "text": st.text(max_size=20),
        "ts": ids,
        "thread_ts": ids,
        "tab": st.sampled_from(["home", "messages"]),
        "item": shaped(addressed),
        "message": shaped(addressed),
        "previous_message": shaped(addressed),
        "assistant_thread": shaped(addressed),
        **addressed,
    }
)
actions = st.lists(
    shaped({"action_id": st.sampled_from(["turn_approve", "turn_deny", "other"]), "value": ids}),
    max_size=2,
)
payloads = shaped(
    {
        "type": st.sampled_from(PAYLOAD_TYPES),
        "event": events,
        "actions": actions,
        "callback_id": ids,
        "action_id": ids,
        "view": shaped({"type": st.just("modal"), "callback_id": ids, "state": json_values}),
        "authorizations": st.lists(shaped(addressed), max_size=2),
        "response_urls": st.lists(shaped({"response_url": ids}), max_size=2),
        "container": shaped({"message_ts": ids, "channel_id": ids}),
        "is_ext_shared_channel": st.booleans(),
        "challenge": st.text(max_size=8),
        **addressed,
    }
)
commands = st.dictionaries(
    st.sampled_from(["command", "text", "user_id", "channel_id", "team_id", "response_url"]),
    st.text(max_size=12) | st.just("/agent-policy"),
)
requests = (
    payloads.map(lambda p: (json.dumps(p), "application/json"))
    | payloads.map(lambda p: (urlencode({"payload": json.dumps(p)}), "form"))
    | commands.map(lambda c: (urlencode(c), "form"))
)

socket_requests = st.tuples(st.sampled_from(["events_api", "interactive"]), payloads) | st.tuples(
    st.just("slash_commands"),
    commands
    | shaped(
        {
            "command": st.just("/agent-policy"),
            "text": st.text(max_size=12),
            "response_url": ids,
            **addressed,
        }
    ),
)
"""Socket Mode envelopes: over the socket a slash command's fields come as an object, any JSON."""

EXAMPLES = settings(
    max_examples=250,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[asyncio.Runner, Bot]]:
    """The app, on one event loop that every example's request runs on."""
    with asyncio.Runner() as runner:
        serving = running_bot(tmp_path)
        bot = runner.run(serving.__aenter__())
        try:
            yield runner, bot
        finally:
            runner.run(serving.__aexit__(None, None, None))


async def post(bot: Bot, body: str, content_type: str) -> int:
    headers = bot.signed(body)
    if content_type == "form":
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    async with bot.http.post(f"{bot.url}/slack/events", data=body, headers=headers) as response:
        await response.read()
        return response.status


@EXAMPLES
@given(request=requests)
def test_any_signed_body_gets_a_2xx_or_a_4xx_and_starts_nothing(
    served: tuple[asyncio.Runner, Bot],
    caplog: pytest.LogCaptureFixture,
    request: tuple[str, str],
):
    runner, bot = served
    caplog.set_level(logging.INFO)
    body, content_type = request

    status = runner.run(post(bot, body, content_type))

    assert 200 <= status < 500, body
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], body
    assert not bot.model.requests, body


@contextlib.asynccontextmanager
async def over_the_socket(tmp_path: Path) -> AsyncIterator[Bot]:
    from bot.slack.app import bolt_app
    from bot.slack.run import socket_mode

    async with running_bot(tmp_path) as bot:
        bolt = bolt_app(bot.channel, bot.client, SECRET)
        async with socket_mode(bolt, bot.client, bot.slack.app_token):
            yield bot


@pytest.fixture
def socket_served(tmp_path: Path) -> Iterator[tuple[asyncio.Runner, Bot]]:
    """The app in Socket Mode, on one event loop that every example's envelope runs on."""
    with asyncio.Runner() as runner:
        serving = over_the_socket(tmp_path)
        bot = runner.run(serving.__aenter__())
        try:
            yield runner, bot
        finally:
            runner.run(serving.__aexit__(None, None, None))


async def push(bot: Bot, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    sockets = bot.slack.socket_mode
    return await sockets.ack_of(await sockets.push(kind, payload))


@EXAMPLES
@given(envelope=socket_requests)
def test_any_socket_mode_payload_is_acked_and_starts_nothing(
    socket_served: tuple[asyncio.Runner, Bot],
    caplog: pytest.LogCaptureFixture,
    envelope: tuple[str, dict[str, Any]],
):
    runner, bot = socket_served
    caplog.set_level(logging.INFO)
    kind, payload = envelope

    runner.run(push(bot, kind, payload))  # raises unless acked within Slack's 3 s

    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], payload
    assert not bot.model.requests, payload


def test_after_any_body_the_app_still_answers(served: tuple[asyncio.Runner, Bot]):
    runner, bot = served
    for body in ['{"type": "block_actions", "actions": []}', "payload=%7B%7D", "{" * 10_000]:
        assert 400 <= runner.run(post(bot, body, "application/json")) < 500

    async def mention() -> list[str]:
        ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> still there?")
        await bot.deliver(bot.envelope("app_mention", "<@U0BOT> still there?", ts))
        return await bot.replies_in(ts)

    assert runner.run(mention()) == ["you said: still there?"]
