"""Feedback on replies through Slack: 👍 / 👎 under an answer, a comment, the admins' Home tab.

The real Bolt app on a local port, its client on the fake Slack (with modals); a
click is posted as Slack posts a ``block_actions`` payload for ``feedback_buttons``
(the clicked button's ``value``, the clicker as ``user``), a comment as a
``view_submission``. What was kept is read back from the store.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent import Feedback, rate_turn
from bot.config_file import BotConfig
from bot.policies import PolicyBook
from bot.slack.feedback_blocks import FEEDBACK, TELL_MORE, feedback_blocks
from bot.slack.inbound import session_id
from bot.texts import FEEDBACK_GONE, FEEDBACK_THANKS, FEEDBACK_THANKS_BAD
from tests.bot.hatches_harness import (
    ModalSlack,
    post_interaction,
    running_hatches_bot,
    submission,
    wait_until,
)
from tests.bot.slack_harness import WAIT, Bot
from tests.fakes.slack_api import STREAM_METHODS, Message

ADMIN = "U0BOSS"


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[Bot]:
    async with running_hatches_bot(tmp_path) as running:
        yield running


@pytest.fixture
def modals(bot: Bot) -> ModalSlack:
    assert isinstance(bot.slack, ModalSlack)
    return bot.slack


async def mention(bot: Bot, text: str) -> str:
    said = f"<@U0BOT> {text}"
    ts = bot.slack.post_user_message(bot.slack.channel_id, said)
    assert await bot.deliver(bot.envelope("app_mention", said, ts)) == 200
    return ts


def feedback_of(message: Message) -> dict[str, Any] | None:
    """The feedback buttons element under a message, if it has one."""
    found = [b for b in message.blocks if b["type"] == "context_actions"]
    return found[0]["elements"][0] if found else None


async def answered(bot: Bot, text: str) -> tuple[str, Message]:
    """Ask ``text``; the thread, and the reply message, once written."""
    ts = await mention(bot, text)
    replies = await bot.written_replies(ts)
    [reply] = [m for m in replies if not any(b["type"] == "actions" for b in m.blocks)]
    return ts, reply


def rating_click(
    bot: Bot, reply: Message, rating: str, user: str, *, value: str | None = None
) -> dict[str, Any]:
    """What Slack posts for a click on 👍 (``good``) or 👎 (``bad``) under ``reply``."""
    element = feedback_of(reply)
    assert element is not None
    button = element["positive_button" if rating == "good" else "negative_button"]
    [block] = [b for b in reply.blocks if b["type"] == "context_actions"]
    return {
        "type": "block_actions",
        "user": {"id": user, "team_id": bot.slack.team_id},
        "team": {"id": bot.slack.team_id},
        "api_app_id": bot.slack.app_id,
        "trigger_id": f"{int(time.time())}.98765.fb{len(bot.slack.calls)}",
        "container": {
            "type": "message",
            "message_ts": reply.ts,
            "channel_id": reply.channel,
            "is_ephemeral": False,
            "thread_ts": reply.thread_ts,
        },
        "channel": {"id": reply.channel},
        "message": {"ts": reply.ts, "thread_ts": reply.thread_ts, "text": reply.text},
        "actions": [
            {
                "type": "feedback_buttons",
                "action_id": element["action_id"],
                "block_id": block["block_id"],
                "value": button["value"] if value is None else value,
                "text": button["text"],
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


async def kept(bot: Bot, count: int = 1) -> list[Feedback]:
    """The feedback the store holds, once it holds ``count`` rows."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = await bot.runtime.store.feedback_since(0.0)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} feedback rows: {found}")


async def settled(bot: Bot) -> None:
    """Wait until the channel's tasks (a click's handling) are done."""
    deadline = time.monotonic() + WAIT
    while bot.channel.in_flight and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


# -- the buttons -----------------------------------------------------------------------


