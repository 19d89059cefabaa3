"""Event-log followers across replicas on PostgreSQL: woken by NOTIFY, never by their poll.

Two `PostgresStore` objects on one schema stand for two replicas. Every follower
here polls only every 30 s, so an entry that reaches it within a second or two
came by a notice (or by the wake-up after the listener connected again).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest

from agent import Agent, AgentRuntime, EventLog, LogEntry, MemoryStore, SQLiteStore
from agent.core.events import MessageCompleted
from agent.core.records import SessionKey
from agent.ports import EventWakeups
from agent.stores.postgres import PostgresStore, _wakeups
from agent.stores.postgres._wakeups import CHANNEL, LISTENER_NAME, decode, encode
from agent.testing import ScriptedModel, reply

KEY = SessionKey("a", "s1")
POLL = 30.0
"""The followers' poll: far longer than any wait below."""
PROMPT = 2.0
"""How soon an entry must reach a follower on another replica: long before its poll."""
WAIT = 10.0


def body(n: int) -> dict[str, object]:
    event = MessageCompleted(agent="a", session="s1", turn_id="t1", seq=n, text=f"m{n}", index=n)
    return event.model_dump(mode="json")


async def until(condition: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


class Follower:
    """A follower of one session on one replica's log, keeping every logged entry it gets."""

    def __init__(self, log: EventLog, key: SessionKey = KEY) -> None:
        self.entries: list[LogEntry] = []
        self._grew = asyncio.Event()
        self._task = asyncio.create_task(self._follow(log, key))

    async def _follow(self, log: EventLog, key: SessionKey) -> None:
        async for entry in log.follow(key):
            if isinstance(entry, LogEntry):
                self.entries.append(entry)
                self._grew.set()

    @property
    def positions(self) -> list[int]:
        return [e.position for e in self.entries]

    async def until(self, count: int, *, within: float = PROMPT) -> None:
        async with asyncio.timeout(within):
            while len(self.entries) < count:
                self._grew.clear()
                await self._grew.wait()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class Notices:
    """A LISTEN connection of the test's own: every notice naming `KEY`, with its sender."""

    def __init__(self, conn: psycopg.AsyncConnection, on_notice: Callable[[int], Awaitable[None]]):
        self.got: list[tuple[int, int]] = []
        """(position, the sending backend's pid) of each notice."""
        self._conn = conn
        self._on_notice = on_notice
        self._task = asyncio.create_task(self._receive())

    async def _receive(self) -> None:
        async for notice in self._conn.notifies():
            named = decode(notice.payload)
            if named is not None and named[0] == KEY:
                await self._on_notice(named[1])
                self.got.append((named[1], notice.pid))

    @property
    def positions(self) -> list[int]:
        return [position for position, _ in self.got]

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._conn.close()


async def nothing(position: int) -> None:
    return None


@contextlib.asynccontextmanager
async def notices(
    url: str, on_notice: Callable[[int], Awaitable[None]] = nothing
) -> AsyncIterator[Notices]:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await conn.execute(f"LISTEN {CHANNEL}")
    listening = Notices(conn, on_notice)
    try:
        yield listening
    finally:
        await listening.close()


@pytest.fixture
async def replicas(postgres_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    a = await PostgresStore.open(postgres_url)
    b = await PostgresStore.open(postgres_url)
    yield a, b
    await a.close()
    await b.close()


async def listening(store: PostgresStore) -> None:
    await asyncio.wait_for(store._listener.listening.wait(), WAIT)


async def test_only_the_postgres_store_wakes_followers(tmp_path):
    sqlite = await SQLiteStore.open(tmp_path / "s.db")
    try:
        assert not isinstance(sqlite, EventWakeups)
    finally:
        await sqlite.close()
    assert not isinstance(MemoryStore(), EventWakeups)
    assert issubclass(PostgresStore, EventWakeups)


def test_a_notice_names_its_session_and_position_or_any_session_when_too_long():
    key = SessionKey("a", "slack:T1:C1:1700000000.000100")
    assert decode(encode(key, 17)) == (key, 17)
    assert decode(encode(SessionKey("a", "ü" * 10), 3)) == (SessionKey("a", "ü" * 10), 3)
    too_long = encode(SessionKey("a", "x" * 8000), 3)
    assert too_long == "*"
    assert decode(too_long) is None  # every follower reads
    assert decode("not ours") is None


async def test_a_follower_on_one_replica_gets_a_turn_run_on_another_long_before_its_poll(
    replicas,
):
    a, b = replicas
    follower = Follower(EventLog(b, poll_seconds=POLL))
    try:
        await listening(b)
        model = ScriptedModel(lambda request: reply("from replica a"))
        async with AgentRuntime(a, Agent(name="a", model=model)) as runtime:
            log = EventLog(a)
            runtime.add_sink(log)
            await runtime.session("a", "s1").turn("hi")
            await log.flush()
            await follower.until(3)
            await runtime.session("a", "s1").turn("again")
            await log.close()
        await follower.until(6)
    finally:
        await follower.stop()
    # each once, in order; the deltas stay on replica a, which streamed them
    assert follower.positions == [1, 2, 3, 4, 5, 6]
    assert [e.event.type for e in follower.entries[:3]] == [
        "turn.started",
        "message.completed",
        "turn.completed",
    ]


async def test_a_burst_of_appends_makes_few_notices_and_the_follower_gets_each_entry_once(
    replicas, postgres_url
):
    _, b = replicas
    # notices at most every 0.1 s (15 ms by default), so they stay few on a loaded machine
    a = await PostgresStore.open(postgres_url, notify_every=0.1)
    appends = 200
    follower = Follower(EventLog(b, poll_seconds=POLL))
    try:
        await listening(b)
        async with notices(postgres_url) as seen:
            # ten appends at a time (the pool's size), each committed on its own
            await asyncio.gather(
                *(a.append_events(KEY, [body(n)], at=time.time()) for n in range(appends))
            )
            await follower.until(appends, within=WAIT)
            await until(lambda: appends in seen.positions)
    finally:
        await follower.stop()
        await a.close()
    assert follower.positions == list(range(1, appends + 1))
    assert seen.positions == sorted(seen.positions)  # each the session's newest then
    assert len(seen.got) <= appends // 4, seen.positions


async def test_a_notice_is_sent_after_the_append_commits_and_never_by_its_transaction(
    replicas, postgres_url
):
    a, _ = replicas
    admin = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    # the server notes which backend inserted each log entry, from inside its transaction
    await admin.execute(
        "CREATE TABLE inserters (pid integer);"
        " CREATE FUNCTION note_inserter() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN INSERT INTO inserters VALUES (pg_backend_pid()); RETURN NULL; END $$;"
        " CREATE TRIGGER note_inserter AFTER INSERT ON events"
        " FOR EACH STATEMENT EXECUTE FUNCTION note_inserter()"
    )
    reader = await PostgresStore.open(postgres_url)
    unreadable: list[int] = []

    async def readable_at_once(position: int) -> None:
        # a third replica reads, the moment the notice arrives, what it names
        rows = await reader.read_events(KEY, after=position - 1, limit=1)
        if [p for p, _ in rows] != [position]:
            unreadable.append(position)

    try:
        async with notices(postgres_url, readable_at_once) as seen:

            async def append(who: int) -> None:
                for n in range(10):
                    await a.append_events(KEY, [body(who * 100 + n)] * 2, at=time.time())

            await asyncio.gather(*(append(who) for who in range(5)))
            await until(lambda: 100 in seen.positions)
        cursor = await admin.execute("SELECT DISTINCT pid FROM inserters")
        inserters = {pid for (pid,) in await cursor.fetchall()}
    finally:
        await reader.close()
        await admin.close()
    assert unreadable == []
    senders = {pid for _, pid in seen.got}
    assert inserters
    assert not senders & inserters
    assert senders == {a._notifier.pid}  # one connection of its own


async def test_the_listener_listens_again_after_its_connection_drops_and_wakes_every_follower(
    replicas, postgres_url, monkeypatch
):
    a, b = replicas
    missed = 0

    def count_missed() -> None:
        nonlocal missed
        missed += 1

    b.subscribe_events(lambda key, last: None, missed=count_missed)
    follower = Follower(EventLog(b, poll_seconds=POLL))
    try:
        await listening(b)
        assert missed == 1  # told once it began to listen
        await a.append_events(KEY, [body(1)], at=time.time())
        await follower.until(1)

        # an append whose notice is lost: the listener is about to go down
        with monkeypatch.context() as lost:
            lost.setattr(a._notifier, "note", lambda key, last: None)
            await a.append_events(KEY, [body(2)], at=time.time())
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            rows = await admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (LISTENER_NAME,)
            )
            assert (b._listener.pid,) in await rows.fetchall()
            await admin.execute("SELECT pg_terminate_backend(%s)", (b._listener.pid,))
        await until(lambda: missed == 2)
        await follower.until(2)  # woken after the reconnect, never notified

        await a.append_events(KEY, [body(3)], at=time.time())
        await follower.until(3)
    finally:
        await follower.stop()
    assert follower.positions == [1, 2, 3]
    assert missed == 2


@pytest.mark.parametrize("moment", ["connecting", "listening", "reconnecting"])
async def test_closing_the_store_stops_its_listener_and_notifier(
    postgres_url, caplog, monkeypatch, moment
):
    monkeypatch.setattr(_wakeups, "RECONNECT_DELAYS", (POLL,))  # "reconnecting" lasts
    store = await PostgresStore.open(postgres_url)
    follower = Follower(EventLog(store, poll_seconds=POLL))
    await asyncio.sleep(0)  # it subscribed: the listener is connecting
    if moment != "connecting":
        await listening(store)
    if moment == "reconnecting":
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (store._listener.pid,))
        await until(lambda: not store._listener.listening.is_set())
    listener_pid = store._listener.pid
    await follower.stop()  # a follower left on a closed store fails at its next read
    async with notices(postgres_url) as seen:
        await store.append_events(KEY, [body(1)], at=time.time())
        await store.close()  # with the notice still to send
        await until(lambda: seen.positions == [1])

    gc.collect()
    ours = [t for t in asyncio.all_tasks() if t.get_name().startswith("agent-pg")]
    assert ours == []
    assert store._listener.pid is None
    assert store._notifier.pid is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    if listener_pid is not None:  # its backend ends once it sees the connection close
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            deadline = asyncio.get_running_loop().time() + WAIT
            query = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
            while await (await admin.execute(query, (listener_pid,))).fetchone():
                assert asyncio.get_running_loop().time() < deadline, "the listener's backend stays"
                await asyncio.sleep(0.01)
