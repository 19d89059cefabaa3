"""The stores themselves: schema and migrations, atomic commits, DATABASE_URL."""

from __future__ import annotations

import sqlite3

import pytest

from agent import (
    ConfigError,
    LeaseLostError,
    MemoryStore,
    SQLiteStore,
    StoreError,
    TurnInput,
    UserMessage,
)
from agent.core.records import Commit, SessionKey, StoredMessage, StoredStep
from agent.core.turns import TurnRecord
from agent.stores import database_path, open_store
from agent.stores._sqlite import MIGRATIONS

KEY = SessionKey("a", "s1")


def message(i: int) -> StoredMessage:
    return StoredMessage(i, UserMessage(turn_id="t1", text=f"m{i}"))


async def test_sqlite_store_creates_its_schema_in_wal_mode(tmp_path):
    store = await SQLiteStore.open(tmp_path / "deep" / "folder" / "s.db")
    await store.close()

    conn = sqlite3.connect(tmp_path / "deep" / "folder" / "s.db")
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(len(MIGRATIONS),)]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sessions", "turns", "messages", "steps", "schema_version"} <= tables
    conn.close()


async def test_reopening_keeps_data_and_does_not_migrate_twice(tmp_path):
    path = tmp_path / "s.db"
    store = await SQLiteStore.open(path)
    await store.commit(KEY, Commit(messages=(message(0),), status="idle"))
    await store.close()

    store = await SQLiteStore.open(path)
    loaded = await store.load(KEY)
    await store.close()
    assert loaded.transcript == [message(0).message]
    assert loaded.status == "idle"


async def test_a_database_of_the_first_schema_is_migrated_forward_keeping_its_rows(tmp_path):
    path = tmp_path / "s.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0])  # as the first release left it
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (1)")
    conn.execute("INSERT INTO sessions (agent, session_id, status) VALUES ('a', 's1', 'idle')")
    conn.commit()
    conn.close()

    store = await SQLiteStore.open(path)
    loaded = await store.load(KEY)
    await store.close()
    assert loaded.status == "idle"
    assert loaded.generation == 0
    conn = sqlite3.connect(path)
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"turns_suspended", "sessions_resetting"} <= indexes
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(len(MIGRATIONS),)]
    conn.close()


async def test_a_schema_newer_than_the_code_is_refused(tmp_path):
    path = tmp_path / "s.db"
    await (await SQLiteStore.open(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()

    with pytest.raises(StoreError, match="schema version 99 is newer"):
        await SQLiteStore.open(path)


async def test_a_commit_is_all_or_nothing(store):
    await store.commit(KEY, Commit(steps=(StoredStep("model:1", "t1", {}),)))

    clash = Commit(messages=(message(0),), steps=(StoredStep("model:1", "t1", {}),))
    with pytest.raises(StoreError):
        await store.commit(KEY, clash)

    assert (await store.load(KEY)).transcript == []


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


async def test_has_session_is_true_once_a_turn_was_admitted(store):
    assert not await store.has_session(KEY)
    await store.load(KEY)  # reading a session is not taking part in it
    assert not await store.has_session(KEY)

    record = TurnRecord(turn_id="t1", seq=1, status="running", input=TurnInput(text="hi"))
    await store.commit(KEY, Commit(turns=(record,), status="running"))

    assert await store.has_session(KEY)
    assert not await store.has_session(SessionKey("other agent", KEY.session_id))


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


async def test_delivery_states_survive_a_reopen(tmp_path):
    store = await SQLiteStore.open(tmp_path / "s.db")
    await store.save_delivery(KEY, "t1", {"reply": "1.0"})
    await store.close()

    store = await SQLiteStore.open(tmp_path / "s.db")
    try:
        assert await store.deliveries("a") == [(KEY, "t1", {"reply": "1.0"})]
    finally:
        await store.close()


async def test_work_that_raises_is_rolled_back_and_recorded(sqlite_store):
    def work(handle):
        handle.execute("CREATE TABLE scratch (x)")
        raise KeyError("gone")

    def record(outcome):
        assert isinstance(outcome, KeyError)
        return Commit(messages=(message(0),))

    await sqlite_store.commit_with(KEY, work, record)

    assert (await sqlite_store.load(KEY)).transcript == [message(0).message]
    tables = await sqlite_store._run(
        lambda c: c.execute("SELECT name FROM sqlite_master WHERE name = 'scratch'").fetchall()
    )
    assert tables == []


async def test_record_that_raises_rolls_back_everything(sqlite_store):
    def work(handle):
        handle.execute("CREATE TABLE scratch (x)")
        return "fine"

    def record(outcome):
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        await sqlite_store.commit_with(KEY, work, record)

    tables = await sqlite_store._run(
        lambda c: c.execute("SELECT name FROM sqlite_master WHERE name = 'scratch'").fetchall()
    )
    assert tables == []
    # the connection is usable afterwards: no transaction was left open
    await sqlite_store.commit(KEY, Commit(messages=(message(0),)))


async def test_handle_is_dead_once_its_step_ends(sqlite_store):
    kept = []

    def work(handle):
        kept.append(handle)
        return None

    await sqlite_store.commit_with(KEY, work, lambda outcome: Commit())
    with pytest.raises(StoreError, match="step that has ended"):
        kept[0].execute("SELECT 1")


@pytest.mark.parametrize(
    ("url", "path"),
    [
        pytest.param("sqlite:///data/bot.db", "data/bot.db", id="relative"),
        pytest.param("sqlite:////var/lib/bot.db", "/var/lib/bot.db", id="absolute"),
        pytest.param("memory://", None, id="memory"),
    ],
)
def test_database_url_names_a_file(url, path):
    assert database_path(url) == path


@pytest.mark.parametrize(
    "url",
    ["postgres://db/x", "sqlite://host/x.db", "sqlite:///", "data/bot.db", "sqlite:///dir/"],
)
def test_malformed_database_url_is_a_clear_config_error(url):
    with pytest.raises(ConfigError, match="DATABASE_URL"):
        database_path(url)


async def test_open_store_from_url(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore)
    await store.close()
    assert isinstance(await open_store("memory://"), MemoryStore)


async def test_a_closed_sqlite_store_says_it_is_closed(tmp_path):
    store = await SQLiteStore.open(tmp_path / "closed.db")
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.load(KEY)
    with pytest.raises(StoreError, match="closed"):
        await store.take_lease(KEY, "a#1", now=1.0, until=2.0)


async def test_place_policies_are_kept_per_source_replaced_and_forgotten(store):
    await store.save_place_policy("slack", "C1", {"deny_tools": ["post"]})
    await store.save_place_policy("slack", "C2", {"instructions": "Be brief."})
    await store.save_place_policy("email", "C1", {"deny_tools": []})
    await store.save_place_policy("slack", "C1", {"deny_tools": ["post", "read"]})
    await store.save_place_policy("slack", "C2", None)

    assert await store.place_policies("slack") == {"C1": {"deny_tools": ["post", "read"]}}
    assert await store.place_policies("email") == {"C1": {"deny_tools": []}}
    assert await store.place_policies("web") == {}
