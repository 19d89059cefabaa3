"""Issue 22, point 1 in Slack: a sub-agent's approval is shown, and answered, in the thread.

The bot delegates its task to the ``helper`` agent, whose ``announce`` needs the
speaker's approval. The helper's turn is a turn of its own session; its request
is shown as a card in the thread the person wrote in (the parent's), a click by
someone else is refused privately, and the speaker's click answers the helper's
request, as the helper's request says. The helper's call shows as a task line of
the reply, and the bot's reply goes on with what the helper said.
"""

from __future__ import annotations

import json

from bot.texts import only_answerers
from tests.bot.hatches_harness import wait_until
from tests.bot.slack_harness import ASKING, Bot, approval_in


def cards(bot: Bot, ts: str) -> list:
    return [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.text.startswith(ASKING)]


async def test_a_sub_agents_approval_is_a_card_in_the_parents_thread_and_a_click_answers_it(
    bot: Bot,
):
    bot.slack.add_user("U0BEN", name="ben")
    bot.slack.join(bot.slack.channel_id, "U0BEN")
    text = "<@U0BOT> delegate the launch"
    ts = bot.slack.post_user_message(bot.slack.channel_id, text)
    await bot.deliver(bot.envelope("app_mention", text, ts))
    card = await approval_in(bot.slack, ts)
    assert card.text == "Approval needed: Announce *the launch*?"
    parent = bot.runtime.session("bot", f"slack:{bot.slack.team_id}:{bot.slack.channel_id}:{ts}")
    [mirror] = await parent.pending()
    assert mirror.child is not None
    helper = bot.runtime.session("helper", mirror.child.session_id)
    assert mirror.child.session_id == f"{parent.key.session_id}/c-d"
    [asked] = await helper.pending()
    assert asked.id == mirror.child.input_id == "approve"

    assert await bot.click("turn_approve", "U0BEN", card) == 200
    [refusal] = await bot.ephemerals_to("U0BEN")
    assert refusal == only_answerers(f"<@{bot.slack.user_id}>")  # as the helper's request says
    assert [r.id for r in await helper.pending()] == ["approve"]  # nothing was applied

    assert await bot.click("turn_approve", bot.slack.user_id, card) == 200
    said = await bot.replies_in(ts, 3)
    assert said[-1] == "done: helper: {'announced': True}"
    answer = await helper.answer_of(mirror.child.turn_id, "approve")
    assert answer is not None
    assert (answer.value, answer.by) == (True, bot.slack.user_id)
    await wait_until(
        lambda: (
            f"Approved by <@{bot.slack.user_id}>"
            in json.dumps([m.blocks for m in bot.slack.replies(bot.slack.channel_id, ts)])
        ),
        "the card says who decided",
    )
    # the helper at work showed as a task line of the bot's reply. (Its steps after the
    # click reach the bot's turn as it joins the helper again, which may be before the
    # click's watcher of the continuation subscribed: those are shown only if it was.)
    streamed = [*bot.slack.calls_to("chat.startStream"), *bot.slack.calls_to("chat.appendStream")]
    chunks = [c.params.get("chunks") for c in streamed]
    lines = [
        (chunk.get("title"), chunk.get("status"))
        for sent in chunks
        for chunk in (json.loads(sent) if isinstance(sent, str) else sent or [])
        if isinstance(chunk, dict)
    ]
    assert ("helper: announce", "in_progress") in lines


async def test_a_sub_agent_asking_again_beside_another_waiting_one_gets_its_card_at_once(
    bot: Bot,
):
    text = "<@U0BOT> delegate both the launch twice and the freeze"
    ts = bot.slack.post_user_message(bot.slack.channel_id, text)
    await bot.deliver(bot.envelope("app_mention", text, ts))
    await wait_until(lambda: len(cards(bot, ts)) == 2, "both helpers' approvals were shown")
    launch, freeze = cards(bot, ts)
    assert launch.text == "Approval needed: Announce *the launch twice*?"

    assert await bot.click("turn_approve", bot.slack.user_id, launch) == 200
    # the first helper asks again while the bot still waits on the second helper's card
    asking_again = "Approval needed: Announce *the launch twice again*?"
    await wait_until(
        lambda: any(c.text == asking_again for c in cards(bot, ts)), "the second ask was shown"
    )
    [again] = [c for c in cards(bot, ts) if c.text == asking_again]
    assert [c.ts for c in cards(bot, ts) if c.ts != again.ts] == [freeze.ts]  # still open

    assert await bot.click("turn_deny", bot.slack.user_id, again) == 200
    assert await bot.click("turn_approve", bot.slack.user_id, freeze) == 200
    said = await bot.replies_in(ts, 5)
    assert said[-1] == (
        "done: helper: {'announced': True}; {'announced': False}; helper: {'announced': True}"
    )
    posted = [c for c in bot.slack.calls_to("chat.postMessage") if ASKING in str(c.params)]
    assert len(posted) == 3  # one card per request, none posted twice