async def test_a_completed_streamed_reply_ends_with_the_feedback_buttons(bot: Bot):
    ts, reply = await answered(bot, "hello")

    assert reply.text == "you said: hello"
    assert reply.stream == "stopped"
    element = feedback_of(reply)
    assert element is not None
    assert element["action_id"] == FEEDBACK
    [turn] = await bot.runtime.session("bot", session_id("T0TEAM", "C0GENERAL", ts)).turns()
    assert [b for b in reply.blocks if b["type"] == "context_actions"] == feedback_blocks(
        session_id("T0TEAM", "C0GENERAL", ts), turn.turn_id
    )
    stop = bot.slack.calls_to("chat.stopStream")[-1]
    assert stop.ok
    assert "blocks" in stop.params


async def test_a_posted_reply_carries_them_in_its_last_update_which_slack_accepts(bot: Bot):
    bot.slack.disable(*STREAM_METHODS)

    _, reply = await answered(bot, "no streams here")

    assert reply.stream is None  # posted and updated
    assert reply.text == "you said: no streams here"
    assert reply.blocks[0] == {"type": "markdown", "text": "you said: no streams here"}
    assert feedback_of(reply) is not None
    update = bot.slack.calls_to("chat.update")[-1]
    assert update.ok, update.response
    assert "markdown_text" not in update.params


@pytest.mark.parametrize("ending", ["failed", "cancelled"])
async def test_a_reply_whose_turn_did_not_answer_has_no_buttons(bot: Bot, ending: str):
    if ending == "failed":
        ts = await mention(bot, "explode")
    else:
        ts = await mention(bot, "tell me in two parts")
        await asyncio.wait_for(bot.held.wait(), WAIT)
        session = bot.runtime.session("bot", session_id("T0TEAM", "C0GENERAL", ts))
        [turn] = await session.turns()
        assert await session.cancel(turn.turn_id)
        bot.hold.set()

    replies = await bot.written_replies(ts)

    assert replies, ending
    assert [m.ts for m in replies if feedback_of(m) is not None] == []
    assert all(c.ok for c in bot.slack.calls_to("chat.stopStream", "chat.update"))


async def test_a_turn_that_waited_for_an_approval_gets_them_under_its_answer_only(bot: Bot):
    ts = await mention(bot, "announce the release")
    deadline = time.monotonic() + WAIT
    while not (cards := [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.blocks]):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    assert [m for m in bot.slack.replies(bot.slack.channel_id, ts) if feedback_of(m)] == []

    assert await bot.click("turn_approve", bot.slack.user_id, cards[0]) == 200
    deadline = time.monotonic() + WAIT
    while not (rated := [m for m in bot.slack.replies(bot.slack.channel_id, ts) if feedback_of(m)]):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)

    [answer] = rated
    assert answer.text.startswith("done: ")


# -- a click ---------------------------------------------------------------------------


async def test_a_good_click_is_kept_with_who_and_which_turn(bot: Bot):
    ts, reply = await answered(bot, "hello")

    status, _ = await post_interaction(bot, rating_click(bot, reply, "good", bot.slack.user_id))

    assert status == 200
    [feedback] = await kept(bot)
    [turn] = await bot.runtime.session("bot", session_id("T0TEAM", "C0GENERAL", ts)).turns()
    assert (feedback.key.session_id, feedback.turn_id) == (
        session_id("T0TEAM", "C0GENERAL", ts),
        turn.turn_id,
    )
    assert (feedback.by, feedback.rating, feedback.comment) == (bot.slack.user_id, "good", None)
    assert await bot.ephemerals_to(bot.slack.user_id) == [FEEDBACK_THANKS]


