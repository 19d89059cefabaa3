"""Issue 22, point 3 in Slack: two calls of one step each ask, and both cards show at once.

The model asks, in one reply, for two ``announce`` calls; each needs the
speaker's approval. Both cards appear in the thread together; a click answers
its own card only (the other keeps its buttons, and the turn keeps waiting), and
once the last is answered the reply goes on with each call's own answer.
"""

from __future__ import annotations

import asyncio
import json

from tests.bot.hatches_harness import wait_until
from tests.bot.slack_harness import ASKING, Bot


def cards(bot: Bot, ts: str) -> list:
    return [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.text.startswith(ASKING)]


def has_buttons(bot: Bot, ts: str, card_ts: str) -> bool:
    [card] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == card_ts]
    return any(b["type"] == "actions" for b in card.blocks)


async def test_two_approvals_of_one_step_show_together_and_each_click_answers_its_own(bot: Bot):
    text = "<@U0BOT> announce both the deploy and the freeze"
    ts = bot.slack.post_user_message(bot.slack.channel_id, text)
    await bot.deliver(bot.envelope("app_mention", text, ts))
    await wait_until(lambda: len(cards(bot, ts)) == 2, "both approvals were shown")
    deploy, freeze = cards(bot, ts)
    assert deploy.text == "Approval needed: Announce *the deploy*?"
    assert freeze.text == "Approval needed: Announce *the freeze*?"

    assert await bot.click("turn_approve", bot.slack.user_id, freeze) == 200
    await wait_until(lambda: not has_buttons(bot, ts, freeze.ts), "the freeze card was decided")
    # the other card still asks, and the turn waits for it: no reply went on
    assert has_buttons(bot, ts, deploy.ts)
    session = bot.runtime.session("bot", f"slack:{bot.slack.team_id}:{bot.slack.channel_id}:{ts}")
    assert [r.id for r in await session.pending()] == ["approve"]
    assert len(bot.model.requests) == 1

    assert await bot.click("turn_deny", bot.slack.user_id, deploy) == 200
    said = await bot.replies_in(ts, 4)
    assert said[-1] == "done: {'announced': False}; {'announced': True}"
    [decided_freeze] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == freeze.ts]
    [decided_deploy] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == deploy.ts]
    assert f"Approved by <@{bot.slack.user_id}>" in json.dumps(decided_freeze.blocks)
    assert f"Denied by <@{bot.slack.user_id}>" in json.dumps(decided_deploy.blocks)
    posted = [c for c in bot.slack.calls_to("chat.postMessage") if ASKING in str(c.params)]
    assert len(posted) == 2  # one card per request, none posted twice


async def test_a_card_that_expired_beside_another_is_settled_when_the_other_is_answered(bot: Bot):
    text = "<@U0BOT> announce it and hurry"
    ts = bot.slack.post_user_message(bot.slack.channel_id, text)
    await bot.deliver(bot.envelope("app_mention", text, ts))
    await wait_until(lambda: len(cards(bot, ts)) == 2, "both approvals were shown")
    announce, hurry = cards(bot, ts)
    session = bot.runtime.session("bot", f"slack:{bot.slack.team_id}:{bot.slack.channel_id}:{ts}")

    async def hurry_expired() -> bool:
        answer = await session.answer_of(next(t.turn_id for t in await session.turns()), "quick")
        return answer is not None and answer.expired

    for _ in range(500):  # the engine's timer answers it within QUICK seconds
        if await hurry_expired():
            break
        await asyncio.sleep(0.01)
    assert await hurry_expired()
    assert [r.id for r in await session.pending()] == ["approve"]  # the turn still waits

    assert await bot.click("turn_approve", bot.slack.user_id, announce) == 200
    said = await bot.replies_in(ts, 4)
    assert said[-1] == "done: {'announced': True}; {'went_ahead': False, 'expired': True}"
    await wait_until(lambda: not has_buttons(bot, ts, hurry.ts), "the expired card was settled")
    [settled] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == hurry.ts]
    assert "Expired" in json.dumps(settled.blocks)
