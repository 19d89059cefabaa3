"""The SQLite store's own ways (schema and migrations, the tool's handle) and DATABASE_URL.

What every store must do alike is in ``stores/test_contract.py``.
"""

from __future__ import annotations

import socket
import sqlite3

import pytest

from agent import (
    ConfigError,
    MemoryStore,
    SQLiteStore,
    StoreError,
    UserMessage,
)
from agent.core.records import Commit, SessionKey, StoredMessage
from agent.stores import database_path, describe_database, open_store
from agent.stores.postgres import PostgresStore
from agent.stores.sqlite._schema import MIGRATIONS

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
    ["mysql://db/x", "sqlite://host/x.db", "sqlite:///", "data/bot.db", "sqlite:///dir/"],
)
def test_malformed_database_url_is_a_clear_config_error(url):
    with pytest.raises(ConfigError, match="DATABASE_URL"):
        database_path(url)


async def test_open_store_from_url(tmp_path):
    store = await open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore)
    await store.close()
    assert isinstance(await open_store("memory://"), MemoryStore)


async def test_a_postgres_url_of_either_spelling_opens_the_postgres_store(postgres_url):
    # Heroku, Render and Railway hand out postgres://; libpq reads both spellings
    for url in (postgres_url, postgres_url.replace("postgresql://", "postgres://", 1)):
        assert database_path(url) is None
        store = await open_store(url)
        assert isinstance(store, PostgresStore)
        await store.close()


def test_a_server_url_is_described_without_its_password():
    url = "postgres://bot:s3cret-pw@db.example.com:6543/agent?sslmode=require"
    assert describe_database(url) == "postgres://bot@db.example.com:6543/agent"
    assert describe_database("sqlite:///data/bot.db") == "data/bot.db"
    assert describe_database("memory://") == "memory"


async def test_a_postgres_server_that_does_not_answer_is_a_store_error_without_the_password():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"postgresql://bot:s3cret-pw@127.0.0.1:{port}/agent?connect_timeout=1"
    with pytest.raises(StoreError, match="cannot connect") as raised:
        await PostgresStore.open(url)
    assert "s3cret" not in str(raised.value)


async def test_a_closed_sqlite_store_says_it_is_closed(tmp_path):
    store = await SQLiteStore.open(tmp_path / "closed.db")
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.load(KEY)
    with pytest.raises(StoreError, match="closed"):
        await store.take_lease(KEY, "a#1", now=1.0, until=2.0)


@pytest.mark.parametrize(
    ("listing", "index"),
    [("unfinished_turns", "turns_unfinished"), ("suspended_turns", "turns_suspended")],
)
async def test_turns_are_found_by_status_through_their_partial_index(sqlite_store, listing, index):
    # the status set is derived from the engine's, and must still read as the index's
    # WHERE does, or SQLite would scan every turn at each start-up
    statements: list[str] = []
    await sqlite_store.set_trace_callback(statements.append)
    await getattr(sqlite_store, listing)()
    await sqlite_store.set_trace_callback(None)

    [query] = [s for s in statements if "t.status" in s]
    plan = await sqlite_store._run(lambda c: c.execute(f"EXPLAIN QUERY PLAN {query}").fetchall())
    assert any(index in row[-1] for row in plan), plan
