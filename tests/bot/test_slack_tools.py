"""The Slack tools' own rules, against the fake Slack."""

from __future__ import annotations

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent import ToolContext, ToolError
from bot.slack.once import find_posted
from bot.slack.tools import _where, post_tag
from tests.fakes.slack_api import FakeSlack


async def test_a_post_is_found_again_by_its_key_so_a_replay_does_not_post_twice():
    async with FakeSlack() as slack:
        client = AsyncWebClient(token=slack.token, base_url=slack.base_url)
        posted = await client.chat_postMessage(
            channel=slack.channel_id,
            text="the deploy is at noon",
            metadata=post_tag("turn-1:call-1"),
        )
        slack.post_user_message(slack.channel_id, "something after it")

        found = [
            await find_posted(client, slack.channel_id, None, post_tag(f"turn-1:call-{n}"))
            for n in (1, 2)
        ]

        assert found == [posted["ts"], None]


def context(session_id: str) -> ToolContext:
    return ToolContext(
        agent="bot", session_id=session_id, turn_id="t", call_id="c", idempotency_key="t:c"
    )


def test_the_conversation_comes_from_the_session_never_from_the_model():
    assert _where(context("slack:T0:C0GEN:1700000000.000100")) == ("C0GEN", "1700000000.000100")
    with pytest.raises(ToolError, match="only works in a Slack conversation"):
        _where(context("terminal"))
