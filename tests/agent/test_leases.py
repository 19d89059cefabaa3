"""Two processes on one store: each session has one writer at a time.

Two runtimes on one SQLite file, each with its own connection, stand for two
processes (the server and ``run-schedule`` beside it, two replicas); a child
process that is SIGKILLed stands for one that died holding a session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent import Agent, AgentRuntime, Completed, ModelRequest, SQLiteStore, TurnInput
from agent._lease import SessionLease, new_holder, retire
from agent.model import ModelReply
from agent.ports import SessionKey
from agent.testing import ScriptedModel, reply
from tests.agent.child_process import DEADLINE_SECONDS, ChildProcess, start_children

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


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[SQLiteStore, SQLiteStore]]:
    """Two connections to one database file, as two processes have."""
    first = await SQLiteStore.open(tmp_path / "bot.db")
    second = await SQLiteStore.open(tmp_path / "bot.db")
    yield first, second
    await first.close()
    await second.close()


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


async def test_a_session_held_by_a_killed_process_is_taken_at_once(tmp_path: Path):
    db = tmp_path / "bot.db"
    await (await SQLiteStore.open(db)).close()  # the schema, before two processes open it
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        child = start("holder", [db])
        child.wait_for("HELD")
        store = await SQLiteStore.open(db)
        lease = SessionLease(store, KEY, new_holder(), seconds=30.0)
        try:
            assert await lease.take(wait=False) is None  # a live process holds it
            child.kill()
            # its ten minutes have not run out: the dead process is seen to be gone
            assert await lease.take(wait=False) is True
        finally:
            await lease.drop()
            retire(lease.holder)
            await store.close()
