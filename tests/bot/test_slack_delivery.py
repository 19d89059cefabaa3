"""What a thread shows of a turn survives the process: kept in the store, finished at start.

Each test leaves the thread as a process that died at a bad moment would: the
turn runs in the engine with nobody showing it, and the store keeps what the
dead process had shown. The channel's start-up (``resume_replies``) must then
finish exactly that, and never post a second reply. The real process, killed
with SIGKILL, is in ``test_slack_process.py``.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agent import SessionKey
from agent._json import JsonValue
from bot.slack.channel import SlackChannel
from bot.slack.channel.delivery import DeliveryState, Thread
from bot.slack.inbound import Inbound, read_event
from bot.slack.reply import MAX_MESSAGE_CHARS
from tests.bot.slack_harness import WAIT, Bot, approval_in
from tests.fakes.slack_api import STREAM_METHODS


async def start_unwatched(bot: Bot, text: str) -> tuple[Inbound, str]:
    """A mention whose turn the engine admits while no channel shows it; its thread ts."""
    ts = bot.slack.post_user_message(bot.slack.channel_id, f"<@U0BOT> {text}")
    found = read_event(
        bot.envelope("app_mention", f"<@U0BOT> {text}", ts), bot_user_id=bot.slack.bot_user_id
    )
    assert isinstance(found, Inbound)
    session = bot.runtime.session("bot", found.session_id)
    # the claim of the process that admitted it and dies: this channel does not show it
    bot.channel._watching.claim(found.turn_id)
    await session.start(found.input, turn_id=found.turn_id)
    return found, ts


async def next_start(bot: Bot, inbound: Inbound) -> int:
    """The channel's start-up, as the process after the one that died runs it."""
    bot.channel._watching.release(inbound.turn_id)  # the dead process's claim died with it
    return await bot.channel.resume_replies()


async def settled(bot: Bot, inbound: Inbound, status: str) -> None:
    session = bot.runtime.session("bot", inbound.session_id)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        [record] = [t for t in await session.turns() if t.turn_id == inbound.turn_id]
        if record.status == status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{inbound.turn_id} never became {status}")


async def half_written_reply(bot: Bot, inbound: Inbound, text: str) -> str:
    """A reply stream a dead process opened and kept, as ``_reply`` keeps it."""
    started = await bot.client.chat_startStream(
        channel=inbound.channel,
        thread_ts=inbound.thread_ts,
        markdown_text=text,
        recipient_user_id=bot.slack.user_id,
        recipient_team_id=bot.slack.team_id,
    )
    key = SessionKey("bot", inbound.session_id)
    await bot.runtime.store.save_delivery(key, inbound.turn_id, {"reply": started["ts"]})
    return str(started["ts"])


async def test_a_request_parked_before_it_was_shown_is_shown_at_the_next_start(bot: Bot):
    inbound, ts = await start_unwatched(bot, "announce the launch")
    await settled(bot, inbound, "suspended")
    assert bot.slack.replies(bot.slack.channel_id, ts) == []  # the process died here

    assert await next_start(bot, inbound) == 1

    # as a process that never died shows it: the call's task line, then the request
    asking, approval = await bot.written_replies(ts, 2)
    assert [t["title"] for t in asking.tasks.values()] == ["announce: waiting for an answer"]
    assert approval.text == "Approval needed: Announce *the launch*?"
    # shown once: a second start finds it shown
    assert await bot.channel.resume_replies() == 0
    await bot.click("turn_approve", bot.slack.user_id, approval)
    assert (await bot.replies_in(ts, 3))[2] == "done: {'announced': True}"


