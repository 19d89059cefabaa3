"""Two processes on one store: each session has one writer at a time.

Two runtimes on one database (a SQLite file, a PostgreSQL schema), each with
its own connection, stand for two processes (the server and ``run-schedule``
beside it, two replicas); a child process that is SIGKILLed stands for one that
died holding a session.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent import (
    Agent,
    AgentRuntime,
    Cancelled,
    Completed,
    LeaseLostError,
    ModelRequest,
    RuntimeClosedError,
    SQLiteStore,
    Suspended,
    TurnInput,
    TurnResult,
    UnknownTurnError,
)
from agent.core.model import ModelReply, TextDelta
from agent.core.records import Commit, SessionKey, StoredSession
from agent.engine.lease import SessionLease, is_gone, new_holder, retire
from agent.stores.postgres import PostgresStore
from agent.testing import ScriptedModel, reply
from tests.agent.child_process import DEADLINE_SECONDS, ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase
from tests.agent.test_hitl import Ledger, gated_post_tool, script, speaker_input

KEY = SessionKey("a", "s1")
FIRING = TurnInput(text="Summarize the day.", trigger="proactive", by="schedule:daily")
CHILD = Path(__file__).with_name("lease_child.py")


class HeldModel:
    """A scripted model whose first answer waits until the test lets it go."""

    def __init__(self, text: str) -> None:
        self.asked = asyncio.Event()
        self.go = asyncio.Event()
        self.model = ScriptedModel(self._answer)
        self._text = text

    async def _answer(self, request: ModelRequest) -> ModelReply:
        if not self.asked.is_set():
            self.asked.set()
            await self.go.wait()
        return reply(self._text)


Stores = tuple[SQLiteStore, SQLiteStore] | tuple[PostgresStore, PostgresStore]


@pytest.fixture(params=["sqlite", "postgres"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    """Two stores on one database (a SQLite file, a PostgreSQL schema), as two processes have."""
    pair: Stores
    if request.param == "sqlite":
        pair = (
            await SQLiteStore.open(tmp_path / "bot.db"),
            await SQLiteStore.open(tmp_path / "bot.db"),
        )
    else:
        url = request.getfixturevalue("postgres_url")
        pair = (await PostgresStore.open(url), await PostgresStore.open(url))
    yield pair
    await pair[0].close()
    await pair[1].close()


async def eventually_logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not any(text in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, f"never logged {text!r}"
        await asyncio.sleep(0.02)


async def test_two_processes_starting_the_same_turn_run_it_once(stores):
    held = HeldModel("Three threads were busy today.")
    agent = Agent(name="a", model=held.model)
    async with AgentRuntime(stores[0], agent) as first, AgentRuntime(stores[1], agent) as second:
        await first.session("a", "s1").start(FIRING, turn_id="firing")
        await held.asked.wait()

        again = asyncio.ensure_future(second.session("a", "s1").start(FIRING, turn_id="firing"))
        await asyncio.sleep(0.3)
        assert not again.done()  # the second waits while the first writes the session
        held.go.set()

        assert await again == "firing"
        ended = await second.session("a", "s1").result("firing")

    assert ended == Completed(turn_id="firing", text="Three threads were busy today.")
    assert len(held.model.requests) == 1  # run once, by the process that admitted it
    on_disk = await stores[1].load(KEY)
    assert [m.role for m in on_disk.transcript] == ["trigger", "assistant"]


async def test_a_run_that_lost_its_session_writes_nothing_and_goes_on_once_it_is_back(
    stores, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.WARNING, logger="agent")
    held = HeldModel("hello to you")
    here, elsewhere = stores
    async with AgentRuntime(here, Agent(name="a", model=held.model)) as runtime:
        session = runtime.session("a", "s1")
        await session.start("hello", turn_id="t1")
        await held.asked.wait()
        # this process froze past its lease, and another took the session on meanwhile
        later = time.time() + 3600
        taken = await elsewhere.take_lease(KEY, "far:1:x#1", now=later, until=later + 60)
        assert taken.granted
        held.go.set()

        await eventually_logged(caplog, "another process took the session on during t1")
        assert [m.role for m in (await elsewhere.load(KEY)).transcript] == ["user"]

        await elsewhere.drop_lease(KEY, "far:1:x#1")
        assert await session.result("t1") == Completed(turn_id="t1", text="hello to you")
        assert (await session.turn("again")).text == "hello to you"  # not halted

    assert len(held.model.requests) == 3  # the refused step was asked again, once
    on_disk = await elsewhere.load(KEY)
    assert [m.role for m in on_disk.transcript] == ["user", "assistant", "user", "assistant"]


async def test_a_session_held_by_a_killed_process_is_taken_at_once(
    tmp_path: Path, crash_db: CrashDatabase
):
    await (await crash_db.open()).close()  # the schema, before two processes open it
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        child = start("holder", [crash_db.where])
        child.wait_for("HELD")
        store = await crash_db.open()
        lease = SessionLease(store, KEY, new_holder(), seconds=30.0)
        try:
            assert not await lease.take(wait=False)  # a live process holds it
            child.kill()
            # its ten minutes have not run out: the dead process is seen to be gone
            assert await lease.take(wait=False)
            assert lease.stale  # and what it wrote is to be read again
        finally:
            await lease.drop()
            retire(lease.holder)
            await store.close()


async def test_a_replica_of_another_host_is_taken_over_as_soon_as_it_dies(postgres_url: str):
    # A host this process cannot see into: only the replica's liveness lock, held on
    # its own connection to the database, says whether it lives.
    await (await PostgresStore.open(postgres_url)).close()
    with start_children(ChildProcess, CHILD, Path("/tmp")) as start:
        child = start("holder", [postgres_url, "far-away-host:4242:replica"])
        child.wait_for("HELD")
        store = await PostgresStore.open(postgres_url)
        lease = SessionLease(store, KEY, new_holder(), seconds=30.0)
        try:
            assert not is_gone("far-away-host:4242:replica#1")  # no pid to look at
            assert not await lease.take(wait=False)  # its lock is held: it lives
            child.kill()
            # its ten minutes have not run out, yet the lock is free within moments
            killed = time.monotonic()
            while not await lease.take(wait=False):
                assert time.monotonic() - killed < 5.0, "a dead replica's session is not taken"
                await asyncio.sleep(0.01)
            assert lease.stale
        finally:
            await lease.drop()
            retire(lease.holder)
            await store.close()


async def test_a_frozen_replica_keeps_its_session_until_its_lease_runs_out(postgres_url: str):
    await (await PostgresStore.open(postgres_url)).close()
    with start_children(ChildProcess, CHILD, Path("/tmp")) as start:
        child = start("holder", [postgres_url, "far-away-host:4243:replica"])
        child.wait_for("HELD")
        child.proc.send_signal(signal.SIGSTOP)  # alive to the database, doing nothing
        store = await PostgresStore.open(postgres_url)
        try:
            now = time.time()
            taken = await store.take_lease(KEY, "here:1:x#1", now=now, until=now + 30)
            assert not taken.granted  # its connection, hence its lock, is still there
            after = now + 601  # once its ten minutes are over, it is anyone's
            taken = await store.take_lease(KEY, "here:1:x#1", now=after, until=after + 30)
            assert taken.granted
            # woken, the frozen one cannot write: the fence refuses its token
            with pytest.raises(LeaseLostError):
                await store.commit(
                    KEY, Commit(status="idle", holder="far-away-host:4243:replica#1")
                )
        finally:
            child.proc.send_signal(signal.SIGCONT)
            await store.close()


class PausedStream:
    """A model that streams a first piece, waits for the test, then streams the rest."""

    def __init__(self) -> None:
        self.paused = asyncio.Event()
        self.go = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        yield TextDelta(text="before ")
        self.paused.set()
        await self.go.wait()
        yield TextDelta(text="after")
        yield reply("before after")


async def test_a_run_that_lost_its_session_mid_stream_streams_nothing_more(stores, caplog):
    # a streamed delta is fenced by no commit: once the lease is known lost (or may have
    # run out by the clock), the run stops before showing words it could never commit
    caplog.set_level(logging.WARNING, logger="agent")
    model = PausedStream()
    shown: list[str] = []
    runtime = AgentRuntime(stores[0], Agent(name="a", model=model), lease_seconds=0.9)
    async with runtime:
        session = runtime.session("a", "s1")
        await session.observe(lambda e: shown.append(e.text) if e.type == "message.delta" else None)
        await session.start("hello", turn_id="t1")
        await model.paused.wait()
        later = time.time() + 3600
        assert (await stores[1].take_lease(KEY, "far:1:x#1", now=later, until=later + 60)).granted
        await eventually_logged(caplog, "a/s1 was taken on by another process")
        model.go.set()
        await eventually_logged(caplog, "another process took the session on during t1")

    assert shown == ["before "]
    on_disk = await stores[1].load(KEY)
    assert [m.role for m in on_disk.transcript] == ["user"]  # the reply never committed


async def run_and_stall(
    runtime: AgentRuntime, held: HeldModel, elsewhere: SQLiteStore, caplog: Any
) -> asyncio.Future[TurnResult]:
    """Start turn t1 and freeze it past its lease: another holder takes the session, then goes.

    Returns:
        The turn's result, as this process will see it.
    """
    caplog.set_level(logging.WARNING, logger="agent")
    session = runtime.session("a", "s1")
    await session.start("hello", turn_id="t1")
    await held.asked.wait()
    waiting = asyncio.ensure_future(session.result("t1"))
    later = time.time() + 3600
    assert (await elsewhere.take_lease(KEY, "far:1:x#1", now=later, until=later + 60)).granted
    await eventually_logged(caplog, "a/s1 was taken on by another process")  # its renewal saw
    await elsewhere.drop_lease(KEY, "far:1:x#1")
    return waiting


async def test_a_process_whose_run_lost_the_session_refuses_new_turns_until_it_caught_up(
    stores, caplog: pytest.LogCaptureFixture
):
    here, elsewhere = stores
    held_a, held_b = HeldModel("A's reply"), HeldModel("B's reply")
    a = AgentRuntime(here, Agent(name="a", model=held_a.model), lease_seconds=0.6)
    b = AgentRuntime(elsewhere, Agent(name="a", model=held_b.model))
    async with a, b:
        session = a.session("a", "s1")
        waiting = await run_and_stall(a, held_a, elsewhere, caplog)
        await b.session("a", "s1").start("hello", turn_id="t1")  # B picks the turn up
        await held_b.asked.wait()

        admitting = asyncio.ensure_future(session.start("next", turn_id="t2"))
        held_b.go.set()  # B finishes t1 and lets the session go; A's start gets it
        with pytest.raises(LeaseLostError, match="taken on by another process meanwhile"):
            await admitting
        held_a.go.set()  # A's run wakes: its write is refused, and A reads what B did

        assert await waiting == Completed(turn_id="t1", text="B's reply")
        assert (await session.turn("again")).text == "A's reply"

    on_disk = await elsewhere.load(KEY)
    assert [(m.role, m.text) for m in on_disk.transcript] == [
        ("user", "hello"),
        ("assistant", "B's reply"),
        ("user", "again"),
        ("assistant", "A's reply"),
    ]


@pytest.mark.parametrize("ending", ["cancel", "reset"])
async def test_a_turn_the_other_process_ended_while_it_stalled_here_ends_so_here_too(
    stores, caplog: pytest.LogCaptureFixture, ending: str
):
    here, elsewhere = stores
    held = HeldModel("A's reply")
    a = AgentRuntime(here, Agent(name="a", model=held.model), lease_seconds=0.6)
    b = AgentRuntime(elsewhere, Agent(name="a", model=ScriptedModel(lambda r: reply("B's"))))
    async with a, b:
        waiting = await run_and_stall(a, held, elsewhere, caplog)
        if ending == "cancel":
            assert await b.session("a", "s1").cancel("t1")
        else:
            await b.session("a", "s1").reset()
        held.go.set()  # A's run wakes: its write is refused, and it reads what B did

        if ending == "cancel":
            assert await waiting == Cancelled(turn_id="t1", reason="requested")
        else:
            with pytest.raises(UnknownTurnError, match="turn t1 was archived by a reset"):
                await waiting


async def test_a_replica_starting_beside_a_running_turn_lets_the_session_go_once_it_ended(stores):
    held = HeldModel("B's reply")
    idle = ScriptedModel(lambda request: reply("A's reply"))
    b = AgentRuntime(stores[1], Agent(name="a", model=held.model))
    a = AgentRuntime(stores[0], Agent(name="a", model=idle), lease_seconds=0.6)
    async with b:
        await b.session("a", "s1").start(FIRING, turn_id="firing")
        await held.asked.wait()
        async with a:  # its start-up finds the turn unfinished: its worker waits for it
            # and the same firing comes to it as well, while both wait
            admitting = asyncio.ensure_future(a.session("a", "s1").start(FIRING, turn_id="firing"))
            await asyncio.sleep(0.3)
            held.go.set()

            assert await admitting == "firing"
            ended = await a.session("a", "s1").result("firing")
            assert ended == Completed(turn_id="firing", text="B's reply")
            await asyncio.sleep(0.5)  # A idle for a few of its renewal periods
            # B has the session back at once: A let it go, and nothing of A's renews it
            again = b.session("a", "s1").turn("next")
            assert (await asyncio.wait_for(again, DEADLINE_SECONDS / 3)).text == "B's reply"
    assert idle.requests == deque()


async def test_turns_queued_behind_a_park_run_after_another_process_had_the_session(stores):
    release = asyncio.Event()
    agent = Agent(name="a", model=ScriptedModel(script), tools=[gated_post_tool(Ledger(), release)])
    async with AgentRuntime(stores[0], agent) as a:
        session = a.session("a", "s1")
        await session.start(speaker_input(), turn_id="t1")
        await session.start(speaker_input("and this"), turn_id="t2")  # behind t1
        release.set()
        assert isinstance(await session.result("t1"), Suspended)
        async with AgentRuntime(stores[1], agent):
            pass  # a replica starts: it takes the session to look, and lets it go

        await session.resume("t1", "approve", True, by="U1")

        assert isinstance(await session.result("t1"), Completed)
        behind = await asyncio.wait_for(session.result("t2"), DEADLINE_SECONDS / 3)
        assert isinstance(behind, Suspended)  # it ran, and asks in its turn


async def test_a_caller_that_leaves_while_its_take_waits_leaves_no_lease_behind(
    stores, tmp_path: Path
):
    a = AgentRuntime(stores[0], Agent(name="a", model=ScriptedModel(lambda r: reply("A's"))))
    b = AgentRuntime(stores[1], Agent(name="a", model=ScriptedModel(lambda r: reply("ok"))))
    locked, done = threading.Event(), threading.Event()

    def third_process_writing() -> None:
        conn: sqlite3.Connection | psycopg.Connection[Any]
        if isinstance(stores[0], SQLiteStore):
            conn = sqlite3.connect(tmp_path / "bot.db", isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
        else:  # the session's lease row, locked as a fenced write locks it
            conn = psycopg.connect(stores[0]._pool.url)
            conn.execute("SELECT * FROM leases FOR UPDATE")
        locked.set()
        done.wait(DEADLINE_SECONDS)
        conn.execute("COMMIT")
        conn.close()

    writer = threading.Thread(target=third_process_writing)
    async with a, b:
        await a.session("a", "s1").turn("one")  # A holds the session in memory
        await b.session("a", "s1").turn("two")  # and B writes it: A's copy is behind
        await asyncio.to_thread(writer.start)
        await asyncio.to_thread(locked.wait, DEADLINE_SECONDS)
        starting = asyncio.ensure_future(a.session("a", "s1").start("hi"))
        await asyncio.sleep(0.2)
        starting.cancel()  # its caller gives up while the take waits for the write lock
        with pytest.raises(asyncio.CancelledError):
            await starting
        done.set()
        await asyncio.to_thread(writer.join)
        await stores[0]._run(lambda conn: None)  # A's connection did its take by now

        # the take landed after its caller left: it is let go, nobody need wait it out
        deadline = time.monotonic() + DEADLINE_SECONDS
        while any(until > time.time() for *_, until in await stores[1].dump_table("leases")):
            assert time.monotonic() < deadline, "the take nobody waits for is never let go"
            await asyncio.sleep(0.02)
        # and A still knows its copy is behind: its next turn reads what B wrote first
        assert (await a.session("a", "s1").turn("three")).text == "A's"

    said = [(m.role, m.text) for m in (await stores[1].load(KEY)).transcript]
    assert said == [
        ("user", "one"),
        ("assistant", "A's"),
        ("user", "two"),
        ("assistant", "ok"),
        ("user", "three"),
        ("assistant", "A's"),
    ]


async def test_a_write_waiting_for_the_other_process_stops_when_its_runtime_closes(stores):
    held = HeldModel("B's reply")
    b = AgentRuntime(stores[1], Agent(name="a", model=held.model))
    a = AgentRuntime(stores[0], Agent(name="a", model=ScriptedModel(lambda r: reply("A's"))))
    async with b:
        await b.session("a", "s1").start("hello", turn_id="t1")
        await held.asked.wait()
        await a.start()
        admitting = asyncio.ensure_future(a.session("a", "s1").start("next", turn_id="t2"))
        await asyncio.sleep(0.1)
        await a.close()

        with pytest.raises(RuntimeClosedError):
            await asyncio.wait_for(admitting, DEADLINE_SECONDS)
        held.go.set()
        await b.session("a", "s1").result("t1")
    assert list((await stores[1].load(KEY)).turns) == ["t1"]  # t2 was never written


def test_only_a_process_on_this_machine_and_pid_namespace_is_known_to_be_gone():
    mine = new_holder()
    host, pid, _ = mine.split(":")
    try:
        assert not is_gone(mine)
        assert not is_gone(f"{mine}#3")
        # pid 1 in another container of the same host name: alive or not, it is not ours to tell
        assert not is_gone(f"{host.split('/')[0]}/1/x:{2**22 + 1}:t#1")
        assert is_gone(f"{host}:{pid}:a-runtime-of-this-process-that-closed#1")
    finally:
        retire(mine)
    assert is_gone(mine)  # closed here


class PausingStore(SQLiteStore):
    """A connection whose next load, or its commit that archives, waits until let go.

    While it waits, its lease renewals wait too, as in a process that froze.
    """

    pause_load = False
    pause_archive = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.paused, self.go = asyncio.Event(), asyncio.Event()

    async def load(self, key: SessionKey) -> StoredSession:
        if self.pause_load:
            self.pause_load = False
            self.paused.set()
            await self.go.wait()
        return await super().load(key)

    async def renew_lease(self, key: SessionKey, holder: str, *, until: float) -> bool:
        if self.paused.is_set() and not self.go.is_set():
            await self.go.wait()  # the whole process is frozen: its renewals too
        return await super().renew_lease(key, holder, until=until)

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        if self.pause_archive and commit.archive:
            self.pause_archive = False
            self.paused.set()
            await self.go.wait()
        await super().commit(key, commit)


async def test_a_caller_that_leaves_while_the_session_is_read_again_leaves_no_lease(
    tmp_path: Path,
):
    here = await PausingStore.open(tmp_path / "bot.db")
    elsewhere = await SQLiteStore.open(tmp_path / "bot.db")
    model = ScriptedModel(lambda request: reply("ok"))
    try:
        a = AgentRuntime(here, Agent(name="a", model=model), lease_seconds=0.6)
        b = AgentRuntime(elsewhere, Agent(name="a", model=model))
        async with a, b:
            here.pause_load = True  # a first write reads the session under the lease
            starting = asyncio.ensure_future(a.session("a", "s1").start("hi"))
            await here.paused.wait()
            starting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await starting
            here.go.set()
            await asyncio.sleep(0.5)  # A idle for a few renewal periods

            turn = b.session("a", "s1").turn("hello")
            assert (await asyncio.wait_for(turn, DEADLINE_SECONDS / 3)).text == "ok"
    finally:
        await here.close()
        await elsewhere.close()


async def test_a_reset_the_other_process_carried_out_answers_the_caller_here(tmp_path: Path):
    here = await PausingStore.open(tmp_path / "bot.db")
    elsewhere = await SQLiteStore.open(tmp_path / "bot.db")
    agent = Agent(name="a", model=ScriptedModel(lambda request: reply("ok")))
    try:
        a = AgentRuntime(here, agent, lease_seconds=0.6)
        async with a:
            session = a.session("a", "s1")
            await session.turn("hello")
            here.pause_archive = True  # A freezes as it archives, past its lease
            resetting = asyncio.ensure_future(session.reset())
            await here.paused.wait()
            async with AgentRuntime(elsewhere, agent) as b:  # its start-up finishes the reset
                deadline = time.monotonic() + DEADLINE_SECONDS
                while (await elsewhere.load(KEY)).generation == 0:
                    assert time.monotonic() < deadline, "the other process never reset it"
                    await asyncio.sleep(0.05)
                here.go.set()  # A wakes: its archive is refused, and it reads what B did

                done = await asyncio.wait_for(resetting, DEADLINE_SECONDS / 3)
                assert (done.previous_session, done.generation) == ("s1#g0", 1)
                assert await b.session("a", "s1").transcript() == []
    finally:
        await here.close()
        await elsewhere.close()
