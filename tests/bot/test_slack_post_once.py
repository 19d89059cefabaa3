"""An approved ``post_message`` is made once, whatever happens to its connection.

Slack has no idempotency key for ``chat.postMessage``: a post whose connection
dropped may have been made or not, and slack_sdk does not send it again. The
tool posts with its call's key in the message metadata and, when the answer is
lost, reads the channel back for that key before it posts again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.slack.tools import POST_EVENT
from tests.bot.slack_harness import Bot, ask_for_approval, running_bot
from tests.fakes.slack_api import FakeSlack, Message

DONE = "done: {'posted': True, 'ts': '%s'}"


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[Bot]:
    async with running_bot(tmp_path) as running:
        yield running


def approved_posts(slack: FakeSlack) -> list[Message]:
    """The channel's top-level messages the tool posted."""
    return [
        m
        for m in slack.messages(slack.channel_id)
        if m.thread_ts is None and (m.metadata or {}).get("event_type") == POST_EVENT
    ]


@pytest.mark.parametrize("applied", [True, False], ids=["after", "before"])
async def test_an_approved_post_whose_connection_dropped_is_posted_once_and_the_turn_ends(
    bot: Bot, applied: bool
):
    ts, card = await ask_for_approval(bot, "post C0GENERAL the deploy is at noon")
    # the card is up: the next chat.postMessage is the approved post's
    # the approved post's call, not another message the reply posts meanwhile (its Stop)
    bot.slack.drop_connection(
        "chat.postMessage",
        applied=applied,
        where=lambda params: params.values.get("text") == "the deploy is at noon",
    )

    assert await bot.click("turn_approve", bot.slack.user_id, card) == 200

    said = await bot.replies_in(ts, 3)
    [posted] = approved_posts(bot.slack)
    assert posted.text == "the deploy is at noon"
    assert said[-1] == DONE % posted.ts
    dropped = [c for c in bot.slack.calls_to("chat.postMessage") if c.status == 0]
    assert [c.params.get("text") for c in dropped] == ["the deploy is at noon"]
    session = bot.runtime.session("bot", f"slack:T0TEAM:{bot.slack.channel_id}:{ts}")
    [turn] = [t for t in await session.turns() if t.turn_id.endswith(ts)]
    assert turn.status == "completed"


@pytest.mark.parametrize("applied", [True, False], ids=["after", "before"])
async def test_the_reply_before_an_approval_is_tagged_when_its_stream_was_lost(
    bot: Bot, applied: bool
):
    bot.slack.drop_connection("chat.appendStream", applied=applied)

    ts, _ = await ask_for_approval(bot, "post C0GENERAL the deploy is at noon")
    replies = await bot.written_replies(ts, 2)

    assert [m.metadata is not None for m in replies] == [True, True], replies
