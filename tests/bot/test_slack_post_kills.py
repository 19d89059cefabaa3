"""SIGKILL around an approval card and around the post it approves; the next start finishes.

The real ``python -m bot`` process is killed from inside the Slack call named
(`FakeSlack.on_call`), before or after Slack applies it, so it dies with the
call made or not and its answer never read. A new process on the same database
then takes the turn up. Whatever the point: one card, one post, the turn
completed, and its reply shown once; on a SQLite file and again on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from typing import Any

import aiohttp
import pytest

from tests.agent.crash_db import CrashDatabase
from tests.bot.slack_harness import approval_in
from tests.bot.test_slack_crash_points import killing, launch, turn_completed
from tests.bot.test_slack_process import (
    POSTED,
    POSTING,
    WAIT,
    Launch,
    last_reply_becomes,
    mention,
    post_click,
    post_signed,
)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import FakeSlack, Message

__all__ = ["launch"]  # the fixtures, shared with the reply's crash points

ASKED = "tell #random the deploy is at noon"


def kill_when(
    slack: FakeSlack, method: str, proc: asyncio.subprocess.Process, applied: bool, tagged: str
):
    """Kill the bot at the call of ``method`` that posts a message tagged ``tagged``.

    Other posts (the reply's own, its Stop button's) go by: the kill lands at one point.
    """

    def is_it(params: Any) -> bool:
        metadata = params.values.get("metadata")  # an object in JSON, a string in a form
        return f'"{tagged}"' in (metadata if isinstance(metadata, str) else json.dumps(metadata))

    slack.on_call(method, killing(proc), applied=applied, where=is_it)  # type: ignore[arg-type]


async def died(proc: asyncio.subprocess.Process) -> None:
    assert await asyncio.wait_for(proc.wait(), WAIT) == -signal.SIGKILL


def check_done_once(slack: FakeSlack, ts: str) -> None:
    """One card, one post in #random, and the reply in its two parts, each shown once.

    The reply's first part (the call's progress, up to the request) and its
    continuation after the answer are a message each, tagged by where they start.
    """
    replies = slack.replies(slack.channel_id, ts)
    cards = [m for m in replies if (m.metadata or {}).get("event_type") == "turnbot_ask"]
    parts = [m for m in replies if m not in cards]
    assert len(cards) == 1, replies
    assert [m.text for m in slack.messages("C0RANDOM")] == ["Deploy at noon."]
    assert [m.text for m in parts] == ["", POSTED], replies
    assert [m.stream for m in parts] == ["stopped", "stopped"]
    tags = [m.metadata for m in parts]
    assert all(t is not None and t["event_type"] == "turnbot_reply" for t in tags), tags
    assert len({json.dumps(t, sort_keys=True) for t in tags}) == 2, tags


async def click_as_it_dies(port: int, card: Message, slack: FakeSlack) -> None:
    """Approve ``card``; the process may die before its ack leaves, which is the point."""
    with contextlib.suppress(aiohttp.ClientError):
        status = await post_click(port, "turn_approve", slack.user_id, card, slack.team_id)
        assert status == 200


@pytest.mark.parametrize("applied", [False, True], ids=["before-the-card", "card-unread"])
async def test_a_bot_killed_posting_an_approval_card_shows_it_once_at_its_next_start(
    slack: FakeSlack, launch: Launch, crash_db: CrashDatabase, applied: bool
):
    slack.add_channel("C0RANDOM", members=[slack.user_id])
    async with FakeAnthropic() as api:
        api.queue(*POSTING)
        claude = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "DATABASE_URL": crash_db.url,
        }
        first = await launch(**claude)
        kill_when(slack, "chat.postMessage", first.proc, applied, "turnbot_ask")
        ts, envelope = mention(slack, ASKED)
        await post_signed(first.port, envelope)
        await died(first.proc)
        asked = [m for m in slack.replies(slack.channel_id, ts) if m.text.startswith("Approval")]
        assert len(asked) == int(applied)  # killed at the card's post, not elsewhere

        second = await launch(**claude)
        card = await approval_in(slack, ts)
        assert (
            await post_click(second.port, "turn_approve", slack.user_id, card, slack.team_id) == 200
        )

        await last_reply_becomes(slack, ts, POSTED)
        await turn_completed(crash_db, slack, ts)
        check_done_once(slack, ts)
        assert len(api.requests) == 2


@pytest.mark.parametrize("applied", [False, True], ids=["before-the-post", "post-unread"])
async def test_a_bot_killed_making_an_approved_post_makes_it_once_at_its_next_start(
    slack: FakeSlack, launch: Launch, crash_db: CrashDatabase, applied: bool
):
    slack.add_channel("C0RANDOM", members=[slack.user_id])
    async with FakeAnthropic() as api:
        api.queue(*POSTING)
        claude = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "DATABASE_URL": crash_db.url,
        }
        first = await launch(**claude)
        ts, envelope = mention(slack, ASKED)
        await post_signed(first.port, envelope)
        card = await approval_in(slack, ts)
        kill_when(slack, "chat.postMessage", first.proc, applied, "turnbot_post")

        await click_as_it_dies(first.port, card, slack)
        await died(first.proc)
        assert len(slack.messages("C0RANDOM")) == int(applied)

        await launch(**claude)

        await last_reply_becomes(slack, ts, POSTED)
        await turn_completed(crash_db, slack, ts)
        check_done_once(slack, ts)
        assert len(api.requests) == 2
