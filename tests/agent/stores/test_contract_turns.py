"""The `SessionStore` contract for a session's turns, run against every store.

Commits (all or nothing), steps, turn records, cancel requests, resets and the
archive. The stores are those of `conftest.STORES`; a rule one store keeps in
its own way (the SQLite schema, the transactional handle) is tested beside that
store instead, in ``tests/agent/test_stores.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent import LeaseLostError, StoreError, TurnInput
from agent.core.records import Commit, SessionKey, StoredSession, StoredStep
from agent.core.turns import TurnRecord, TurnStatus
from agent.errors import StoreConflictError
from tests.agent.stores.rows import (
    KEY,
    OTHER,
    Store,
    a_session_of_two_turns,
    message,
    record,
    step,
)


async def snapshot(store: Store, key: SessionKey = KEY) -> tuple[StoredSession, dict[str, object]]:
    return await store.load(key), await store.load_steps(key, "t1")


# -- commits -------------------------------------------------------------------


async def test_a_commit_writes_messages_steps_turns_and_status_together(store: Store):
    opening = record("t1", 1, "running")
    await store.commit(
        KEY,
        Commit(
            messages=(message(0),), steps=(step("model:1"),), turns=(opening,), status="running"
        ),
    )

    loaded = await store.load(KEY)
    assert loaded.transcript == [message(0).message]
    assert loaded.turns == {"t1": opening}
    assert loaded.status == "running"
    assert await store.load_steps(KEY, "t1") == {"model:1": {"of": "model:1"}}
    assert await store.load_steps(KEY, "t2") == {}
    assert await store.load(OTHER) == StoredSession()


async def test_the_transcript_reads_back_in_index_order(store: Store):
    await store.commit(KEY, Commit(messages=(message(1),)))
    await store.commit(KEY, Commit(messages=(message(0), message(2))))

    assert (await store.load(KEY)).transcript == [message(i).message for i in range(3)]


async def test_turns_load_in_admission_order_and_upsert_by_id(store: Store):
    await store.commit(KEY, Commit(turns=(record("t2", 2),)))
    await store.commit(KEY, Commit(turns=(record("t1", 1),)))
    await store.commit(KEY, Commit(turns=(record("t2", 2, "running"),)))

    turns = (await store.load(KEY)).turns
    assert list(turns) == ["t1", "t2"]
    assert turns["t2"].status == "running"


async def test_a_commit_is_all_or_nothing(store):
    await store.commit(KEY, Commit(steps=(StoredStep("model:1", "t1", {}),)))

    clash = Commit(messages=(message(0),), steps=(StoredStep("model:1", "t1", {}),))
    with pytest.raises(StoreError):
        await store.commit(KEY, clash)

    assert (await store.load(KEY)).transcript == []


REFUSED: dict[str, tuple[Commit, type[Exception], str | None]] = {
    "holder fence": (Commit(holder="a#1"), LeaseLostError, "another process took this session on"),
    "expected status moved on": (
        Commit(expect=(("t1", "suspended"),)),
        StoreConflictError,
        "turn t1 is no longer suspended",
    ),
    "expected turn missing": (
        Commit(expect=(("t9", "queued"),)),
        StoreConflictError,
        "turn t9 is no longer queued",
    ),
    "archive with no reset": (Commit(archive=True), StoreError, "no reset is pending"),
    # SQLite refuses these two by its keys, in its own words
    "taken transcript index": (Commit(messages=(message(0),)), StoreError, None),
    "taken step": (Commit(steps=(step("model:1"),)), StoreError, None),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_a_refused_commit_writes_nothing_at_all(store: Store, case: str):
    await store.take_lease(KEY, "b#1", now=100.0, until=130.0)
    await store.commit(
        KEY,
        Commit(messages=(message(0),), steps=(step("model:1"),), turns=(record("t1", 1),)),
    )
    before = await snapshot(store)
    refusal, error, words = REFUSED[case]
    # everything else a commit can write rides along, and must not land either
    clash = replace(
        refusal,
        messages=(*refusal.messages, message(1)),
        steps=(*refusal.steps, step("tool:1:c1")),
        turns=(record("t1", 1, "running"), record("t2", 2)),
        status=refusal.status or "running",
        cancels=(("t1", "requested"),),
        reset_through=None if refusal.archive else 1,
    )

    with pytest.raises(error, match=words):
        await store.commit(KEY, clash)
    with pytest.raises(error, match=words):
        await store.commit_with(KEY, lambda handle: "done", lambda outcome: clash)

    assert await snapshot(store) == before
    assert await store.pending_resets() == []


async def test_a_refused_first_commit_leaves_no_session(store: Store):
    refused = Commit(turns=(record("t1", 1),), expect=(("t0", "queued"),))
    with pytest.raises(StoreConflictError):
        await store.commit(KEY, refused)

    assert not await store.has_session(KEY)
    assert await store.list_sessions("a") == []


async def test_a_commit_whose_expected_statuses_hold_is_written(store: Store):
    await store.commit(KEY, Commit(turns=(record("t1", 1, "suspended"),)))
    resumed = record("t1", 1, "queued")
    await store.commit(KEY, Commit(turns=(resumed,), expect=(("t1", "suspended"),)))

    assert (await store.load(KEY)).turns["t1"] == resumed


async def test_a_commit_with_no_holder_ignores_the_lease(store: Store):
    await store.take_lease(KEY, "b#1", now=100.0, until=130.0)
    await store.commit(KEY, Commit(turns=(record("t1", 1),)))

    assert list((await store.load(KEY)).turns) == ["t1"]


async def test_commit_with_records_the_outcome_of_the_work(store: Store):
    seen: list[object] = []

    def work(handle: object) -> str:
        return "made"

    def record_it(outcome: object) -> Commit:
        seen.append(outcome)
        return Commit(messages=(message(0),))

    written = await store.commit_with(KEY, work, record_it)

    assert seen == ["made"]
    assert written == Commit(messages=(message(0),))
    assert (await store.load(KEY)).transcript == [message(0).message]


async def test_commit_with_hands_the_error_of_failed_work_to_record(store: Store):
    def work(handle: object) -> str:
        raise KeyError("gone")

    def record_it(outcome: object) -> Commit:
        assert isinstance(outcome, KeyError)
        return Commit(steps=(step("tool:1:c1", result={"error": "gone"}),))

    await store.commit_with(KEY, work, record_it)

    assert await store.load_steps(KEY, "t1") == {"tool:1:c1": {"error": "gone"}}


async def test_commit_with_writes_nothing_when_record_raises(store: Store):
    def record_it(outcome: object) -> Commit:
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        await store.commit_with(KEY, lambda handle: None, record_it)

    assert await store.load(KEY) == StoredSession()
    await store.commit(KEY, Commit(messages=(message(0),)))  # and the store goes on


# -- unfinished and suspended turns ---------------------------------------------


async def test_unfinished_and_suspended_turns_are_listed_in_order_across_sessions(store: Store):
    await store.commit(KEY, Commit(turns=(record("t2", 2, "queued"), record("t1", 1, "running"))))
    await store.commit(OTHER, Commit(turns=(record("u1", 1, "suspended"),)))
    await store.commit(SessionKey("b", "s0"), Commit(turns=(record("v1", 1, "queued"),)))
    ended: tuple[TurnStatus, ...] = ("completed", "failed", "cancelled")
    for done, status in enumerate(ended, start=3):
        await store.commit(KEY, Commit(turns=(record(f"t{done}", done, status),)))

    unfinished = [(k, r.turn_id) for k, r in await store.unfinished_turns()]
    assert unfinished == [(KEY, "t1"), (KEY, "t2"), (SessionKey("b", "s0"), "v1")]
    assert [(k, r.turn_id) for k, r in await store.suspended_turns()] == [(OTHER, "u1")]


async def test_interrupted_turns_are_listed_in_order_across_sessions_with_their_counts(
    store: Store,
):
    await store.commit(KEY, Commit(turns=(record("t1", 1, "completed"),)))
    await store.commit(OTHER, Commit(turns=(replace(record("u2", 2, "interrupted"), runs=3),)))
    await store.commit(OTHER, Commit(turns=(record("u1", 1, "interrupted"),)))
    await store.commit(KEY, Commit(turns=(replace(record("t2", 2, "queued"), retry_of="u2"),)))

    listed = [(k, r.turn_id, r.runs) for k, r in await store.interrupted_turns()]
    assert listed == [(OTHER, "u1", 0), (OTHER, "u2", 3)]
    [(_, queued)] = [(k, r) for k, r in await store.unfinished_turns() if r.turn_id == "t2"]
    assert queued.retry_of == "u2"  # kept, as every field of the record


async def test_turn_records_upsert_and_unfinished_are_listed_in_order(store):
    def record(turn_id, seq, status):
        return TurnRecord(turn_id=turn_id, seq=seq, status=status, input=TurnInput(text="x"))

    await store.commit(KEY, Commit(turns=(record("t2", 2, "queued"),)))
    await store.commit(KEY, Commit(turns=(record("t1", 1, "running"),)))
    await store.commit(SessionKey("a", "s0"), Commit(turns=(record("t9", 1, "completed"),)))
    assert [(k, r.turn_id) for k, r in await store.unfinished_turns()] == [(KEY, "t1"), (KEY, "t2")]

    await store.commit(KEY, Commit(turns=(record("t1", 1, "completed"),)))
    assert [r.turn_id for _, r in await store.unfinished_turns()] == ["t2"]
    assert (await store.load(KEY)).turns["t1"].status == "completed"


# -- cancels ---------------------------------------------------------------------


async def test_a_turn_keeps_the_first_cancel_it_got(store: Store):
    await store.commit(KEY, Commit(turns=(record("t1", 1, "running"),)))
    await store.commit(KEY, Commit(cancels=(("t1", "replaced"),)))
    await store.commit(KEY, Commit(cancels=(("t1", "reset"),)))

    assert (await store.load(KEY)).cancels == {"t1": "replaced"}


async def test_a_cancel_lands_on_a_turn_of_the_same_commit_but_not_on_an_unknown_one(
    store: Store,
):
    await store.commit(
        KEY, Commit(turns=(record("t1", 1),), cancels=(("t1", "requested"), ("t9", "requested")))
    )

    assert (await store.load(KEY)).cancels == {"t1": "requested"}


async def test_cancelled_parks_are_suspended_turns_with_a_stored_cancel(store: Store):
    await store.commit(KEY, Commit(turns=(record("t1", 1, "suspended"),)))
    await store.commit(OTHER, Commit(turns=(record("u1", 1, "running"),)))
    await store.commit(OTHER, Commit(cancels=(("u1", "requested"),)))
    assert await store.cancelled_suspensions() == []

    await store.commit(KEY, Commit(cancels=(("t1", "requested"),)))
    assert await store.cancelled_suspensions() == [KEY]


# -- reset and archive -----------------------------------------------------------


async def test_a_pending_reset_is_listed_until_the_archive_carries_it_out(store: Store):
    await a_session_of_two_turns(store)
    await store.commit(KEY, Commit(reset_through=2))
    assert await store.pending_resets() == [KEY]
    assert (await store.load(KEY)).reset_through == 2

    await store.commit(KEY, Commit(archive=True))

    assert await store.pending_resets() == []
    loaded = await store.load(KEY)
    assert loaded == StoredSession(generation=1, retired={"t1", "t2"})
    assert await store.load_steps(KEY, "t1") == {}
    archive = await store.load_archive(KEY, 0)
    assert archive is not None
    assert archive.generation == 0
    assert archive.transcript == [message(0).message, message(1).message, message(2, "t2").message]
    assert archive.turns == {
        "t1": record("t1", 1, "completed", text="first"),
        "t2": record("t2", 2, "cancelled"),
    }
    assert archive.steps == {
        "t1": {"model:1": {"of": "model:1"}},
        "t2": {"model:3": {"of": "model:3"}},
    }
    assert await store.load_archive(KEY, 1) is None


async def test_an_archive_keeps_the_turns_after_the_reset_live(store: Store):
    await a_session_of_two_turns(store)
    await store.commit(KEY, Commit(reset_through=1, archive=True))  # asked and carried out at once

    loaded = await store.load(KEY)
    assert list(loaded.turns) == ["t2"]
    assert loaded.cancels == {"t2": "reset"}
    assert (loaded.generation, loaded.status, loaded.retired) == (1, "new", {"t1"})
    assert await store.load_steps(KEY, "t2") == {"model:3": {"of": "model:3"}}
    archive = await store.load_archive(KEY, 0)
    assert archive is not None
    assert list(archive.turns) == ["t1"]


async def test_a_second_generation_is_archived_under_its_own_number(store: Store):
    await a_session_of_two_turns(store)
    await store.commit(KEY, Commit(reset_through=2, archive=True))
    await store.commit(KEY, Commit(messages=(message(0, "t3"),), turns=(record("t3", 3),)))
    await store.commit(KEY, Commit(reset_through=3, archive=True))

    second = await store.load_archive(KEY, 1)
    assert second is not None
    assert (list(second.turns), second.transcript) == (["t3"], [message(0, "t3").message])
    assert (await store.load(KEY)).generation == 2
    assert (await store.load(KEY)).retired == {"t1", "t2", "t3"}
