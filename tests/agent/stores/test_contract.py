"""The `SessionStore` contract, run against every store in `conftest.STORES`.

Each test states one rule of the Protocol and holds on every store alike; a
rule one store keeps in its own way (the SQLite schema, the transactional
handle) is tested beside that store instead.
"""

from __future__ import annotations

from agent import (
    TurnInput,
    UserMessage,
)
from agent.core.records import Commit, SessionKey, StoredMessage, StoredSession, StoredStep
from agent.core.turns import TurnRecord, TurnStatus
from tests.agent.stores.conftest import Store

KEY = SessionKey("a", "s1")
OTHER = SessionKey("a", "s2")


def message(i: int, turn_id: str = "t1") -> StoredMessage:
    return StoredMessage(i, UserMessage(turn_id=turn_id, text=f"m{i}"))


def record(turn_id: str, seq: int, status: TurnStatus = "queued", text: str = "x") -> TurnRecord:
    return TurnRecord(turn_id=turn_id, seq=seq, status=status, input=TurnInput(text=text))


def step(step_id: str, turn_id: str = "t1", result: object = None) -> StoredStep:
    return StoredStep(step_id, turn_id, {"of": step_id} if result is None else result)


async def snapshot(store: Store, key: SessionKey = KEY) -> tuple[StoredSession, dict[str, object]]:
    return await store.load(key), await store.load_steps(key, "t1")


async def a_session_of_two_turns(store: Store) -> None:
    await store.commit(
        KEY,
        Commit(
            messages=(message(0), message(1)),
            steps=(step("model:1"),),
            turns=(record("t1", 1, "completed", text="first"),),
            status="idle",
        ),
    )
    await store.commit(
        KEY,
        Commit(
            messages=(message(2, "t2"),),
            steps=(step("model:3", "t2"),),
            turns=(record("t2", 2, "cancelled"),),
            cancels=(("t2", "reset"),),
        ),
    )


# -- which sessions exist: has_session and list_sessions agree -------------------


async def test_has_session_is_true_once_a_turn_was_admitted(store):
    assert not await store.has_session(KEY)
    await store.load(KEY)  # reading a session is not taking part in it
    assert not await store.has_session(KEY)

    record = TurnRecord(turn_id="t1", seq=1, status="running", input=TurnInput(text="hi"))
    await store.commit(KEY, Commit(turns=(record,), status="running"))

    assert await store.has_session(KEY)
    assert not await store.has_session(SessionKey("other agent", KEY.session_id))


async def test_reads_create_no_session(store: Store):
    assert await store.load(KEY) == StoredSession()
    assert await store.load_steps(KEY, "t1") == {}
    assert await store.load_archive(KEY, 0) is None
    assert await store.load_delivery(KEY, "t1") is None
    assert await store.read_events(KEY, after=0, limit=10) == []
    bounds = await store.event_bounds(KEY)
    assert (bounds.first, bounds.last) == (1, 0)

    assert not await store.has_session(KEY)
    assert await store.list_sessions("a") == []


async def test_a_delivery_an_event_or_a_step_alone_makes_no_session(store: Store):
    # what the Slack channel asks of a thread reply: did the bot ever take part here?
    await store.save_delivery(KEY, "t1", {"reply": "1.0"})
    await store.claim_delivery(OTHER, "t1", {"channel": "C1"})
    await store.append_events(SessionKey("a", "s3"), [{"type": "turn.started"}], at=1.0)
    await store.commit(SessionKey("a", "s4"), Commit(steps=(step("model:1"),)))

    for session_id in ("s1", "s2", "s3", "s4"):
        assert not await store.has_session(SessionKey("a", session_id)), session_id
    assert await store.list_sessions("a") == []


async def test_a_session_whose_turns_a_reset_archived_still_exists(store: Store):
    await a_session_of_two_turns(store)
    await store.commit(KEY, Commit(reset_through=2, archive=True))

    assert await store.has_session(KEY)
    [listed] = await store.list_sessions("a")
    assert (listed.session_id, listed.status, listed.title) == ("s1", "new", None)


async def test_resetting_a_session_that_never_had_a_turn_makes_none(store: Store):
    await store.commit(KEY, Commit(reset_through=0, archive=True))

    assert (await store.load(KEY)).generation == 1
    assert not await store.has_session(KEY)
    assert await store.list_sessions("a") == []


async def test_sessions_are_listed_newest_event_first_with_their_first_words(store: Store):
    await store.commit(KEY, Commit(turns=(record("t2", 2, text="later"),)))
    await store.commit(KEY, Commit(turns=(record("t1", 1, text="first"),), status="running"))
    await store.commit(OTHER, Commit(turns=(record("u1", 1, text="other"),), status="idle"))
    for quiet in ("s0", "s9"):  # no events: after every session with one, by id descending
        await store.commit(SessionKey("a", quiet), Commit(turns=(record("q", 1, text=quiet),)))
    await store.commit(SessionKey("a", "x:1"), Commit(turns=(record("x", 1),)))
    await store.commit(SessionKey("b", "s1"), Commit(turns=(record("y", 1),)))
    await store.append_events(KEY, [{"n": 1}, {"n": 2}], at=20.0)
    await store.append_events(OTHER, [{"n": 1}], at=30.0)

    listed = await store.list_sessions("a", prefix="s")
    assert [(s.session_id, s.status, s.title, s.last_event, s.updated_at) for s in listed] == [
        ("s2", "idle", "other", 1, 30.0),
        ("s1", "running", "first", 2, 20.0),
        ("s9", "new", "s9", 0, None),
        ("s0", "new", "s0", 0, None),
    ]
    assert [s.session_id for s in await store.list_sessions("a", prefix="x:")] == ["x:1"]
    assert [s.session_id for s in await store.list_sessions("b")] == ["s1"]

    await store.prune_events(before=25.0)  # the newest kept event dates a session
    [s1] = [s for s in await store.list_sessions("a") if s.session_id == "s1"]
    assert (s1.last_event, s1.updated_at) == (2, None)
