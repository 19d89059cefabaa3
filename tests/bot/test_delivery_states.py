"""The delivery states the Slack channel keeps, flow by flow, as the store receives them.

A delivery state is what the channel stores per turn so that a process started
after a crash can finish showing it: the reply messages being written, the
request shown, where a proactive turn went. It is persisted, so its keys and
values must not change from one version of the bot to the next.

``delivery_states.json`` holds the states each flow below stored when it ran on
the code before the channel's state was typed (captured once; never regenerate
it from newer code, or it stops proving anything). The tests run the same flows
today and check that they store states of the same shapes, and that every
state, captured then or stored now, reads back as `DeliveryState` and is
written again unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent import JsonValue, SessionKey, Trigger, receive
from bot.slack.channel.delivery import DeliveryState
from tests.bot.slack_harness import Bot, approval_in

CAPTURED = Path(__file__).with_name("delivery_states.json")
TS_KEYS = ("reply", "shown", "thread_ts")
"""The keys whose values are Slack timestamps, which differ from one run to the next."""
SESSION = "slack:T0TEAM:C0GENERAL:schedule:daily"


def recording(bot: Bot, monkeypatch: pytest.MonkeyPatch) -> list[JsonValue]:
    """Every state the channel asks the store to keep (or to claim) from now on."""
    store, states = bot.runtime.store, []
    save, claim = store.save_delivery, store.claim_delivery

    async def saving(key: SessionKey, turn_id: str, state: JsonValue | None) -> None:
        if state is not None:
            states.append(state)
        await save(key, turn_id, state)

    async def claiming(key: SessionKey, turn_id: str, state: JsonValue) -> bool:
        states.append(state)
        return await claim(key, turn_id, state)

    monkeypatch.setattr(store, "save_delivery", saving)
    monkeypatch.setattr(store, "claim_delivery", claiming)
    return states


def shape(state: JsonValue) -> str:
    """``state`` with its Slack timestamps blanked, as a sortable string."""
    assert isinstance(state, dict)
    blanked: dict[str, Any] = dict(state)
    for key in TS_KEYS:
        if isinstance(blanked.get(key), str):
            blanked[key] = "<ts>"
    if isinstance(blanked.get("more"), list):
        blanked["more"] = ["<ts>" for _ in blanked["more"]]
    return json.dumps(blanked, sort_keys=True)


async def a_streamed_reply(bot: Bot) -> None:
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> when is the deploy?")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> when is the deploy?", ts))
    await bot.written_replies(ts)


async def a_reply_over_two_messages(bot: Bot) -> None:
    text = "\n\n".join(f"Paragraph {n}: " + "words " * 300 for n in range(12))
    ts = bot.slack.post_user_message(bot.slack.channel_id, f"<@U0BOT> {text}")
    await bot.deliver(bot.envelope("app_mention", f"<@U0BOT> {text}", ts))
    await bot.written_replies(ts, 2)


async def an_approval_shown_and_decided(bot: Bot) -> None:
    ts = bot.slack.post_user_message(bot.slack.channel_id, "<@U0BOT> announce the deploy")
    await bot.deliver(bot.envelope("app_mention", "<@U0BOT> announce the deploy", ts))
    approval = await approval_in(bot.slack, ts)
    await bot.click("turn_approve", bot.slack.user_id, approval)
    await bot.written_replies(ts, 3)


async def a_proactive_delivery(bot: Bot) -> None:
    await summon(bot, "good morning, team", "C0GENERAL")


async def a_proactive_request(bot: Bot) -> None:
    await summon(bot, "announce the standup", "C0GENERAL")
    [approval] = [m for m in bot.slack.messages(bot.slack.channel_id) if m.thread_ts is None]
    await bot.click("turn_approve", bot.slack.user_id, approval)
    await bot.written_replies(approval.ts)


async def a_refused_delivery(bot: Bot) -> None:
    with pytest.raises(Exception, match="channel_not_found"):
        await summon(bot, "good morning, team", "C0GONE")


async def summon(bot: Bot, seed: str, channel: str) -> None:
    await receive(
        bot.channel,
        bot.runtime,
        seed=seed,
        target={"channel": channel},
        trigger=Trigger(by="schedule:daily"),
        session=SESSION.replace("C0GENERAL", channel),
        turn_id="schedule:daily:2026-12-01T09:00",
    )


FLOWS: dict[str, Callable[[Bot], Awaitable[None]]] = {
    "streamed reply": a_streamed_reply,
    "reply over two messages": a_reply_over_two_messages,
    "approval shown and decided": an_approval_shown_and_decided,
    "proactive delivery": a_proactive_delivery,
    "proactive request": a_proactive_request,
    "refused delivery": a_refused_delivery,
}


def captured() -> dict[str, list[JsonValue]]:
    found: dict[str, list[JsonValue]] = json.loads(CAPTURED.read_text())
    return found


@pytest.mark.parametrize("flow", sorted(FLOWS))
async def test_each_flow_keeps_the_states_it_kept_before(
    bot: Bot, monkeypatch: pytest.MonkeyPatch, flow: str
):
    states = recording(bot, monkeypatch)

    await FLOWS[flow](bot)

    before = {shape(s) for s in captured()[flow]}
    opening = [s for s in states if isinstance(s, dict) and s.get("opening") is True]
    now = {shape(s) for s in states if s not in opening} - {INTENT}
    assert sorted(now) == sorted(before)
    # Kept while a stream opens, before its ts is: without its mark, a state the older
    # bot kept, or one of those before its first message (which it read as owed).
    unopened = {shape(_without(s, "reply", "more")) for s in captured()[flow]}
    unmarked = {shape(_without(s, "opening")) for s in opening}
    assert unmarked <= before | unopened | {INTENT}, unmarked - before


def _without(state: JsonValue, *keys: str) -> dict[str, JsonValue]:
    assert isinstance(state, dict)
    return {k: v for k, v in state.items() if k not in keys}


INTENT = shape({"since": 0})
"""Kept at admission, before the turn starts (issue 19): a shape the older bot never wrote,
which it reads as a reply still owed from the first message of the turn."""


PLANTED: list[JsonValue] = [
    {"reply": "1700000000.000200"},
    {"asked": "approve", "since": 2},
    {"reply": "1700000000.000200", "more": ["1700000000.000300"], "since": 0},
    {"since": 0, "opening": True},
    {"reply": "1700000000.000200", "more": [], "since": 0, "opening": True},
]
"""States as the delivery tests plant them: what a process that died early had kept."""


@pytest.mark.parametrize(
    "state",
    [s for flow in sorted(captured()) for s in captured()[flow]] + PLANTED,
    ids=lambda state: ",".join(sorted(state)) if isinstance(state, dict) else repr(state),
)
def test_a_kept_state_reads_back_and_is_written_again_unchanged(state: JsonValue):
    assert DeliveryState.from_json(state).to_json() == state


@pytest.mark.parametrize("flow", sorted(FLOWS))
async def test_what_each_flow_keeps_now_reads_back_unchanged(
    bot: Bot, monkeypatch: pytest.MonkeyPatch, flow: str
):
    states = recording(bot, monkeypatch)

    await FLOWS[flow](bot)

    assert states
    assert [DeliveryState.from_json(s).to_json() for s in states] == states


def test_nothing_kept_reads_as_the_empty_state():
    assert DeliveryState.from_json(None) == DeliveryState()
    assert DeliveryState().to_json() == {}
