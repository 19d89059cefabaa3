"""Requests answered by their schema, expiring approvals, and policy answerers, through Slack."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent import ConfigError
from bot.config_file import Approvals, load_bot_config
from tests.bot.hatches_harness import (
    ON_CALL,
    ModalSlack,
    click_on,
    post_interaction,
    running_hatches_bot,
    submission,
    wait_until,
)
from tests.bot.slack_harness import Bot, ask_for_approval


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[Bot]:
    async with running_hatches_bot(tmp_path) as running:
        yield running


@pytest.fixture
async def quick_bot(tmp_path: Path) -> AsyncIterator[Bot]:
    """The bot with approvals in #general waiting one second (BOT_CONFIG's [approvals])."""
    async with running_hatches_bot(tmp_path, Approvals(channels={"C0GENERAL": 1.0 / 3600})) as b:
        yield b


async def ask(bot: Bot, text: str):
    return await ask_for_approval(bot, text)


# -- (b) approvals expire --------------------------------------------------------------


def test_bot_config_sets_how_long_approvals_wait_by_channel(tmp_path: Path) -> None:
    assert Approvals().ttl("C0GENERAL") == 24 * 3600  # the default
    path = tmp_path / "bot.toml"
    path.write_text("[approvals]\nhours = 2\nchannels = { C0SUPPORT = 0.5 }\n")
    approvals = load_bot_config(path).approvals
    assert approvals.ttl("C0SUPPORT") == 1800
    assert approvals.ttl("C0GENERAL") == 7200
    path.write_text("[approvals]\nhours = 0\nchannels = { general = 1 }\n")
    with pytest.raises(ConfigError) as refused:
        load_bot_config(path)
    assert "approvals.hours" in str(refused.value)
    assert "'general' is not a channel id" in str(refused.value)


async def test_a_post_nobody_approves_expires_and_the_turn_goes_on(quick_bot: Bot):
    bot = quick_bot
    ts, card = await ask(bot, "post C0GENERAL hello")
    assert "until <!date^" in json.dumps(card.blocks)  # the card says when it expires

    said = await bot.replies_in(ts, 3)

    assert said[-1] == "done: {'posted': False, 'reason': 'nobody answered in time'}"
    [shown] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == card.ts]
    assert shown.blocks[1]["elements"][0]["text"].startswith("Expired")
    # the thread takes messages again
    again = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> hi", thread_ts=ts)
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> hi", again, thread_ts=ts))
    assert (await bot.replies_in(ts, 4))[-1] == "you said: hi"


async def test_a_message_to_a_waiting_thread_says_who_may_answer_and_until_when(bot: Bot):
    ts, _ = await ask(bot, "post C0GENERAL hello")
    member(bot, "U0BEN")
    newer = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> hi", thread_ts=ts)
    envelope = bot.envelope("app_mention", "<@U0BOT> hi", newer, thread_ts=ts)
    envelope["event"]["user"] = "U0BEN"

    await bot.deliver(envelope)

    [told] = await bot.ephemerals_to("U0BEN")
    assert f"only <@{bot.slack.user_id}> can answer" in told
    assert "expires <!date^" in told
    assert "admin may withdraw" in told


# -- (f) answers by schema ----------------------------------------------------------------


async def test_an_enum_request_is_one_button_per_option_and_a_click_answers_it(bot: Bot):
    ts, card = await ask(bot, "pick a colour")
    [actions] = [b for b in card.blocks if b["type"] == "actions"]
    assert [e["text"]["text"] for e in actions["elements"]] == ["red", "green", "Withdraw"]

    assert (await click_on(bot, card, "green", bot.slack.user_id))[0] == 200

    said = await bot.replies_in(ts, 3)
    assert said[-1] == "done: {'picked': 'green'}"
    [shown] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == card.ts]
    assert shown.blocks[1]["elements"][0]["text"].startswith(
        f"Answered “green” by <@{bot.slack.user_id}>"
    )


async def test_a_number_request_opens_a_modal_that_says_what_was_wrong(bot: Bot):
    ts, card = await ask(bot, "how many")
    [actions] = [b for b in card.blocks if b["type"] == "actions"]
    assert [e["text"]["text"] for e in actions["elements"]] == ["Answer…", "Withdraw"]

    await click_on(bot, card, "Answer…", bot.slack.user_id)
    await wait_until(lambda: bool(opened(bot)), "the modal opened")
    [view] = opened(bot)

    status, body = await post_interaction(bot, submission(bot, view, bot.slack.user_id, "lots"))
    assert status == 200
    wrong = json.loads(body)
    assert wrong["response_action"] == "errors"
    assert "is not a whole number" in wrong["errors"]["answer"]

    status, body = await post_interaction(bot, submission(bot, view, bot.slack.user_id, "0"))
    assert "less than the minimum of 1" in json.loads(body)["errors"]["answer"]
    assert await bot.runtime.session("bot", card_session(bot, ts)).pending() != ()

    status, body = await post_interaction(bot, submission(bot, view, bot.slack.user_id, "3"))
    assert (status, body) == (200, "")
    said = await bot.replies_in(ts, 3)
    assert said[-1] == "done: {'count': 3}"


async def test_only_the_answerer_gets_the_modal_others_are_told_privately(bot: Bot):
    _, card = await ask(bot, "how many")
    member(bot, "U0BEN")

    await click_on(bot, card, "Answer…", "U0BEN")

    assert await bot.ephemerals_to("U0BEN") == [
        f"Only <@{bot.slack.user_id}> can answer this request."
    ]
    assert opened(bot) == []


# -- (g) policy answerers -------------------------------------------------------------------


async def test_a_policy_request_is_answered_by_whom_the_agents_hook_grants(bot: Bot):
    member(bot, ON_CALL)
    ts, card = await ask(bot, "page the team")
    assert "someone the oncall policy allows" in json.dumps(card.blocks)

    await click_on(bot, card, "Approve", bot.slack.user_id)
    [told] = await bot.ephemerals_to(bot.slack.user_id)
    assert told == "Only someone the oncall policy allows can answer this request."

    await click_on(bot, card, "Approve", ON_CALL)
    said = await bot.replies_in(ts, 3)
    assert said[-1] == "done: {'paged': True}"


def opened(bot: Bot) -> list[dict[str, Any]]:
    assert isinstance(bot.slack, ModalSlack)
    return bot.slack.opened


def member(bot: Bot, user: str) -> None:
    bot.slack.add_user(user, name=user.lower())
    bot.slack.join(bot.slack.channel_id, user)


def card_session(bot: Bot, ts: str) -> str:
    return f"slack:{bot.slack.team_id}:{bot.slack.channel_id}:{ts}"
