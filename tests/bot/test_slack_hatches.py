"""Ways out of a stuck thread, through the real app: Withdraw, Stop, Start over."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent import Cancelled, Suspended
from bot.schedules import Firing, Schedule
from bot.slack.blocks import stop_blocks
from bot.slack.firing import fire, has_fired
from bot.texts import ONLY_ADMINS_WITHDRAW, ONLY_PARTICIPANTS_RESET, ONLY_PARTICIPANTS_STOP
from tests.bot.hatches_harness import (
    click_on,
    click_payload,
    post_interaction,
    running_hatches_bot,
    shortcut,
    wait_until,
)
from tests.bot.slack_harness import Bot, ask_for_approval
from tests.fakes.slack_api import Message


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[Bot]:
    async with running_hatches_bot(tmp_path) as running:
        yield running


def member(bot: Bot, user: str, *, admin: bool = False) -> None:
    bot.slack.add_user(user, name=user.lower(), is_admin=admin)
    bot.slack.join(bot.slack.channel_id, user)


def session_of(bot: Bot, ts: str) -> str:
    return f"slack:{bot.slack.team_id}:{bot.slack.channel_id}:{ts}"


async def test_an_admin_withdraws_a_request_and_the_thread_takes_messages_again(bot: Bot):
    member(bot, "U0BEN")
    member(bot, "U0ADMIN", admin=True)
    ts, card = await ask_for_approval(bot)

    await click_on(bot, card, "Withdraw", "U0BEN")
    assert await bot.ephemerals_to("U0BEN") == [ONLY_ADMINS_WITHDRAW]
    await click_on(bot, card, "Withdraw", "U0ADMIN")

    session = bot.runtime.session("bot", session_of(bot, ts))
    await wait_until(lambda: bot.slack.calls_to("chat.update") != [], "the card was updated")
    [record] = await session.turns()
    assert isinstance(await session.result(record.turn_id), Cancelled)
    [shown] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == card.ts]
    assert shown.blocks[1]["elements"][0]["text"].startswith("Withdrawn by <@U0ADMIN>")
    again = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> hi", thread_ts=ts)
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> hi", again, thread_ts=ts))
    assert (await bot.replies_in(ts, 3))[-1] == "you said: hi"


async def test_stop_cancels_the_running_turn_for_the_asker_and_not_for_a_stranger(
    bot: Bot, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="bot.slack")
    member(bot, "U0BEN")
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> answer slowly")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> answer slowly", ts))
    await bot.held.wait()
    session = bot.runtime.session("bot", session_of(bot, ts))
    [record] = await session.turns()
    [actions] = stop_blocks(session.key.session_id, record.turn_id)
    where = Message(channel=bot.slack.channel_id, ts=ts, text="", user="U0BOT", thread_ts=ts)
    [button] = actions["elements"]

    await post_interaction(bot, click_payload(bot, button, actions["block_id"], "U0BEN", where))
    assert await bot.ephemerals_to("U0BEN") == [ONLY_PARTICIPANTS_STOP]
    status, _ = await post_interaction(
        bot, click_payload(bot, button, actions["block_id"], bot.slack.user_id, where)
    )
    assert status == 200
    stopped = f"turn {record.turn_id} stopped by {bot.slack.user_id}"
    await wait_until(lambda: stopped in caplog.text, "the stop was taken")
    bot.hold.set()

    assert isinstance(await session.result(record.turn_id), Cancelled)


async def test_start_over_resets_the_thread_for_its_people_and_says_so(bot: Bot):
    member(bot, "U0BEN")
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> hello")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> hello", ts))
    [reply] = await bot.written_replies(ts)
    session = bot.runtime.session("bot", session_of(bot, ts))

    await post_interaction(bot, shortcut(bot, "U0BEN", reply))
    assert await bot.ephemerals_to("U0BEN") == [ONLY_PARTICIPANTS_RESET]
    assert len(await session.turns()) == 1
    status, _ = await post_interaction(bot, shortcut(bot, bot.slack.user_id, reply))

    assert status == 200
    said = await bot.replies_in(ts, 2)
    assert said[-1].startswith(f"<@{bot.slack.user_id}> started this conversation over")
    assert await session.turns() == []
    assert await session.archived(0) is not None


async def test_a_firing_waiting_for_an_approval_never_holds_the_next_firing(bot: Bot):
    asking = Schedule(
        name="standup", cron="0 9 * * *", channel=bot.slack.channel_id, prompt="announce it"
    )
    monday = Firing(asking, datetime(2026, 12, 7, 9, 0, tzinfo=UTC), None)
    tuesday = Firing(asking, datetime(2026, 12, 8, 9, 0, tzinfo=UTC), monday.at)
    team = bot.slack.team_id

    first = await fire(bot.channel, bot.runtime, team, monday)
    second = await fire(bot.channel, bot.runtime, team, tuesday)  # raised: the session waited

    for firing, turn_id in ((monday, first), (tuesday, second)):
        session = bot.runtime.session("bot", firing.session(team))
        assert isinstance(await session.result(turn_id), Suspended)
        assert await has_fired(bot.channel, bot.runtime, team, firing)


async def test_a_firing_an_older_bot_made_in_the_shared_session_is_still_found(bot: Bot):
    daily = Schedule(name="daily", cron="0 9 * * *", channel=bot.slack.channel_id, prompt="p")
    firing = Firing(daily, datetime(2026, 12, 7, 9, 0, tzinfo=UTC), None)
    shared = bot.runtime.session("bot", daily.session(bot.slack.team_id))
    await shared.start("p", turn_id=firing.turn_id)  # as firings were kept before

    assert await has_fired(bot.channel, bot.runtime, bot.slack.team_id, firing)