async def test_the_same_person_clicking_bad_replaces_theirs_and_gets_the_comment_form(
    bot: Bot, modals: ModalSlack
):
    _, reply = await answered(bot, "hello")
    bot.slack.add_user("U0BEN", name="ben")
    bot.slack.join(bot.slack.channel_id, "U0BEN")
    await post_interaction(bot, rating_click(bot, reply, "good", bot.slack.user_id))
    await post_interaction(bot, rating_click(bot, reply, "good", "U0BEN"))
    await kept(bot, 2)

    status, _ = await post_interaction(bot, rating_click(bot, reply, "bad", bot.slack.user_id))

    assert status == 200
    await wait_until(lambda: bool(modals.opened), "the comment form opened")
    await settled(bot)
    found = await bot.runtime.store.feedback_since(0.0)
    assert sorted((f.by, f.rating) for f in found) == [("U0ALICE", "bad"), ("U0BEN", "good")]
    [form] = modals.opened
    assert form["title"]["text"] == "Tell us more"
    assert [c.error for c in bot.slack.calls_to("views.open")] == [None]


async def test_a_comment_through_the_form_is_kept_on_the_persons_row(bot: Bot, modals: ModalSlack):
    _, reply = await answered(bot, "hello")
    await post_interaction(bot, rating_click(bot, reply, "bad", bot.slack.user_id))
    await wait_until(lambda: bool(modals.opened), "the comment form opened")

    typed = "It answered a question I did not ask."
    status, body = await post_interaction(
        bot, submission(bot, modals.opened[0], bot.slack.user_id, typed)
    )

    assert (status, body) == (200, "")  # the form closes
    [feedback] = await bot.runtime.store.feedback_since(0.0)
    assert (feedback.rating, feedback.comment) == ("bad", typed)


async def test_where_the_form_cannot_open_a_private_message_offers_it(bot: Bot, modals: ModalSlack):
    _, reply = await answered(bot, "hello")
    click = rating_click(bot, reply, "bad", bot.slack.user_id)
    modals.expired.add(click["trigger_id"])  # past its 3 seconds

    await post_interaction(bot, click)

    assert await bot.ephemerals_to(bot.slack.user_id) == [FEEDBACK_THANKS_BAD]
    assert [c.error for c in bot.slack.calls_to("views.open")] == ["expired_trigger_id"]
    [offer] = [e for e in bot.slack.ephemerals if e.user == bot.slack.user_id]
    [button] = next(b for b in offer.blocks if b["type"] == "actions")["elements"]
    assert button["action_id"] == TELL_MORE
    more = rating_click(bot, reply, "bad", bot.slack.user_id)
    more["actions"] = [{"type": "button", "action_id": TELL_MORE, "value": button["value"]}]
    more["container"]["is_ephemeral"] = True

    assert (await post_interaction(bot, more))[0] == 200
    await wait_until(lambda: bool(modals.opened), "the comment form opened")
    assert (await kept(bot))[0].rating == "bad"


@pytest.mark.parametrize("forged", ["unknown turn", "failed turn", "not json", "no rating"])
async def test_a_forged_value_is_refused_privately_and_nothing_is_kept(bot: Bot, forged: str):
    ts, reply = await answered(bot, "hello")
    failed = await mention(bot, "explode")
    await bot.written_replies(failed)
    sid, failed_sid = (session_id("T0TEAM", "C0GENERAL", t) for t in (ts, failed))
    value = {
        "unknown turn": json.dumps({"s": sid, "t": "T0TEAM:C0GENERAL:1.000", "r": "good"}),
        "failed turn": json.dumps(
            {"s": failed_sid, "t": f"T0TEAM:C0GENERAL:{failed}", "r": "good"}
        ),
        "not json": "positive_feedback",
        "no rating": json.dumps({"s": sid, "t": "x", "r": "meh"}),
    }[forged]

    status, _ = await post_interaction(
        bot, rating_click(bot, reply, "good", bot.slack.user_id, value=value)
    )
    await settled(bot)

    assert status == 200
    assert await bot.runtime.store.feedback_since(0.0) == []
    if forged in ("unknown turn", "failed turn"):
        assert await bot.ephemerals_to(bot.slack.user_id) == [FEEDBACK_GONE]
    else:  # not one of ours at all: ignored
        assert [e for e in bot.slack.ephemerals if e.user == bot.slack.user_id] == []


