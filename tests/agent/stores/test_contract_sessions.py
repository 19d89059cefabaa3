"""The `SessionStore` contract beside the turns, run against every store.

Leases, delivery states, the event log, place policies, the inbox, and which sessions exist
(`has_session` and `list_sessions` agree: a session exists once it admitted a
turn). The stores are those of `conftest.STORES`.
"""

from __future__ import annotations

import pytest

from agent import JsonValue, LeaseLostError, TurnInput
from agent.core.records import Commit, SessionKey, StoredSession
from agent.core.turns import TurnRecord
from agent.errors import StoreConflictError
from tests.agent.stores.rows import (
    KEY,
    OTHER,
    Store,
    a_session_of_two_turns,
    record,
    step,
)

# -- leases (moved from test_stores.py) ------------------------------------------


async def test_a_lease_goes_to_one_holder_until_it_runs_out_or_is_let_go(store):
    first = await store.take_lease(KEY, "a#1", now=100.0, until=130.0)
    assert (first.granted, first.previous) == (True, None)

    refused = await store.take_lease(KEY, "b#1", now=110.0, until=140.0)
    assert (refused.granted, refused.holder) == (False, "a#1")
    renewed = await store.take_lease(KEY, "a#1", now=120.0, until=150.0)
    assert (renewed.granted, renewed.previous) == (True, "a#1")
    assert not (await store.take_lease(KEY, "b#1", now=140.0, until=170.0)).granted

    after_it_ran_out = await store.take_lease(KEY, "b#1", now=151.0, until=181.0)
    assert (after_it_ran_out.granted, after_it_ran_out.previous) == (True, "a#1")
    await store.drop_lease(KEY, "a#1")  # no longer a's: nothing happens
    assert not (await store.take_lease(KEY, "a#2", now=152.0, until=182.0)).granted
    await store.drop_lease(KEY, "b#1")
    assert (await store.take_lease(KEY, "a#2", now=153.0, until=183.0)).granted
    over_a_dead_one = await store.take_lease(KEY, "c#1", now=154.0, until=184.0, over="a#2")
    assert (over_a_dead_one.granted, over_a_dead_one.previous) == (True, "a#2")
    other = await store.take_lease(SessionKey("a", "other"), "a#2", now=155.0, until=185.0)
    assert other.granted


async def test_a_lease_is_renewed_only_by_a_holder_nobody_took_it_from(store):
    await store.take_lease(KEY, "a#1", now=100.0, until=130.0)
    assert await store.renew_lease(KEY, "a#1", until=160.0)
    assert await store.renew_lease(KEY, "a#1", until=400.0)  # late, but nobody took it
    assert not await store.renew_lease(KEY, "b#1", until=400.0)

    await store.take_lease(KEY, "b#1", now=500.0, until=530.0)
    await store.drop_lease(KEY, "b#1")
    # b wrote and went: a's copy is stale, so a renewal must not hand the session back
    assert not await store.renew_lease(KEY, "a#1", until=560.0)
    assert not await store.renew_lease(SessionKey("a", "other"), "a#1", until=560.0)


async def test_a_lease_runs_out_exactly_at_its_until(store: Store):
    await store.take_lease(KEY, "a#1", now=100.0, until=130.0)

    assert not (await store.take_lease(KEY, "b#1", now=129.9, until=160.0)).granted
    assert (await store.take_lease(KEY, "b#1", now=130.0, until=160.0)).granted


async def test_a_renewed_lease_holds_until_its_new_end(store: Store):
    await store.take_lease(KEY, "a#1", now=100.0, until=130.0)
    await store.renew_lease(KEY, "a#1", until=200.0)

    assert not (await store.take_lease(KEY, "b#1", now=150.0, until=230.0)).granted


