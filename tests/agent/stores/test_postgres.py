"""What only the PostgreSQL store must do: replicas on one database, each a store of its own.

Two `PostgresStore` objects on one schema stand for two replicas; every
statement reaches the real server the tests started (tests/postgres_server.py).
"""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

from agent import ActionRequested, EventLog
from agent.core.records import Commit, SessionKey
from agent.errors import LeaseLostError, StoreError
from agent.stores.postgres import PostgresStore
from agent.stores.postgres._schema import MIGRATIONS
from tests.agent.stores.rows import KEY, message, step

WAIT = 10.0


async def test_a_takeover_waits_for_the_write_the_old_holder_is_in_the_middle_of(postgres_url):
    # Under READ COMMITTED a plain read of the lease is a split brain: the takeover
    # commits while the old holder's write is open, and that write then lands unseen
    # by the new holder. The fence locks the lease row, so the takeover waits.
    old, new = await PostgresStore.open(postgres_url), await PostgresStore.open(postgres_url)
    try:
        now = time.time()
        assert (await old.take_lease(KEY, "old:1:a#1", now=now, until=now + 60)).granted
        inside, go_on = threading.Event(), threading.Event()

        def work(handle: object) -> str:
            inside.set()
            assert go_on.wait(WAIT)
            return "done"

        def record(outcome: object) -> Commit:
            return Commit(messages=(message(0),), steps=(step("tool:0:c1"),), holder="old:1:a#1")

        writing = asyncio.ensure_future(old.commit_with(KEY, work, record))
        assert await asyncio.to_thread(inside.wait, WAIT)
        later = now + 3600  # the old holder's lease ran out meanwhile
        taking = asyncio.ensure_future(
            new.take_lease(KEY, "new:1:b#1", now=later, until=later + 60)
        )
        await asyncio.sleep(0.3)
        assert not taking.done()  # held back by the open write's lock on the lease row
        go_on.set()
        await writing
        assert (await taking).granted
        # what the new holder reads holds the write that came before it
        assert [m.text for m in (await new.load(KEY)).transcript] == ["m0"]
        with pytest.raises(LeaseLostError):
            await old.commit(KEY, Commit(messages=(message(1),), holder="old:1:a#1"))
    finally:
        await old.close()
        await new.close()


async def test_two_replicas_appending_to_one_log_get_positions_with_no_gaps(postgres_url):
    first, second = await PostgresStore.open(postgres_url), await PostgresStore.open(postgres_url)
    try:

        async def append(store: PostgresStore, who: str) -> list[int]:
            got: list[int] = []
            for n in range(40):
                got += await store.append_events(KEY, [{"by": who, "n": n}] * 2, at=time.time())
            return got

        a, b = await asyncio.gather(append(first, "a"), append(second, "b"))
        assert sorted(a + b) == list(range(1, 161))
        logged = await first.read_events(KEY, after=0, limit=500)
        assert [position for position, _ in logged] == list(range(1, 161))
    finally:
        await first.close()
        await second.close()


async def test_replicas_starting_together_on_an_empty_database_migrate_it_once(postgres_url):
    opened = await asyncio.gather(*(PostgresStore.open(postgres_url) for _ in range(4)))
    try:
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute("SELECT version FROM schema_version").fetchall() == [
                (len(MIGRATIONS),)
            ]
    finally:
        for store in opened:
            await store.close()


async def test_old_code_runs_on_a_schema_newer_code_added_to_until_one_it_cannot(postgres_url):
    # a rolling deploy: the new release migrated, and a replica of the old one starts
    await (await PostgresStore.open(postgres_url)).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = version + 1")  # it only added
    newer = await PostgresStore.open(postgres_url)
    await newer.commit(KEY, Commit(messages=(message(0),)))
    await newer.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [
            (len(MIGRATIONS) + 1,)  # left as the newer code made it
        ]
        # then a release whose change older code cannot run beside
        conn.execute("UPDATE schema_version SET oldest_code = version")
    with pytest.raises(StoreError, match="run a newer release"):
        await PostgresStore.open(postgres_url)


async def test_a_tool_that_ends_the_transaction_behind_the_handles_back_fails_the_step(
    postgres_url,
):
    # the handle refuses transaction statements; should one get past it (here, straight
    # to the connection), the step is not recorded as if all were well
    store = await PostgresStore.open(postgres_url)
    try:

        def work(handle) -> None:
            handle._conn.execute("COMMIT")

        with pytest.raises(StoreError, match="ended the step's transaction"):
            await store.commit_with(KEY, work, lambda outcome: Commit(messages=(message(0),)))
        assert (await store.load(KEY)).transcript == []
        # the connection went back to the pool fit for the next step
        await store.commit(KEY, Commit(messages=(message(0),)))
        assert len((await store.load(KEY)).transcript) == 1
    finally:
        await store.close()


async def test_a_closed_store_refuses_work(postgres_url):
    store = await PostgresStore.open(postgres_url)
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.load(SessionKey("a", "s9"))


async def test_a_store_whose_server_is_gone_closes_without_waiting_out_its_calls(
    own_postgres_server,
):
    # A deploy's SIGTERM with the database away: a call waiting for a connection would
    # hold the stop for its whole wait (30 s), past Heroku's grace before SIGKILL.
    store = await PostgresStore.open(own_postgres_server.fresh_schema())
    log = EventLog(store, poll_seconds=30.0)
    await store.load(KEY)
    own_postgres_server.stop()
    waiting = asyncio.ensure_future(store.load(SessionKey("a", "s2")))
    log.emit(
        ActionRequested(
            agent="a", session="s1", turn_id="t1", seq=1, call_id="c1", name="x", input={}
        )
    )

    await asyncio.wait_for(log.close(grace=1.0), WAIT)  # its write is dropped, and said so
    await asyncio.wait_for(store.close(), WAIT)

    with pytest.raises(StoreError, match="is closed"):  # refused at the close, not timed out
        await waiting