async def test_a_reply_left_open_by_a_turn_that_ended_is_finished_at_the_next_start(bot: Bot):
    inbound, ts = await start_unwatched(bot, "good morning")
    await settled(bot, inbound, "completed")
    stale = await half_written_reply(bot, inbound, "you sa")

    assert await next_start(bot, inbound) == 1

    [answer] = await bot.written_replies(ts)
    assert (answer.ts, answer.text, answer.stream) == (stale, "you said: good morning", "stopped")
    # nothing more is owed to this thread
    await asyncio.sleep(0.1)
    assert await bot.runtime.store.deliveries("bot") == []
    assert await bot.channel.resume_replies() == 0


async def test_a_running_turn_takes_up_its_own_reply_message_and_no_other(bot: Bot):
    inbound, ts = await start_unwatched(bot, "think slowly about lunch")
    await asyncio.wait_for(bot.held.wait(), WAIT)
    stale = await half_written_reply(bot, inbound, "Thinking about lun")
    # a later message of the bot's in the same thread (a guess by position would take it)
    other = await bot.client.chat_postMessage(
        channel=inbound.channel, thread_ts=ts, text="(an earlier note)"
    )

    assert await next_start(bot, inbound) == 1
    bot.hold.set()

    said = await bot.written_replies(ts, 2)
    assert [(m.ts, m.text) for m in said] == [
        (stale, "you said: think slowly about lunch"),
        (other["ts"], "(an earlier note)"),
    ]


async def test_a_continuation_nobody_showed_is_shown_at_the_next_start(bot: Bot):
    bot.channel.close()  # the process that showed this thread is gone
    inbound, ts = await start_unwatched(bot, "announce the release")
    await settled(bot, inbound, "suspended")
    session = bot.runtime.session("bot", inbound.session_id)
    await session.resume(inbound.turn_id, "approve", True, by=bot.slack.user_id)
    await settled(bot, inbound, "completed")
    # it had shown the request, and kept where the continuation starts
    key = SessionKey("bot", inbound.session_id)
    await bot.runtime.store.save_delivery(key, inbound.turn_id, {"asked": "approve", "since": 2})
    assert bot.slack.replies(bot.slack.channel_id, ts) == []
    next_start = SlackChannel(bot.runtime, "bot", bot.client, bot_user_id=bot.slack.bot_user_id)

    try:
        assert await next_start.resume_replies() == 1

        [answer] = await bot.written_replies(ts, shown_by=next_start)
    finally:
        await next_start.drain(grace=1.0)
    assert answer.text == "done: {'announced': True}"


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "posted"])
async def test_a_reply_longer_than_a_message_goes_on_in_the_next_cut_at_a_paragraph(
    bot: Bot, streaming: bool
):
    if not streaming:
        bot.slack.disable(*STREAM_METHODS)
    paragraphs = [f"Paragraph {n}: " + "words " * 300 for n in range(12)]  # ~1,800 each
    text = "\n\n".join(paragraphs)
    ts = bot.slack.post_user_message(bot.slack.channel_id, f"<@U0BOT> {text}")

    await bot.deliver(bot.envelope("app_mention", f"<@U0BOT> {text}", ts))

    said = await bot.replies_in(ts, 2)
    assert len(said) == 2
    assert all(len(part) <= MAX_MESSAGE_CHARS for part in said)
    assert said[1].startswith("Paragraph ")  # cut between paragraphs, not inside one
    assert "\n\n".join(said) == f"you said: {text.strip()}"


async def test_a_kept_state_of_a_turn_a_reset_archived_is_let_go(bot: Bot):
    inbound, ts = await start_unwatched(bot, "good evening")
    await settled(bot, inbound, "completed")
    stale = await half_written_reply(bot, inbound, "you sa")
    await bot.runtime.session("bot", inbound.session_id).reset()

    assert await next_start(bot, inbound) == 1

    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if not await bot.runtime.store.deliveries("bot"):
            break
        await asyncio.sleep(0.01)
    assert await bot.runtime.store.deliveries("bot") == []
    assert [m.ts for m in bot.slack.replies(bot.slack.channel_id, ts)] == [stale]


