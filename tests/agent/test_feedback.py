"""Feedback on a turn's reply: kept for turns that answered, refused for any other."""

from __future__ import annotations

import pytest

from agent import (
    Agent,
    AgentRuntime,
    ConflictError,
    Feedback,
    TurnFailedError,
    UnknownTurnError,
    rate_turn,
)
from agent.core.records import SessionKey
from agent.testing import ScriptedModel, reply

KEY = SessionKey("a", "s1")


def echo(request):
    text = request.messages[-1].text
    if text == "explode":
        raise RuntimeError("the model is down")
    return reply(f"re: {text}")


def runtime_on(store, now: list[float]) -> AgentRuntime:
    return AgentRuntime(store, Agent(name="a", model=ScriptedModel(echo)), clock=lambda: now[0])


async def test_a_rating_is_kept_with_who_and_when_and_a_second_one_replaces_it(store):
    now = [100.0]
    async with runtime_on(store, now) as runtime:
        session = runtime.session("a", "s1")
        done = await session.turn("hello", turn_id="t1")
        assert done.text == "re: hello"

        first = await rate_turn(session, "t1", by="U1", rating="good")
        await rate_turn(session, "t1", by="U2", rating="good", comment="   ")
        now[0] = 160.0
        second = await rate_turn(session, "t1", by="U1", rating="bad", comment=" Off topic. ")

    assert first == Feedback(key=KEY, turn_id="t1", by="U1", rating="good", at=100.0)
    assert second == Feedback(
        key=KEY, turn_id="t1", by="U1", rating="bad", comment="Off topic.", at=160.0
    )
    assert await store.feedback_since(0.0) == [
        second,
        Feedback(key=KEY, turn_id="t1", by="U2", rating="good", comment=None, at=100.0),
    ]


async def test_a_turn_the_session_never_had_is_refused_and_nothing_is_kept(store):
    async with runtime_on(store, [1.0]) as runtime:
        session = runtime.session("a", "s1")
        await session.turn("hello", turn_id="t1")
        with pytest.raises(UnknownTurnError):
            await rate_turn(session, "t-forged", by="U1", rating="good")
        with pytest.raises(UnknownTurnError):  # the right turn, in a session it is not in
            await rate_turn(runtime.session("a", "s2"), "t1", by="U1", rating="good")

    assert await store.feedback_since(0.0) == []
    assert not await store.has_session(SessionKey("a", "s2"))


async def test_a_turn_that_gave_no_answer_cannot_be_rated(store):
    async with runtime_on(store, [1.0]) as runtime:
        session = runtime.session("a", "s1")
        with pytest.raises(TurnFailedError):
            await session.turn("explode", turn_id="t1")
        with pytest.raises(ConflictError, match="failed"):
            await rate_turn(session, "t1", by="U1", rating="bad")

    assert await store.feedback_since(0.0) == []


async def test_a_turn_a_reset_archived_can_still_be_rated(store):
    async with runtime_on(store, [5.0]) as runtime:
        session = runtime.session("a", "s1")
        await session.turn("hello", turn_id="t1")
        await session.reset()
        assert await session.turns() == []

        kept = await rate_turn(session, "t1", by="U1", rating="good")

    assert await store.feedback_since(0.0) == [kept]


async def test_what_a_rating_cannot_be(store):
    async with runtime_on(store, [1.0]) as runtime:
        session = runtime.session("a", "s1")
        await session.turn("hello", turn_id="t1")
        with pytest.raises(ValueError, match="rating"):
            await rate_turn(session, "t1", by="U1", rating="meh")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="2000"):
            await rate_turn(session, "t1", by="U1", rating="bad", comment="x" * 2001)
        with pytest.raises(ValueError, match="who"):
            await rate_turn(session, "t1", by="", rating="bad")
        await rate_turn(session, "t1", by="U1", rating="bad", comment="x" * 2000)

    [kept] = await store.feedback_since(0.0)
    assert kept.comment == "x" * 2000