async def test_a_commit_under_a_lease_someone_else_took_writes_nothing(store):
    await store.take_lease(KEY, "a#1", now=100.0, until=130.0)
    opening = TurnRecord(turn_id="t1", seq=1, status="queued", input=TurnInput(text="x"))
    await store.commit(KEY, Commit(turns=(opening,), holder="a#1"))
    await store.take_lease(KEY, "b#1", now=200.0, until=230.0)

    late = TurnRecord(turn_id="t2", seq=2, status="queued", input=TurnInput(text="y"))
    with pytest.raises(LeaseLostError, match="another process took this session on"):
        await store.commit(KEY, Commit(turns=(late,), holder="a#1"))
    with pytest.raises(LeaseLostError):
        await store.commit_with(
            KEY, lambda handle: None, lambda _: Commit(turns=(late,), holder="a#1")
        )

    assert list((await store.load(KEY)).turns) == ["t1"]
    await store.commit(KEY, Commit(turns=(late,), holder="b#1"))
    assert list((await store.load(KEY)).turns) == ["t1", "t2"]


# -- deliveries (moved from test_stores.py) --------------------------------------


async def test_delivery_states_are_kept_per_turn_replaced_and_forgotten(store):
    other = SessionKey("b", "s1")
    await store.save_delivery(KEY, "t1", {"reply": "1.0", "from": 0})
    await store.save_delivery(KEY, "t2", {"asked": "approve"})
    await store.save_delivery(other, "t1", {"reply": "9.0"})

    await store.save_delivery(KEY, "t1", {"reply": "2.0", "from": 3})  # replaces

    assert await store.load_delivery(KEY, "t1") == {"reply": "2.0", "from": 3}
    assert sorted(await store.deliveries("a"), key=lambda d: d[1]) == [
        (KEY, "t1", {"reply": "2.0", "from": 3}),
        (KEY, "t2", {"asked": "approve"}),
    ]
    await store.save_delivery(KEY, "t1", None)
    await store.save_delivery(KEY, "t9", None)  # forgetting what was never kept is fine
    assert await store.load_delivery(KEY, "t1") is None
    assert await store.deliveries("a") == [(KEY, "t2", {"asked": "approve"})]
    assert await store.deliveries("b") == [(other, "t1", {"reply": "9.0"})]


async def test_a_delivery_is_claimed_by_one_caller_only(store):
    claims = [await store.claim_delivery(KEY, "t1", {"by": n}) for n in range(3)]

    assert claims == [True, False, False]
    assert await store.load_delivery(KEY, "t1") == {"by": 0}


async def test_a_kept_state_is_a_copy_the_caller_cannot_change(store: Store):
    marks: list[JsonValue] = [1]
    await store.save_delivery(KEY, "t1", {"reply": "1.0", "marks": marks})
    marks.append(2)

    read = await store.load_delivery(KEY, "t1")
    assert read == {"reply": "1.0", "marks": [1]}
    assert isinstance(read, dict)
    read["marks"] = []
    assert await store.load_delivery(KEY, "t1") == {"reply": "1.0", "marks": [1]}


# -- the event log ----------------------------------------------------------------


async def test_each_sessions_log_counts_from_one_reads_in_pages_and_prunes_by_age(store: Store):
    bounds = await store.event_bounds(KEY)
    assert (bounds.first, bounds.last) == (1, 0)
    assert await store.append_events(KEY, [{"n": 1}, {"n": 2}], at=10.0) == [1, 2]
    assert await store.append_events(OTHER, [{"n": 1}], at=10.0) == [1]
    assert await store.append_events(KEY, [], at=15.0) == []
    assert await store.append_events(KEY, [{"n": 3}], at=20.0) == [3]

    assert await store.read_events(KEY, after=0, limit=2) == [(1, {"n": 1}), (2, {"n": 2})]
    assert await store.read_events(KEY, after=2, limit=10) == [(3, {"n": 3})]
    assert await store.read_events(KEY, after=3, limit=10) == []
    bounds = await store.event_bounds(KEY)
    assert (bounds.first, bounds.last) == (1, 3)

    assert await store.prune_events(before=10.0) == 0  # strictly before
    assert await store.prune_events(before=20.0) == 3
    bounds = await store.event_bounds(KEY)
    assert (bounds.first, bounds.last) == (3, 3)
    assert await store.read_events(KEY, after=0, limit=10) == [(3, {"n": 3})]
    assert await store.read_events(OTHER, after=0, limit=10) == []


