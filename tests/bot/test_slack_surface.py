"""The agent surface against the fake Slack: greeting, prompts, context, sessions, Slack's Stop.

Payload shapes follow docs.slack.dev's own examples of each event
(app_home_opened, assistant_thread_started, assistant_thread_context_changed,
agent_session_stopped, and ``app_context`` on message.im).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent import Cancelled
from bot.slack import agent_session
from bot.slack.channel.stopping import STOP_EVENT
from bot.slack.thread_context import GREETING_EVENT
from bot.surface_config import AgentSurface
from bot.texts import ONLY_PARTICIPANTS_STOP, stopped_by
from tests.bot.slack_harness import WAIT, Bot

DM = "D0ALICE"
DEFAULTS = AgentSurface()


def open_dm(bot: Bot) -> None:
    bot.slack.add_channel(DM, is_im=True, members=[bot.slack.user_id])


def event(bot: Bot, inner: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": bot.slack.team_id,
        "api_app_id": bot.slack.app_id,
        "event_id": f"Ev{name}",
        "event_time": int(time.time()),
        "event": inner,
    }


def thread_event(bot: Bot, kind: str, thread_ts: str, seen: str | None, name: str) -> Any:
    thread: dict[str, Any] = {
        "user_id": bot.slack.user_id,
        "channel_id": DM,
        "thread_ts": thread_ts,
    }
    if seen is not None:
        thread["context"] = {"channel_id": seen, "team_id": bot.slack.team_id}
    return event(bot, {"type": kind, "assistant_thread": thread, "event_ts": thread_ts}, name)


async def until(what: str, done: Any) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def greetings(bot: Bot, thread_ts: str) -> list[Any]:
    return [
        m
        for m in bot.slack.replies(DM, thread_ts)
        if m.metadata and m.metadata.get("event_type") == GREETING_EVENT
    ]


# -- the Messages tab and assistant threads --------------------------------------------


async def test_opening_the_messages_tab_pins_the_greeting_and_prompts_to_the_dm(bot: Bot):
    open_dm(bot)
    opened = {
        "type": "app_home_opened",
        "user": bot.slack.user_id,
        "channel": DM,
        "tab": "messages",
    }

    assert await bot.deliver(event(bot, opened, "home-messages")) == 200

    surface = bot.slack.agent_surface
    await until("the prompts are set", lambda: (DM, None) in surface.prompts)
    # set for the DM itself: under agent_view a call naming a thread silently does nothing
    assert surface.prompts[(DM, None)] == {
        "title": DEFAULTS.greeting,
        "prompts": DEFAULTS.prompt_payload(),
    }
    [call] = bot.slack.calls_to("assistant.threads.setSuggestedPrompts")
    assert "thread_ts" not in call.params


async def test_a_started_assistant_thread_is_greeted_once_and_offered_the_prompts(bot: Bot):
    open_dm(bot)
    bot.slack.agent_surface.agent_view = False  # an app still on assistant_view
    root = bot.slack.post_user_message(DM, "")  # the thread Slack opens

    for name in ("started", "started-again"):  # a second delivery of the same event
        body = thread_event(bot, "assistant_thread_started", root, "C0GENERAL", name)
        assert await bot.deliver(body) == 200
        await until("the prompts are set", lambda: (DM, root) in bot.slack.agent_surface.prompts)
    await until("the second delivery is done", lambda: bot.channel.in_flight == 0)

    [greeting] = greetings(bot, root)
    assert greeting.text == DEFAULTS.greeting
    assert greeting.metadata == {
        "event_type": GREETING_EVENT,
        "event_payload": {"context_channel": "C0GENERAL"},
    }
    assert bot.slack.agent_surface.prompts[(DM, root)]["prompts"] == DEFAULTS.prompt_payload()


async def test_the_channel_the_person_has_open_is_read_channels_default(bot: Bot):
    open_dm(bot)
    bot.slack.add_channel("C0RANDOM", name="random", members=[bot.slack.user_id])
    bot.slack.post_user_message("C0GENERAL", "lunch is at noon")
    bot.slack.post_user_message("C0RANDOM", "the launch moved to Friday")
    root = bot.slack.post_user_message(DM, "")
    await bot.deliver(thread_event(bot, "assistant_thread_started", root, "C0GENERAL", "s"))
    await until("greeted", lambda: greetings(bot, root))
    changed = thread_event(bot, "assistant_thread_context_changed", root, "C0RANDOM", "c")
    await bot.deliver(changed)
    await until(
        "the new context is kept",
        lambda: greetings(bot, root)[0].metadata["event_payload"]["context_channel"] == "C0RANDOM",
    )

    text = "read the channel I have open"
    ts = bot.slack.post_user_message(DM, text, thread_ts=root)
    await bot.deliver(
        bot.envelope("message", text, ts, channel=DM, channel_type="im", thread_ts=root)
    )

    said = [m.text for m in await bot.written_replies(root, 2, channel=DM)]
    assert "the launch moved to Friday" in said[-1]
    assert "lunch is at noon" not in said[-1]


async def test_under_agent_view_the_message_carries_the_channel_in_view(bot: Bot):
    open_dm(bot)
    bot.slack.post_user_message("C0GENERAL", "lunch is at noon")
    text = "read the channel I have open"
    ts = bot.slack.post_user_message(DM, text)
    context = {"entities": [{"type": "slack#/types/channel_id", "value": "C0GENERAL"}]}

    await bot.deliver(
        bot.envelope("message", text, ts, channel=DM, channel_type="im", app_context=context)
    )

    [said] = await bot.written_replies(ts, channel=DM)
    assert "lunch is at noon" in said.text


async def test_with_no_channel_in_view_the_model_is_told_to_ask(bot: Bot):
    open_dm(bot)
    text = "read the channel I have open"
    ts = bot.slack.post_user_message(DM, text)

    await bot.deliver(bot.envelope("message", text, ts, channel=DM, channel_type="im"))

    [said] = await bot.written_replies(ts, channel=DM)
    assert "no channel is open beside this conversation: ask which one to read" in said.text


# -- the reply's status, title and session ---------------------------------------------


async def test_a_reply_rotates_loading_messages_then_names_the_tool_at_work(bot: Bot):
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> read #general")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> read #general", ts))
    await bot.replies_in(ts)

    shown = [(s.status, s.loading_messages) for s in bot.slack.statuses if s.thread_ts == ts]
    assert shown[0] == ("is thinking…", DEFAULTS.loading_messages)
    assert ("is reading #general…", ()) in shown
    assert shown[-1] == ("", ())  # cleared as the reply ends


async def test_a_thread_is_an_agent_session_titled_by_its_question_with_slacks_stop(bot: Bot):
    question = "<@U0BOT> what did #general decide about the launch?"
    ts = bot.slack.post_user_message(bot.slack.channel_id, question)
    await bot.deliver(bot.envelope("app_mention", question, ts))
    await bot.replies_in(ts)
    await until("the reply is written", lambda: bot.channel.in_flight == 0)

    session = bot.slack.agent_surface.session(bot.slack.channel_id, ts)
    assert session is not None
    assert session.title == "what did #general decide about the launch?"
    assert session.initiator == bot.slack.user_id
    assert session.history == ["processing", "active"]
    # Slack shows its own Stop on the session: the bot posts no Stop message of its own
    posted = bot.slack.calls_to("chat.postMessage")
    assert not [c for c in posted if STOP_EVENT in str(c.params.get("metadata"))]


async def test_slacks_own_stop_cancels_the_turn_for_its_asker_and_not_for_a_stranger(bot: Bot):
    bot.slack.add_user("U0BEN", name="ben")
    bot.slack.join(bot.slack.channel_id, "U0BEN")
    question = "<@U0BOT> think slowly"
    ts = bot.slack.post_user_message(bot.slack.channel_id, question)
    await bot.deliver(bot.envelope("app_mention", question, ts))
    await asyncio.wait_for(bot.held.wait(), WAIT)

    def stopped(user: str, name: str) -> dict[str, Any]:
        inner = {
            "type": "agent_session_stopped",
            "channel": bot.slack.channel_id,
            "thread_ts": ts,
            "user": user,
            "streaming_message_ts": [],
            "event_ts": "1783536983.783769",
        }
        return event(bot, inner, name)

    assert await bot.deliver(stopped("U0BEN", "stop-ben")) == 200
    await until("ben is told", lambda: [e for e in bot.slack.ephemerals if e.user == "U0BEN"])
    assert [e.text for e in bot.slack.ephemerals if e.user == "U0BEN"] == [ONLY_PARTICIPANTS_STOP]
    turn_id = f"{bot.slack.team_id}:{bot.slack.channel_id}:{ts}"
    session = bot.runtime.session("bot", f"slack:{bot.slack.team_id}:{bot.slack.channel_id}:{ts}")
    assert (await session.turns())[0].is_unfinished

    assert await bot.deliver(stopped(bot.slack.user_id, "stop-alice")) == 200

    result = await asyncio.wait_for(session.result(turn_id), WAIT)
    assert isinstance(result, Cancelled)
    [said] = await bot.replies_in(ts)
    assert said.endswith(stopped_by(bot.slack.user_id))
    state = bot.slack.agent_surface.session(bot.slack.channel_id, ts)
    assert state is not None
    assert state.history[-1] == "active"  # Slack does not move it itself


async def test_a_session_status_slack_is_slow_to_take_never_holds_the_reply_back(
    bot: Bot, monkeypatch: pytest.MonkeyPatch
):
    # a 429 would have slack_sdk wait out Retry-After: the reply goes on without it
    monkeypatch.setattr(agent_session, "SET_WITHIN", 0.2)
    bot.slack.slow_down("agents.sessions.setStatus", 30.0)
    question = "<@U0BOT> hello"
    ts = bot.slack.post_user_message(bot.slack.channel_id, question)

    await bot.deliver(bot.envelope("app_mention", question, ts))

    assert await bot.replies_in(ts) == ["you said: hello"]
    # Slack's Stop was not known to be up, so the bot showed its own while it worked
    posted = bot.slack.calls_to("chat.postMessage")
    assert [c for c in posted if STOP_EVENT in str(c.params.get("metadata"))]