async def test_a_click_from_another_conversation_than_the_replys_is_refused(bot: Bot):
    bot.slack.add_channel("C0ELSE", name="else", members=[bot.slack.user_id])
    _, reply = await answered(bot, "hello")
    click = rating_click(bot, reply, "good", bot.slack.user_id)  # the real value...
    click["channel"] = {"id": "C0ELSE"}  # ...clicked where that reply is not
    click["container"]["channel_id"] = "C0ELSE"

    status, _ = await post_interaction(bot, click)

    assert status == 200
    assert await bot.ephemerals_to(bot.slack.user_id) == [FEEDBACK_GONE]
    assert await bot.runtime.store.feedback_since(0.0) == []
    assert [e.channel for e in bot.slack.ephemerals] == ["C0ELSE"]


async def test_a_comment_on_a_reply_gone_meanwhile_is_refused_in_the_form(
    bot: Bot, modals: ModalSlack
):
    _, reply = await answered(bot, "hello")
    await post_interaction(bot, rating_click(bot, reply, "bad", bot.slack.user_id))
    await wait_until(lambda: bool(modals.opened), "the comment form opened")
    form = dict(modals.opened[0])
    address = json.loads(form["private_metadata"])
    form["private_metadata"] = json.dumps({**address, "t": "T0TEAM:C0GENERAL:9.000"})

    status, body = await post_interaction(bot, submission(bot, form, bot.slack.user_id, "Hm."))

    assert status == 200
    assert json.loads(body) == {"response_action": "errors", "errors": {"comment": FEEDBACK_GONE}}
    [feedback] = await bot.runtime.store.feedback_since(0.0)
    assert feedback.comment is None  # the click's row, untouched


# -- the Home tab ----------------------------------------------------------------------


async def test_the_home_tab_shows_admins_the_weeks_counts_and_comments_and_nobody_else(bot: Bot):
    bot.slack.add_user(ADMIN, name="boss", is_admin=True)
    bot.channel.policies = PolicyBook(bot.runtime.agent("bot"), BotConfig(), bot.runtime.store)
    ts, _ = await answered(bot, "hello")
    session = bot.runtime.session("bot", session_id("T0TEAM", "C0GENERAL", ts))
    [turn] = await session.turns()
    await rate_turn(session, turn.turn_id, by="U0ONE", rating="good")
    await rate_turn(session, turn.turn_id, by="U0TWO", rating="bad", comment="Too <b>long</b>.")
    await rate_turn(session, turn.turn_id, by="U0SIX", rating="good", comment="Spot on.")
    weeks_ago = Feedback(
        key=session.key, turn_id=turn.turn_id, by="U0OLD", rating="bad", at=time.time() - 8 * 86400
    )
    await bot.runtime.store.save_feedback(weeks_ago)  # older than the week: not counted

    for user in (ADMIN, bot.slack.user_id):
        opened = {
            "type": "event_callback",
            "team_id": bot.slack.team_id,
            "event_id": f"EvHome{user}",
            "event": {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home"},
        }
        assert await bot.deliver(opened) == 200
    await wait_until(lambda: len(bot.slack.home_views) == 2, "both Home tabs published")

    admin = json.dumps(bot.slack.home_views[ADMIN], ensure_ascii=False)
    assert "*Feedback, last 7 days:* 👍 2 good · 👎 1 bad" in admin
    assert "Spot on." in admin
    assert "Too &lt;b&gt;long&lt;/b&gt;." in admin
    assert "<@U0TWO>" in admin
    assert "U0OLD" not in admin
    member = json.dumps(bot.slack.home_views[bot.slack.user_id], ensure_ascii=False)
    assert "Feedback" not in member
    assert "Spot on." not in member
    assert "Mention me in a thread" in member