# -- place policies (moved from test_stores.py) ----------------------------------


async def test_place_policies_are_kept_per_source_replaced_and_forgotten(store):
    await store.save_place_policy("slack", "C1", {"deny_tools": ["post"]})
    await store.save_place_policy("slack", "C2", {"instructions": "Be brief."})
    await store.save_place_policy("email", "C1", {"deny_tools": []})
    await store.save_place_policy("slack", "C1", {"deny_tools": ["post", "read"]})
    await store.save_place_policy("slack", "C2", None)

    assert await store.place_policies("slack") == {"C1": {"deny_tools": ["post", "read"]}}
    assert await store.place_policies("email") == {"C1": {"deny_tools": []}}
    assert await store.place_policies("web") == {}


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


async def test_a_session_reset_before_its_first_turn_is_still_a_session(store: Store):
    # a person who starts a console session over before asking anything still has it
    await store.commit(KEY, Commit(reset_through=0, archive=True))

    assert (await store.load(KEY)).generation == 1
    assert await store.has_session(KEY)
    assert [s.session_id for s in await store.list_sessions("a")] == [KEY.session_id]


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


# -- the inbox ---------------------------------------------------------------------


async def test_an_inbox_item_is_kept_once_per_kind_and_ref_and_read_in_order(store: Store):
    assert await store.post_inbox(KEY, "start", "t1", {"text": "hi"}, at=1.0)
    # the same Slack event redelivered to another process: still one item
    assert not await store.post_inbox(KEY, "start", "t1", {"text": "hi again"}, at=2.0)
    assert await store.post_inbox(KEY, "cancel", "t1", {"reason": "requested"}, at=3.0)
    assert await store.post_inbox(OTHER, "start", "t9", None, at=4.0)

    items = await store.read_inbox(KEY)
    assert [(i.kind, i.ref, i.body, i.at) for i in items] == [
        ("start", "t1", {"text": "hi"}, 1.0),
        ("cancel", "t1", {"reason": "requested"}, 3.0),
    ]
    assert items[0].id < items[1].id
    assert await store.inbox_sessions() == [KEY, OTHER]
    assert not await store.has_session(KEY)  # an item alone makes no session


async def test_a_commit_carries_out_inbox_items_once(store: Store):
    await store.post_inbox(KEY, "start", "t1", {"text": "hi"}, at=1.0)
    [item] = await store.read_inbox(KEY)

    await store.commit(KEY, Commit(turns=(record("t1", 1),), inbox_done=(item.id,)))
    assert await store.read_inbox(KEY) == []
    assert await store.inbox_sessions() == []

    # a second owner carrying out the same item writes nothing
    with pytest.raises(StoreConflictError, match="carried out already"):
        await store.commit(KEY, Commit(turns=(record("t2", 2),), inbox_done=(item.id,)))
    assert list((await store.load(KEY)).turns) == ["t1"]
    # and after it was carried out, the same ref may come again (the turn id dedupes then)
    assert await store.post_inbox(KEY, "start", "t1", {"text": "hi"}, at=5.0)


async def test_a_session_cannot_carry_out_another_sessions_inbox_item(store: Store):
    await store.post_inbox(OTHER, "start", "t9", None, at=1.0)
    [item] = await store.read_inbox(OTHER)
    with pytest.raises(StoreConflictError):
        await store.commit(KEY, Commit(turns=(record("t1", 1),), inbox_done=(item.id,)))
    assert [i.id for i in await store.read_inbox(OTHER)] == [item.id]
