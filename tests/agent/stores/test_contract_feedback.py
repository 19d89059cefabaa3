"""The feedback contract, on every store: one row per person and turn, newest first."""

from __future__ import annotations

from agent import Feedback, Rating, SQLiteStore
from agent.core.records import SessionKey
from tests.agent.stores.rows import KEY, OTHER, Store


def said(
    by: str,
    rating: Rating = "good",
    *,
    at: float,
    turn_id: str = "t1",
    key: SessionKey = KEY,
    comment: str | None = None,
) -> Feedback:
    return Feedback(
        key=key,
        turn_id=turn_id,
        by=by,
        rating=rating,
        comment=comment,
        at=at,
    )


async def test_feedback_is_listed_newest_first_from_a_time_on(store: Store):
    await store.save_feedback(said("U1", at=10.0))
    await store.save_feedback(said("U2", "bad", at=30.0, comment="Wrong channel."))
    await store.save_feedback(said("U1", at=20.0, key=OTHER))

    assert await store.feedback_since(0.0) == [
        said("U2", "bad", at=30.0, comment="Wrong channel."),
        said("U1", at=20.0, key=OTHER),
        said("U1", at=10.0),
    ]
    assert await store.feedback_since(20.0) == [  # at or after
        said("U2", "bad", at=30.0, comment="Wrong channel."),
        said("U1", at=20.0, key=OTHER),
    ]
    assert await store.feedback_since(31.0) == []


async def test_a_second_word_from_the_same_person_on_the_same_turn_replaces_theirs(store: Store):
    await store.save_feedback(said("U1", "good", at=10.0))
    await store.save_feedback(said("U2", "good", at=11.0))
    await store.save_feedback(said("U1", "bad", at=12.0, comment="It missed the point."))
    await store.save_feedback(said("U1", "good", at=13.0, turn_id="t2"))

    assert await store.feedback_since(0.0) == [
        said("U1", "good", at=13.0, turn_id="t2"),  # another turn: a row of its own
        said("U1", "bad", at=12.0, comment="It missed the point."),
        said("U2", "good", at=11.0),
    ]


async def test_feedback_is_kept_per_agent_and_makes_no_session(store: Store):
    other_agent = SessionKey("b", KEY.session_id)
    await store.save_feedback(said("U1", at=1.0))
    await store.save_feedback(said("U1", at=2.0, key=other_agent))

    assert await store.feedback_since(0.0, agent="a") == [said("U1", at=1.0)]
    assert await store.feedback_since(0.0, agent="b") == [said("U1", at=2.0, key=other_agent)]
    assert await store.feedback_since(0.0, agent="c") == []
    assert not await store.has_session(KEY)
    assert await store.list_sessions("a") == []


async def test_ties_are_listed_alike_on_every_store(store: Store):
    for by in ("U2", "U10", "u1", "U1"):
        await store.save_feedback(said(by, at=5.0))

    assert [f.by for f in await store.feedback_since(0.0)] == ["U1", "U10", "U2", "u1"]


async def test_sqlite_keeps_feedback_across_a_reopen(tmp_path):
    path = tmp_path / "kept.db"
    async with await SQLiteStore.open(path) as store:
        await store.save_feedback(said("U1", "bad", at=1.5, comment="Too long."))
    async with await SQLiteStore.open(path) as store:
        assert await store.feedback_since(0.0) == [said("U1", "bad", at=1.5, comment="Too long.")]
        assert await store.dump_table("feedback") == [
            ("a", "s1", "t1", "U1", "bad", "Too long.", 1.5)
        ]