async def test_a_click_before_the_request_was_kept_shows_the_continuation_once(
    bot: Bot, monkeypatch: pytest.MonkeyPatch
):
    store, clicked = bot.runtime.store, asyncio.Event()
    keep = store.save_delivery

    async def slow_disk(key: SessionKey, turn_id: str, state: JsonValue | None) -> None:
        if isinstance(state, dict) and "asked" in state:
            await clicked.wait()  # the buttons are up; keeping that they are is slow
        await keep(key, turn_id, state)

    monkeypatch.setattr(store, "save_delivery", slow_disk)
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> announce in two parts")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> announce in two parts", ts))
    approval = await approval_in(bot.slack, ts)

    await bot.click("turn_approve", bot.slack.user_id, approval)
    await asyncio.wait_for(bot.held.wait(), WAIT)  # the continuation is under way
    clicked.set()
    await asyncio.sleep(0.2)  # the late keeping of the request is done with
    inbound = read_event(bot.envelope("app_mention", "x", ts), bot_user_id=bot.slack.bot_user_id)
    assert isinstance(inbound, Inbound)
    kept = await store.load_delivery(SessionKey("bot", inbound.session_id), inbound.turn_id)
    assert isinstance(kept, dict)
    assert "reply" in kept  # what a restart must take up is the continuation's message
    bot.hold.set()

    said = await bot.replies_in(ts, 3)
    await asyncio.sleep(0.3)  # time for a second continuation, were there one
    assert said[-1] == "Part one. Part two."
    assert len(bot.slack.replies(bot.slack.channel_id, ts)) == 3
    decided = [c for c in bot.slack.calls_to("chat.update") if c.params.get("ts") == approval.ts]
    assert len(decided) == 1
    assert await store.deliveries("bot") == []  # all shown: nothing kept for the next start


async def test_a_reply_split_over_messages_is_rewritten_once_at_the_next_start(bot: Bot):
    paragraphs = [f"Paragraph {n}: " + "words " * 300 for n in range(12)]  # ~1,800 each
    text = "\n\n".join(paragraphs)
    inbound, ts = await start_unwatched(bot, text)
    await settled(bot, inbound, "completed")
    # the dead process had filled one message and was half way through the next
    head, _, rest = f"you said: {text}".partition("\n\nParagraph 6")
    first = await bot.client.chat_postMessage(
        channel=inbound.channel, thread_ts=ts, markdown_text=head
    )
    second = await half_written_reply(bot, inbound, "Paragraph 6" + rest[:100])
    key = SessionKey("bot", inbound.session_id)
    kept = {"reply": first["ts"], "more": [second], "since": 0}
    await bot.runtime.store.save_delivery(key, inbound.turn_id, kept)

    assert await next_start(bot, inbound) == 1

    said = await bot.written_replies(ts, 2)
    await asyncio.sleep(0.2)  # time for a third message, were there one
    said = bot.slack.replies(bot.slack.channel_id, ts)
    assert said[0].ts == first["ts"]  # the first message is kept, and rewritten
    assert second not in [m.ts for m in said]  # what followed it is written anew
    assert "\n\n".join(m.text for m in said) == f"you said: {text.strip()}"


async def test_a_message_another_replica_took_first_leaves_its_reply_state_as_it_is(bot: Bot):
    # Slack's retry reaches a replica whose copy of the thread is behind: the reply the
    # first replica is writing (its ts kept) must not be forgotten under it
    thread = Thread(bot.slack.channel_id, "1700000000.000100", "slack:T:C:1700000000.000100")
    renderer = bot.channel._renderer
    assert await renderer.intend(thread, "T:C:1700000000.000100")
    writing = DeliveryState(since=0, reply="1700000000.000200")
    await renderer.deliveries.keep(thread.session_id, "T:C:1700000000.000100", writing)

    assert not await renderer.intend(thread, "T:C:1700000000.000100")
    assert await renderer.deliveries.load(thread.session_id, "T:C:1700000000.000100") == writing
