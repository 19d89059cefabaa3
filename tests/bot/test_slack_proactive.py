"""Turns nobody typed, shown in Slack: a new conversation at the top of a channel.

``receive()`` starts the turn and hands it to the Slack channel's own
``deliver()``, the renderer a reply to a person uses: Approve / Deny included.
"""

from __future__ import annotations

import asyncio

import pytest
from slack_sdk.errors import SlackApiError

from agent import Trigger, TurnInput, receive
from tests.bot.slack_harness import WAIT, Bot

SESSION = "slack:T0TEAM:C0GENERAL:schedule:daily"


async def summon(bot: Bot, seed: str, turn_id: str = "schedule:daily:2026-12-01T09:00") -> str:
    return await receive(
        bot.channel,
        bot.runtime,
        seed=seed,
        target={"channel": bot.slack.channel_id},
        trigger=Trigger(by="schedule:daily"),
        session=SESSION,
        turn_id=turn_id,
    )


def top_level(bot: Bot) -> list[str]:
    return [m.text for m in bot.slack.messages(bot.slack.channel_id) if m.thread_ts is None]


async def test_a_proactive_reply_opens_a_conversation_in_its_channel(bot: Bot):
    await summon(bot, "good morning, team")

    assert top_level(bot) == ["you said: good morning, team"]
    [record] = await bot.runtime.session("bot", SESSION).turns()
    assert record.input.trigger == "proactive"
    assert record.input.by == "schedule:daily"


async def test_a_firing_delivered_twice_is_one_turn_and_one_message(bot: Bot):
    await summon(bot, "good morning, team")
    await summon(bot, "good morning, team")
    await asyncio.gather(summon(bot, "good morning, team"), summon(bot, "good morning, team"))

    assert top_level(bot) == ["you said: good morning, team"]
    assert len(bot.model.requests) == 1


async def test_a_target_naming_no_channel_starts_nothing(bot: Bot):
    for target in ({"chan": "C0GENERAL"}, "C0GENERAL", {"channel": ""}):
        with pytest.raises(ValueError, match="a Slack target names a channel"):
            await receive(
                bot.channel,
                bot.runtime,
                seed="hello",
                target=target,
                trigger=Trigger(by="schedule:daily"),
                session=SESSION,
            )
    assert await bot.runtime.session("bot", SESSION).turns() == []


async def test_a_delivery_slack_refused_is_not_tried_again_at_the_next_start(bot: Bot):
    gone = "slack:T0TEAM:C0GONE:schedule:daily"
    with pytest.raises(SlackApiError, match="channel_not_found"):
        await receive(
            bot.channel,
            bot.runtime,
            seed="good morning, team",
            target={"channel": "C0GONE"},
            trigger=Trigger(by="schedule:daily"),
            session=gone,
            turn_id="schedule:daily:2026-12-01T09:00",
        )
    tried = len(bot.slack.calls)

    # a restart must not post it then, days late maybe, nor fail on it at every start
    assert await bot.channel.resume_replies() == 0
    await asyncio.sleep(0.2)  # time for a post, were one spawned
    assert len(bot.slack.calls) == tried
    # the turn itself runs to its end; only its showing was refused
    ended = await bot.runtime.session("bot", gone).result("schedule:daily:2026-12-01T09:00")
    assert ended.status == "completed"


async def test_a_proactive_request_is_answered_and_its_turn_goes_on_in_the_thread(bot: Bot):
    await summon(bot, "announce the standup")
    [approval] = [m for m in bot.slack.messages(bot.slack.channel_id) if m.thread_ts is None]
    assert approval.text == "Approval needed: Announce *the standup*?"

    # nobody spoke this turn, so anyone in the channel may answer
    await bot.click("turn_approve", bot.slack.user_id, approval)

    [answer] = await bot.written_replies(approval.ts)
    assert answer.text == "done: {'announced': True}"
    assert len(top_level(bot)) == 1


async def test_a_proactive_turn_a_stopped_process_never_showed_is_shown_at_the_next_start(
    bot: Bot,
):
    # the process that fired it died before it claimed the delivery: only the turn is left
    opening = TurnInput(
        text="think slowly about the week",
        trigger="proactive",
        by="schedule:daily",
        target={"channel": bot.slack.channel_id},
    )
    session = bot.runtime.session("bot", SESSION)
    turn_id = await session.start(opening, turn_id="schedule:daily:2026-12-01T09:00")
    await asyncio.wait_for(bot.held.wait(), WAIT)

    assert await bot.channel.resume_replies() == 1
    # a catch-up of the same firing arrives while the start-up shows it
    catching_up = asyncio.create_task(summon(bot, "think slowly about the week"))
    await asyncio.sleep(0.1)
    bot.hold.set()
    await session.result(turn_id)
    await asyncio.wait_for(catching_up, WAIT)
    await asyncio.sleep(0.1)

    assert top_level(bot) == ["you said: think slowly about the week"]
    # shown to its end: neither a later start nor the same firing shows it again
    assert await bot.channel.resume_replies() == 0
    await summon(bot, "think slowly about the week")
    assert top_level(bot) == ["you said: think slowly about the week"]
