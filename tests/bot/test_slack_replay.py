"""Real Slack payloads, replayed signed to the real app: all acked, only a person's makes a turn.

The corpus (``tests/bot/slack_payloads``) is copied from the public test suites
of Slack's own SDKs (bolt-python, python-slack-sdk: each file names the
repository, path, commit and the variable it was assigned to) and from the
examples of Slack's docs (each names the page's URL). ``_as`` says how Slack
sends it: ``json`` (Events API), ``form`` (interactivity: a ``payload`` form
field), ``command`` (a slash command's plain form), or ``socket`` (a whole
Socket Mode envelope, sent down the socket and to be acknowledged).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.bot.slack_harness import SECRET, WAIT, Bot

CORPUS = Path(__file__).parent / "slack_payloads"
FILES = sorted(CORPUS.glob("*.json"))

TURNS = {
    # an app_mention by a person: the bot answers
    "app__app_mention_event_body.json",
    "app_bot_only__app_mention_body.json",
    "events_request_verification__app_mention_body.json",
    "events_say_stream__org_app_mention_event_body.json",
    "events_shared_channels__valid_event_body.json",
    # a person's direct message to the bot (in an assistant thread, or not)
    "events_assistant__user_message_event_body.json",
    "events_assistant__user_message_event_body_with_action_token.json",
    "events_assistant__user_message_event_body_with_assistant_thread.json",
    # the same, over Socket Mode
    "sdk_socket_mode_server__socket_mode_envelopes_events_api_app_mention.json",
}
"""The payloads that start a turn; every other one is acked and starts nothing."""


def load(path: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def test_every_payload_names_its_origin():
    assert len(FILES) >= 80
    for path in FILES:
        origin = load(path)["_origin"]
        if "url" in origin:  # an example of Slack's docs
            assert origin["url"].startswith(("https://docs.slack.dev/", "https://api.slack.com/"))
        else:
            assert origin["repository"], path.name
            assert origin["path"], path.name
            assert len(origin["commit"]) == 40, path.name
        assert load(path)["_as"] in ("json", "form", "command", "socket"), path.name


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_a_real_payload_is_acked_and_does_what_it_should(bot: Bot, path: Path):
    recorded = load(path)
    payload, kind = recorded["payload"], recorded["_as"]
    if kind == "socket":
        await replayed_over_the_socket(bot, path, payload)
        return
    if kind == "json":
        body, content_type = json.dumps(payload), "application/json"
    elif kind == "form":
        body, content_type = urlencode({"payload": json.dumps(payload)}), ""
    else:
        body, content_type = urlencode(payload), ""
    headers = bot.signed(body) | {
        "Content-Type": content_type or "application/x-www-form-urlencoded"
    }

    async with bot.http.post(f"{bot.url}/slack/events", data=body, headers=headers) as response:
        status, answer = response.status, await response.text()

    assert status == 200, answer
    if payload.get("type") == "url_verification":
        assert json.loads(answer) == {"challenge": payload["challenge"]}
    await started_what_it_should(bot, path, payload)


async def replayed_over_the_socket(bot: Bot, path: Path, envelope: dict[str, Any]) -> None:
    from bot.slack.app import bolt_app
    from bot.slack.run import socket_mode

    sockets = bot.slack.socket_mode
    async with socket_mode(
        bolt_app(bot.channel, bot.client, SECRET), bot.client, bot.slack.app_token
    ):
        ack = await sockets.ack_of(await sockets.send(envelope))  # Slack resends what is not
        assert ack["envelope_id"] == envelope["envelope_id"]
        await started_what_it_should(bot, path, envelope["payload"])


async def started_what_it_should(bot: Bot, path: Path, payload: dict[str, Any]) -> None:
    if path.name in TURNS:
        await until(lambda: bool(bot.model.requests))
        [asked] = bot.model.requests
        event = payload["event"]
        assert asked.turn_id.endswith(f":{event['channel']}:{event['ts']}")
    else:
        await asyncio.sleep(0.1)  # time for a turn, were there one
        assert not bot.model.requests


async def until(condition: Any) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)
