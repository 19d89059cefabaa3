"""Slack's Web API dropping connections, refusing, rate limiting: nothing is posted twice.

The fake Slack resets a connection before or after it applies the call (the
client cannot tell which), answers 429 with ``Retry-After``, 500, or slowly.
slack_sdk's retry handlers must never send a post again blindly: the bot looks
for what the first attempt did (message metadata, read back with
``include_all_metadata``) and carries on with that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.settings import Settings
from bot.slack.once import CannotTell, post_once, tag
from bot.slack.run import slack_client
from tests.bot.slack_harness import WAIT, Bot, ask_for_approval, running_bot
from tests.fakes.slack_api import FakeSlack

MARK = tag("turnbot_reply", turn="T0TEAM:C0GENERAL:1.0", since=0, part=0)


def client_of(slack: FakeSlack) -> AsyncWebClient:
    return slack_client(
        Settings(slack_bot_token=slack.token, slack_api_url=slack.base_url, _env_file=None)
    )


@pytest.mark.parametrize("method", ["chat.postMessage", "chat.startStream", "chat.appendStream"])
async def test_a_write_whose_connection_dropped_after_slack_applied_it_is_not_sent_again(
    slack: FakeSlack, method: str
):
    client = client_of(slack)
    root = slack.post_user_message(slack.channel_id, "<@U0BOT> hi")
    stream = await client.chat_startStream(
        channel=slack.channel_id,
        thread_ts=root,
        chunks=[{"type": "markdown_text", "text": "a"}],
        recipient_user_id=slack.user_id,
        recipient_team_id=slack.team_id,
    )
    slack.drop_connection(method, applied=True)
    chunks = [{"type": "markdown_text", "text": "b"}]
    to = {"recipient_user_id": slack.user_id, "recipient_team_id": slack.team_id}
    calls = {
        "chat.postMessage": lambda: client.chat_postMessage(
            channel=slack.channel_id, thread_ts=root, markdown_text="b"
        ),
        "chat.startStream": lambda: client.chat_startStream(
            channel=slack.channel_id, thread_ts=root, chunks=chunks, **to
        ),
        "chat.appendStream": lambda: client.chat_appendStream(
            channel=slack.channel_id, ts=stream["ts"], chunks=chunks
        ),
    }
    with pytest.raises(aiohttp.ClientError):
        await calls[method]()

    assert len(slack.calls_to(method)) == 1 + (method == "chat.startStream")
    texts = [m.text for m in slack.replies(slack.channel_id, root)]
    assert texts == (["ab"] if method == "chat.appendStream" else ["a", "b"])


@pytest.mark.parametrize("applied", [True, False], ids=["after", "before"])
async def test_a_read_or_an_update_whose_connection_dropped_is_sent_again(
    slack: FakeSlack, applied: bool
):
    client = client_of(slack)
    posted = await client.chat_postMessage(channel=slack.channel_id, text="draft")
    slack.drop_connection("chat.update", applied=applied)
    slack.drop_connection("conversations.history", applied=applied)

    await client.chat_update(channel=slack.channel_id, ts=posted["ts"], text="final")
    found = await client.conversations_history(channel=slack.channel_id)

    assert [m["text"] for m in found["messages"]] == ["final"]
    assert len(slack.calls_to("chat.update")) == 2


async def test_a_rate_limited_post_waits_and_is_posted_once(slack: FakeSlack):
    client = client_of(slack)
    slack.fail_next("chat.postMessage", "ratelimited", status=429, retry_after=0)

    await client.chat_postMessage(channel=slack.channel_id, text="once")

    assert [m.text for m in slack.messages(slack.channel_id)] == ["once"]
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 200]


async def test_a_read_back_slack_did_not_answer_is_asked_again_and_finds_the_lost_post(
    slack: FakeSlack,
):
    client = client_of(slack)
    root = slack.post_user_message(slack.channel_id, "<@U0BOT> hi")
    slack.drop_connection("chat.postMessage", applied=True)
    # three drops: slack_sdk's own two retries are used up, then the bot asks again
    slack.drop_connection("conversations.replies", applied=True, times=3)

    ts = await post_once(client, slack.channel_id, root, MARK, markdown_text="once")

    assert [(m.ts, m.text) for m in slack.replies(slack.channel_id, root)] == [(ts, "once")]
    assert [c.status for c in slack.calls_to("conversations.replies")] == [0, 0, 0, 200]
    assert len(slack.calls_to("chat.postMessage")) == 1


@pytest.mark.parametrize(
    ("error", "reads"), [("internal_error", 4), ("missing_scope", 1)], ids=["passing", "for-good"]
)
async def test_a_post_whose_answer_was_lost_is_not_made_again_when_it_cannot_be_read_back(
    slack: FakeSlack, error: str, reads: int
):
    client = client_of(slack)
    root = slack.post_user_message(slack.channel_id, "<@U0BOT> hi")
    slack.drop_connection("chat.postMessage", applied=True)
    slack.fail_next("conversations.replies", error, times=4)

    with pytest.raises(CannotTell, match=error):
        await post_once(client, slack.channel_id, root, MARK, markdown_text="once")

    assert [m.text for m in slack.replies(slack.channel_id, root)] == ["once"]
    assert len(slack.calls_to("chat.postMessage")) == 1  # never sent again on a guess
    assert len(slack.calls_to("conversations.replies")) == reads  # a refusal for good: once


# --- the whole bot, on a Slack that drops connections ------------------------------


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[Bot]:
    async with running_bot(tmp_path) as running:
        yield running


async def mentioned(bot: Bot, text: str) -> str:
    ts = bot.slack.post_user_message(bot.slack.channel_id, f"<@U0BOT> {text}")
    assert await bot.deliver(bot.envelope("app_mention", f"<@U0BOT> {text}", ts)) == 200
    return ts


@pytest.mark.parametrize("applied", [True, False], ids=["after", "before"])
@pytest.mark.parametrize("method", ["chat.startStream", "chat.appendStream", "chat.stopStream"])
async def test_a_reply_whose_connection_dropped_shows_once_and_whole(
    bot: Bot, method: str, applied: bool
):
    bot.slack.drop_connection(method, applied=applied)

    ts = await mentioned(bot, "the deploy moved to Friday")

    [only] = await bot.written_replies(ts)
    assert only.text == "you said: the deploy moved to Friday"
    assert only.stream != "streaming"
    assert only.metadata is not None
    assert only.metadata["event_type"] == "turnbot_reply"


@pytest.mark.parametrize("applied", [True, False], ids=["after", "before"])
async def test_a_reply_posted_without_streams_is_posted_once_when_its_connection_drops(
    bot: Bot, applied: bool
):
    bot.slack.disable("chat.startStream")
    bot.slack.drop_connection("chat.postMessage", applied=applied)

    ts = await mentioned(bot, "hello")

    assert [m.text for m in await bot.written_replies(ts)] == ["you said: hello"]


@pytest.mark.parametrize("applied", [True, False], ids=["after", "before"])
async def test_an_approval_card_whose_connection_dropped_is_shown_once(bot: Bot, applied: bool):
    bot.slack.drop_connection("chat.postMessage", applied=applied)

    ts, approval = await ask_for_approval(bot)
    await bot.written_replies(ts)

    cards = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.blocks]
    assert [m.ts for m in cards] == [approval.ts]


async def test_a_reply_slack_could_not_take_is_shown_once_slack_is_back_without_a_restart(
    tmp_path: Path,
):
    async with running_bot(tmp_path, reply_retries=(0.1, 0.1)) as bot:
        bot.slack.disable("chat.startStream")  # a posted reply: its first post is refused
        bot.slack.fail_next("chat.postMessage", "service_unavailable", times=2)

        ts = await mentioned(bot, "are you there?")

        assert [m.text for m in await bot.written_replies(ts)] == ["you said: are you there?"]
        posts = [c.error for c in bot.slack.calls_to("chat.postMessage")]
        assert posts == ["service_unavailable", "service_unavailable", None]


async def test_a_reply_slack_refuses_for_good_is_not_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="bot.slack")
    async with running_bot(tmp_path, reply_retries=(0.01,)) as bot:
        bot.slack.disable("chat.startStream")
        bot.slack.fail_next("chat.postMessage", "not_in_channel")

        await mentioned(bot, "are you there?")

        refused = "Slack refused the reply: not_in_channel"
        deadline = time.monotonic() + WAIT
        while not any(refused in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the refusal was never logged"
            await asyncio.sleep(0.01)
        # the choice to try again is made as the refusal is logged: none was
        assert not [r for r in caplog.records if "tried again" in r.getMessage()]
        assert len(bot.slack.calls_to("chat.postMessage")) == 1
