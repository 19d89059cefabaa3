"""The Slack app end to end: signed HTTP requests in, replies in the fake Slack's threads.

The app under test is the real aiohttp server with the real Bolt app behind it;
its Web API client is the real slack_sdk client, pointed at a local fake Slack.
Requests are signed with the signing secret exactly as Slack signs them.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from agent import SessionKey
from bot.slack.inbound import session_id
from bot.slack.thread_status import THINKING
from bot.texts import EXPIRED_REQUEST, FAILED_PREFIX, RETRY_OFFER, SUPERSEDED, waiting_for_approval
from tests.bot.slack_harness import (
    BOTH_NOTES,
    CHECKING_NOTE,
    QUICK,
    WAIT,
    Bot,
    approval_in,
    ask_for_approval,
)
from tests.fakes.slack_api import STREAM_METHODS


async def test_a_mention_at_top_level_is_answered_in_a_thread_under_it(bot: Bot):
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> when is the deploy?")

    status = await bot.deliver(bot.envelope("app_mention", "<@U0BOT> when is the deploy?", ts))

    assert status == 200
    assert await bot.replies_in(ts) == ["you said: when is the deploy?"]
    [start] = bot.slack.calls_to("chat.startStream")  # streamed as it was written
    assert start.params["thread_ts"] == ts
    assert start.params["recipient_user_id"] == bot.slack.user_id
    assert len(bot.slack.calls_to("chat.stopStream")) == 1
    # before its first words, the thread said the bot was at work
    [thinking] = bot.slack.statuses
    assert (thinking.thread_ts, thinking.status) == (ts, THINKING)


async def test_a_retried_event_and_its_message_copy_make_one_turn_and_one_reply(bot: Bot):
    text = "<@U0BOT> once please"
    ts = bot.slack.post_user_message(bot.slack.channel_id, text)
    mention = bot.envelope("app_mention", text, ts)
    copy = bot.envelope("message", text, ts, channel_type="channel")

    deliveries = (bot.deliver(mention), bot.deliver(mention), bot.deliver(copy))
    statuses = list(await asyncio.gather(*deliveries))

    assert statuses == [200, 200, 200]
    assert await bot.replies_in(ts) == ["you said: once please"]
    await asyncio.sleep(0.2)  # time for a second reply, were there one
    assert len(bot.slack.replies(bot.slack.channel_id, ts)) == 1
    assert len(bot.model.requests) == 1


async def test_a_follow_up_without_a_mention_is_answered_only_in_the_bots_threads(bot: Bot):
    root = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> first")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> first", root))
    await bot.replies_in(root)
    follow = bot.slack.post_user_message(bot.slack.channel_id, "and second", thread_ts=root)
    other = bot.slack.post_user_message(bot.slack.channel_id, "lunch?")
    elsewhere = bot.slack.post_user_message(bot.slack.channel_id, "ok", thread_ts=other)

    await bot.deliver(bot.envelope("message", "and second", follow, thread_ts=root))
    await bot.deliver(bot.envelope("message", "ok", elsewhere, thread_ts=other))

    assert await bot.replies_in(root, 3) == [
        "you said: first",
        "and second",
        "you said: and second",
    ]
    await asyncio.sleep(0.2)
    assert [m.text for m in bot.slack.replies(bot.slack.channel_id, other)] == ["ok"]
    # the chatter of threads it takes no part in costs the bot nothing it keeps
    foreign = session_id(bot.slack.team_id, bot.slack.channel_id, other)
    assert SessionKey("bot", foreign) not in bot.runtime._sessions


async def test_a_mention_in_a_thread_is_answered_in_that_thread(bot: Bot):
    root = bot.slack.post_user_message(bot.slack.channel_id, "lunch plans?")  # not the bot's
    bot.slack.post_user_message(bot.slack.channel_id, "tacos", thread_ts=root)

    asked = await mention(bot, "what did we pick?", thread_ts=root)

    assert asked == root
    said = await bot.replies_in(root, 3)
    assert said[-1] == "you said: what did we pick?"
    assert bot.slack.messages(bot.slack.channel_id)[0].ts == root  # no new top-level message


async def test_a_direct_message_is_answered_without_a_mention(bot: Bot):
    bot.slack.add_channel("D0ALICE", members=[bot.slack.user_id], is_im=True)
    ts = bot.slack.post_user_message("D0ALICE", "are you there?")

    await bot.deliver(
        bot.envelope("message", "are you there?", ts, channel="D0ALICE", channel_type="im")
    )

    [answer] = await bot.written_replies(ts, channel="D0ALICE")
    assert answer.text == "you said: are you there?"
    # A top-level DM is answered in its own thread, as Slack's agent messaging
    # shows a DM: a timeline of threads, each streamed with its status and Stop.
    assert answer.thread_ts == ts
    assert [m.ts for m in bot.slack.messages("D0ALICE") if m.thread_ts is None] == [ts]


@pytest.mark.parametrize(
    "signing",
    [{"secret": "not-the-secret"}, {"at": time.time() - 10 * 60}],
    ids=["forged", "stale"],
)
async def test_a_forged_or_stale_request_is_refused_and_starts_nothing(bot: Bot, signing):
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> hi")

    status = await bot.deliver(bot.envelope("app_mention", "<@U0BOT> hi", ts), **signing)

    assert status == 401
    await asyncio.sleep(0.1)
    assert not bot.model.requests
    assert not bot.slack.calls_to("chat.postMessage")


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", ""], ids=["broken", "array", "empty"])
async def test_a_signed_but_malformed_body_gets_a_400(bot: Bot, body: str):
    headers = bot.signed(body)
    async with bot.http.post(f"{bot.url}/slack/events", data=body, headers=headers) as response:
        assert response.status == 400
    assert not bot.model.requests


WRONG_SHAPES = {
    "event not an object": ({"type": "event_callback", "event": "x"}, "event"),
    "event fields of the wrong type": (
        {"type": "event_callback", "event": {"type": "message", "user": 5, "ts": {}}},
        "event.ts, event.user",
    ),
    "authorizations not a list": (
        {"type": "event_callback", "event": {"type": "message"}, "authorizations": "x"},
        "authorizations",
    ),
    "actions not a list": ({"type": "block_actions", "actions": "x"}, "actions"),
    "an action without its id": (
        {"type": "block_actions", "actions": [{"action_id": 5}]},
        "actions.0.action_id",
    ),
}


@pytest.mark.parametrize(
    ("shape", "as_form"), [(s, f) for s in WRONG_SHAPES for f in (False, True)]
)
async def test_a_signed_body_of_the_wrong_shape_gets_a_400_naming_the_field(
    bot: Bot, shape: str, as_form: bool
):
    payload, named = WRONG_SHAPES[shape]
    body = urlencode({"payload": json.dumps(payload)}) if as_form else json.dumps(payload)
    content_type = "application/x-www-form-urlencoded" if as_form else "application/json"
    headers = bot.signed(body) | {"Content-Type": content_type}

    async with bot.http.post(f"{bot.url}/slack/events", data=body, headers=headers) as response:
        assert response.status == 400  # Bolt alone answers most of these with a 500
        assert (await response.json())["error"] == f"malformed body: unexpected {named}"
    # the next good request is served as ever
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> still there?")
    assert await bot.deliver(bot.envelope("app_mention", "<@U0BOT> still there?", ts)) == 200
    assert await bot.replies_in(ts) == ["you said: still there?"]


async def test_a_failed_turn_says_so_in_the_thread(bot: Bot):
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> explode")

    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> explode", ts))

    said, offer = await bot.replies_in(ts, 2)
    assert said.startswith(FAILED_PREFIX)
    assert "the model's backend is down" in said
    assert "Traceback" not in said
    assert offer == RETRY_OFFER


async def test_health_check(bot: Bot):
    async with bot.http.get(f"{bot.url}/healthz") as response:
        assert (response.status, await response.text()) == (200, "ok")


# -- Approve / Deny ----------------------------------------------------------------------------


async def test_the_speaker_approves_and_the_turn_goes_on_in_the_thread(bot: Bot):
    ts, approval = await ask_for_approval(bot)
    assert approval.text == "Approval needed: Announce *the deploy*?"
    buttons = next(b for b in approval.blocks if b["type"] == "actions")["elements"]
    assert [(b["text"]["text"], b.get("style")) for b in buttons] == [
        ("Approve", "primary"),
        ("Deny", None),
        ("Withdraw", None),  # for admins
    ]

    assert await bot.click("turn_approve", bot.slack.user_id, approval) == 200

    working, _, done = await bot.written_replies(ts, 3)
    assert done.text == "done: {'announced': True}"
    # the call's task line said it waited for an answer, above the request
    [task] = working.tasks.values()
    assert (task["title"], task["status"]) == ("announce: waiting for an answer", "pending")
    [decided] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == approval.ts]
    assert not [b for b in decided.blocks if b["type"] == "actions"]  # the buttons are gone
    assert f"Approved by <@{bot.slack.user_id}>" in json.dumps(decided.blocks)


async def test_deny_tells_the_model_it_was_denied(bot: Bot):
    ts, approval = await ask_for_approval(bot)

    await bot.click("turn_deny", bot.slack.user_id, approval)

    assert (await bot.replies_in(ts, 3))[-1] == "done: {'announced': False}"
    [decided] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == approval.ts]
    assert "Denied by" in json.dumps(decided.blocks)


async def test_another_user_is_refused_privately_and_the_buttons_stay(bot: Bot):
    bot.slack.add_user("U0BEN", name="ben")
    bot.slack.join(bot.slack.channel_id, "U0BEN")
    ts, approval = await ask_for_approval(bot)

    assert await bot.click("turn_approve", "U0BEN", approval) == 200

    [refusal] = await bot.ephemerals_to("U0BEN")
    assert refusal == f"Only <@{bot.slack.user_id}> can answer this request."
    await asyncio.sleep(0.1)
    [still] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == approval.ts]
    assert [b for b in still.blocks if b["type"] == "actions"]
    assert not bot.slack.calls_to("chat.update")
    assert len(bot.model.requests) == 1


async def test_a_second_click_is_told_who_settled_it(bot: Bot):
    ts, approval = await ask_for_approval(bot)
    await bot.click("turn_approve", bot.slack.user_id, approval)
    await bot.replies_in(ts, 3)

    await bot.click("turn_deny", bot.slack.user_id, approval)

    [told] = await bot.ephemerals_to(bot.slack.user_id)
    assert told == f"This was already approved by <@{bot.slack.user_id}>."
    assert len(bot.slack.replies(bot.slack.channel_id, ts)) == 3


async def test_a_request_nobody_answers_in_time_says_so_and_the_turn_goes_on(bot: Bot):
    ts, approval = await ask_for_approval(bot, "hurry")
    assert approval.text == "Approval needed: Go ahead right now?"

    said = await bot.replies_in(ts, 3)  # nobody clicks

    assert said[-1] == "done: {'went_ahead': False, 'expired': True}"
    [settled] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == approval.ts]
    assert [b["type"] for b in settled.blocks] == ["section", "context"]  # no buttons left
    assert settled.blocks[1]["elements"][0]["text"] == EXPIRED_REQUEST
    # a late click is told why nothing happens
    await bot.click("turn_approve", bot.slack.user_id, approval)
    assert await bot.ephemerals_to(bot.slack.user_id) == [
        "This request expired before anyone answered it."
    ]
    assert len(bot.slack.replies(bot.slack.channel_id, ts)) == 3


async def test_a_click_that_finds_its_request_overdue_shows_the_turn_going_on(bot: Bot):
    ts, approval = await ask_for_approval(bot, "hurry")
    bot.runtime.clock = lambda: time.time() + 60  # past its time; the timer has not fired

    await bot.click("turn_approve", bot.slack.user_id, approval)

    assert await bot.ephemerals_to(bot.slack.user_id) == [
        "This request expired before anyone answered it."
    ]
    said = await bot.replies_in(ts, 3)
    assert said[-1] == "done: {'went_ahead': False, 'expired': True}"
    [settled] = [m for m in bot.slack.replies(bot.slack.channel_id, ts) if m.ts == approval.ts]
    assert not [b for b in settled.blocks if b["type"] == "actions"]  # no live buttons left
    await asyncio.sleep(QUICK * 2)  # the timer fires too, and finds nothing to do
    assert len(bot.slack.replies(bot.slack.channel_id, ts)) == 3


# -- replace in flight -------------------------------------------------------------------------


async def test_a_newer_message_supersedes_the_unfinished_reply(bot: Bot):
    root = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> think slowly")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> think slowly", root))
    await asyncio.wait_for(bot.held.wait(), WAIT)
    text = "<@U0BOT> actually, quickly"
    newer = bot.slack.post_user_message(bot.slack.channel_id, text, thread_ts=root)

    await bot.deliver(bot.envelope("app_mention", text, newer, thread_ts=root))

    said = await bot.replies_in(root, 3)
    assert said[1:] == [SUPERSEDED, "you said: actually, quickly"]
    team, channel = bot.slack.team_id, bot.slack.channel_id
    assert [r.turn_id for r in bot.model.requests] == [
        f"{team}:{channel}:{root}",
        f"{team}:{channel}:{newer}",
    ]


async def test_a_newer_message_never_supersedes_an_approval(bot: Bot):
    ts, approval = await ask_for_approval(bot)
    newer = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> hurry", thread_ts=ts)

    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> hurry", newer, thread_ts=ts))

    assert await bot.ephemerals_to(bot.slack.user_id) == [
        waiting_for_approval(f"<@{bot.slack.user_id}>", None)
    ]
    await bot.click("turn_approve", bot.slack.user_id, approval)
    said = await bot.replies_in(ts, 4)  # its task line, the request, the newer message, this
    assert said[-1] == "done: {'announced': True}"


async def test_a_rate_limited_reply_waits_as_slack_says_and_lands(bot: Bot):
    bot.slack.fail_next("chat.startStream", "ratelimited", status=429, retry_after=1)
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> busy day")

    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> busy day", ts))

    assert await bot.replies_in(ts) == ["you said: busy day"]
    limited, landed = bot.slack.calls_to("chat.startStream")
    assert (limited.status, landed.status) == (429, 200)
    assert landed.at - limited.at >= 1.0


# -- streaming ---------------------------------------------------------------------------------


async def test_without_streaming_the_reply_is_posted_as_one_message(bot: Bot):
    bot.slack.disable(*STREAM_METHODS)
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> no streams here")

    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> no streams here", ts))

    assert await bot.replies_in(ts) == ["you said: no streams here"]
    assert [c.error for c in bot.slack.calls_to("chat.startStream")] == ["unknown_method"]


async def test_a_stream_slack_closed_mid_reply_is_finished_by_updating_the_message(bot: Bot):
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> answer in two parts")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> answer in two parts", ts))
    await asyncio.wait_for(bot.held.wait(), WAIT)
    await asyncio.sleep(0.1)  # the first part goes out
    bot.slack.expire_streams()  # as Slack does about five minutes in

    bot.hold.set()

    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        # the Stop button's message stands beside the reply while the turn works
        replies = bot.slack.replies(bot.slack.channel_id, ts)
        [answer] = [m for m in replies if not any(b["type"] == "actions" for b in m.blocks)]
        if answer.text != "Part one. ":
            break
        await asyncio.sleep(0.01)
    assert answer.text == "Part one. Part two."
    assert answer.stream == "expired"
    assert [c.error for c in bot.slack.calls_to("chat.stopStream", "chat.appendStream")][-1] == (
        "message_not_in_streaming_state"
    )
    assert bot.slack.calls_to("chat.update")


# -- the Slack tools ---------------------------------------------------------------------------


async def mention(bot: Bot, text: str, thread_ts: str | None = None) -> str:
    """A person mentions the bot; returns the thread the reply goes in."""
    said = f"<@U0BOT> {text}"
    ts = bot.slack.post_user_message(bot.slack.channel_id, said, thread_ts=thread_ts)
    extra = {"thread_ts": thread_ts} if thread_ts else {}
    await bot.deliver(bot.envelope("app_mention", said, ts, **extra))
    return thread_ts or ts


async def test_read_thread_shows_who_said_what(bot: Bot):
    root = await mention(bot, "hello")
    await bot.replies_in(root)

    await mention(bot, "read the thread", thread_ts=root)

    said = await bot.replies_in(root, 3)
    assert "@alice (U0ALICE)" in said[-1]
    assert "@bot (U0BOT)" in said[-1]
    assert "you said: hello" in said[-1]


async def test_read_channel_reads_another_channel_and_names_a_bad_one(bot: Bot):
    bot.slack.add_channel("C0RANDOM", members=[bot.slack.user_id])
    bot.slack.post_user_message("C0RANDOM", "lunch at noon")

    root = await mention(bot, "read <#C0RANDOM|random>")
    assert "lunch at noon" in (await bot.replies_in(root))[0]
    other = await mention(bot, "read C0NOWHERE")
    assert "cannot use C0NOWHERE: channel_not_found" in (await bot.replies_in(other))[0]


async def test_a_tool_that_fails_shows_as_a_failed_task_and_the_model_is_told(bot: Bot):
    root = await mention(bot, "read #nowhere")

    [answer] = await bot.written_replies(root)

    [task] = answer.tasks.values()
    assert (task["title"], task["status"]) == ("read_channel", "error")
    assert "no public channel is named #nowhere" in answer.text


async def test_what_the_model_writes_before_a_tool_call_shows_with_its_task(bot: Bot):
    root = await mention(bot, "check the thread")

    await bot.replies_in(root)
    [answer] = bot.slack.replies(bot.slack.channel_id, root)

    [task] = answer.tasks.values()
    assert (task["title"], task["status"]) == ("read_thread", "complete")
    assert task["details"] == CHECKING_NOTE


async def test_each_tool_call_of_a_step_shows_the_note_written_before_it(bot: Bot):
    bot.slack.add_channel("C0GENERAL", name="general", members=[bot.slack.user_id])
    root = await mention(bot, "check the thread and #general")

    [answer] = await bot.written_replies(root)

    assert [(t["title"], t.get("details")) for t in answer.tasks.values()] == [
        ("read_thread", BOTH_NOTES[0]),
        ("read_channel", BOTH_NOTES[1]),
    ]


async def test_where_nothing_streams_the_models_note_is_the_threads_status(bot: Bot):
    bot.slack.disable(*STREAM_METHODS)
    root = await mention(bot, "check the thread")

    await bot.replies_in(root)

    said = [s.status for s in bot.slack.statuses if s.thread_ts == root]
    assert CHECKING_NOTE in said
    assert said[-1] == ""  # cleared once the reply is done: it would outlive it otherwise
    assert bot.slack.status(bot.slack.channel_id, root) == ""


async def test_the_model_reads_people_and_channels_by_name(bot: Bot):
    bot.slack.add_channel("C0RANDOM", name="random", members=[bot.slack.user_id])
    bot.slack.post_user_message("C0RANDOM", "<@U0ALICE> lunch in <#C0GENERAL|general>?")

    by_name = await mention(bot, "read #random")
    bare = await mention(bot, "read random")
    missing = await mention(bot, "read #nowhere")

    for thread in (by_name, bare):
        [said] = await bot.replies_in(thread)
        assert "'channel': '#random'" in said
        assert "'text': '@alice (U0ALICE) lunch in #general?'" in said
    assert "no public channel is named #nowhere" in (await bot.replies_in(missing))[0]


async def test_read_thread_of_a_long_thread_shows_its_start_and_its_latest(bot: Bot):
    root = await mention(bot, "hello")
    await bot.replies_in(root)
    for n in range(120):
        bot.slack.post_user_message(bot.slack.channel_id, f"reply number {n}.", thread_ts=root)

    await mention(bot, "read the thread", thread_ts=root)

    said = (await bot.replies_in(root, 123))[-1]
    assert "'text': '@bot (U0BOT) hello'" in said  # the thread's first message
    assert "reply number 119." in said
    assert "read the thread" in said
    assert "reply number 0." not in said  # the oldest replies are left out, and it says so
    assert "'skipped': 'older replies" in said


@pytest.mark.parametrize(
    "kind", [{"is_private": True}, {"is_im": True}], ids=["private-channel", "direct-message"]
)
async def test_a_private_conversation_is_neither_read_nor_posted_to(bot: Bot, kind):
    bot.slack.add_user("U0BEN", name="ben")
    bot.slack.add_channel("G0SECRET", members=["U0BEN"], **kind)
    bot.slack.post_user_message("G0SECRET", "salary review", user="U0BEN")

    read = await mention(bot, "read G0SECRET")
    post = await mention(bot, "post G0SECRET hello")

    assert "G0SECRET is private" in (await bot.replies_in(read))[0]
    assert "G0SECRET is private" in (await bot.replies_in(post))[0]
    assert [m.text for m in bot.slack.messages("G0SECRET")] == ["salary review"]


async def test_a_channel_the_bot_is_not_in_is_neither_read_nor_posted_to(bot: Bot):
    bot.slack.add_channel("C0RANDOM", name="random", members=[bot.slack.user_id])
    bot.slack.add_channel("C0OUTSIDE", name="outside", bot_is_member=False)

    read = await mention(bot, "read #outside")
    post = await mention(bot, "post #outside hello")

    for thread in (read, post):
        [said] = await bot.replies_in(thread)
        assert "the bot is not in #outside: ask someone to /invite it there first" in said
    assert bot.slack.messages("C0OUTSIDE") == []


@pytest.mark.parametrize(
    "post",
    ["word " * 700, "".join(f"item {n:04}\n" for n in range(280))],  # the second: 2,800 chars
    ids=["long", "many-lines-quoted-past-the-limit"],
)
async def test_a_post_too_long_to_show_in_an_approval_is_refused(bot: Bot, post: str):
    bot.slack.add_channel("C0RANDOM", members=[bot.slack.user_id])

    root = await mention(bot, f"post C0RANDOM {post}")

    assert "shorten it" in (await bot.replies_in(root))[0]
    assert bot.slack.messages("C0RANDOM") == []


@pytest.mark.parametrize("named", ["C0RANDOM", "#random"], ids=["by-id", "by-name"])
async def test_post_message_waits_for_approval_and_posts_once(bot: Bot, named: str):
    bot.slack.add_channel("C0RANDOM", name="random", members=[bot.slack.user_id])
    root = await mention(bot, f"post {named} the deploy is at noon")
    approval = await approval_in(bot.slack, root)
    assert "Post to <#C0RANDOM>?" in approval.text
    assert bot.slack.messages("C0RANDOM") == []  # nothing before the approval

    await bot.click("turn_approve", bot.slack.user_id, approval)

    said = await bot.replies_in(root, 3)
    assert "'posted': True" in said[-1]
    [posted] = bot.slack.messages("C0RANDOM")
    assert posted.text == "the deploy is at noon"


async def test_a_denied_post_is_not_posted_and_the_model_is_told(bot: Bot):
    bot.slack.add_channel("C0RANDOM", members=[bot.slack.user_id])
    root = await mention(bot, "post C0RANDOM spam")
    approval = await approval_in(bot.slack, root)

    await bot.click("turn_deny", bot.slack.user_id, approval)

    said = await bot.replies_in(root, 3)
    assert "'posted': False, 'reason': 'a person denied it'" in said[-1]
    assert bot.slack.messages("C0RANDOM") == []


async def test_notes_are_kept_per_channel_and_recalled_from_another_thread(bot: Bot):
    first = await mention(bot, "remember the deploy is on Friday")
    assert "'notes': 1" in (await bot.replies_in(first))[0]

    other = await mention(bot, "recall")

    assert "the deploy is on Friday" in (await bot.replies_in(other))[0]


def subscribed_events() -> list[str]:
    """The bot events manifest.yml subscribes to, read without a YAML parser."""
    lines = (Path(__file__).resolve().parents[2] / "manifest.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "bot_events:")
    events = []
    for line in lines[start + 1 :]:
        if not line.strip().startswith("- "):
            break
        events.append(line.strip().removeprefix("- "))
    return events


@pytest.mark.parametrize("subscribed", subscribed_events())
async def test_every_subscribed_event_has_a_listener(bot: Bot, subscribed: str):
    # message.channels, message.im... all arrive as "message"; Bolt answers 404 to an
    # event nobody listens to, and Slack retries it
    event_type = subscribed.split(".")[0]
    ts = bot.slack.post_user_message(bot.slack.channel_id, "nothing for the bot")
    # an assistant thread's events name the thread, as docs.slack.dev's examples show
    thread = {"user_id": bot.slack.user_id, "channel_id": bot.slack.channel_id, "thread_ts": ts}
    shaped = {"assistant_thread": thread} if event_type.startswith("assistant_thread") else {}

    status = await bot.deliver(bot.envelope(event_type, "nothing for the bot", ts, **shaped))

    assert status == 200


async def test_a_late_retry_of_an_older_message_does_not_supersede_a_newer_one(bot: Bot):
    root = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> hello")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> hello", root))
    await bot.replies_in(root)
    older = bot.slack.post_user_message(
        bot.slack.channel_id, "<@U0BOT> older question", thread_ts=root
    )
    newer = bot.slack.post_user_message(
        bot.slack.channel_id, "<@U0BOT> newer, think slowly", thread_ts=root
    )
    await bot.deliver(
        bot.envelope("app_mention", "<@U0BOT> newer, think slowly", newer, thread_ts=root)
    )
    await asyncio.wait_for(bot.held.wait(), WAIT)

    # the older message's first delivery failed; Slack's retry arrives now
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> older question", older, thread_ts=root))
    bot.hold.set()

    said = await bot.replies_in(root, 5)
    assert SUPERSEDED not in said
    assert said[-2:] == ["you said: newer, think slowly", "you said: older question"]


async def test_a_continuation_that_began_before_anyone_watched_still_lands_whole(bot: Bot):
    ts, approval = await ask_for_approval(bot, "announce in two parts")
    # recording the decision waits out a rate limit, while the turn already streams
    bot.slack.fail_next("chat.update", "ratelimited", status=429, retry_after=1)

    await bot.click("turn_approve", bot.slack.user_id, approval)
    await asyncio.wait_for(bot.held.wait(), WAIT)
    await asyncio.sleep(1.5)  # the first part went out before the reply was watched
    bot.hold.set()

    said = await bot.replies_in(ts, 3)
    assert said[-1] == "Part one. Part two."


async def test_a_click_without_its_message_still_answers_in_the_right_thread(bot: Bot):
    ts, approval = await ask_for_approval(bot)

    await bot.click("turn_approve", bot.slack.user_id, approval, without=("message", "container"))

    assert (await bot.replies_in(ts, 3))[-1] == "done: {'announced': True}"


async def test_a_click_without_a_user_answers_nothing(bot: Bot):
    ts, approval = await ask_for_approval(bot)

    assert await bot.click("turn_approve", bot.slack.user_id, approval, without=("user",)) == 200

    await asyncio.sleep(0.2)
    assert len(bot.slack.replies(bot.slack.channel_id, ts)) == 2  # its task line and the request
    assert len(bot.model.requests) == 1
