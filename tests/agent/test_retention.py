"""Issue 21, point 5: history retention deletes what outlived its period, and keeps the rest.

With ``Agent(history_retention=...)``, a turn that ended longer ago loses its
input, messages, steps and result text, in the live tables and in the archive;
its identity, status, timestamps and usage stay, and ``expired_at`` says when
the rest went. A summary gives way to a notice once its oldest turn expired.
Each runs on every store.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    Compacting,
    Completed,
    ModelRequest,
    SQLiteStore,
    UnknownTurnError,
    Usage,
    UserMessage,
    tool,
)
from agent.core.records import SessionKey
from agent.core.retention import EXPIRED_NOTICE
from agent.testing import ScriptedModel, call, reply
from tests.agent.commit_watch import Compactions

KEY = SessionKey("a", "s")
HOUR = 3600.0
WAIT = 10.0
USAGE = Usage(input_tokens=12, output_tokens=5)


@tool
def note(text: str) -> str:
    """Note something down."""
    return f"noted {text}"


class Model:
    def __init__(self) -> None:
        self.answered: list[list[Any]] = []

    def scripted(self) -> ScriptedModel:
        def script(request: ModelRequest) -> Any:
            if request.step == "summary":
                return reply("S1: they shared secrets", usage=USAGE)
            last = request.messages[-1]
            if isinstance(last, UserMessage) and last.text.startswith("secret"):
                self.answered.append(list(request.messages))
                return reply("", call("note", {"text": last.text}), usage=USAGE)
            self.answered.append(list(request.messages))
            return reply("kept it", usage=USAGE)

        return ScriptedModel(script)


def agent(model: Model, **options: Any) -> Agent:
    return Agent(name="a", model=model.scripted(), tools=[note], history_retention=HOUR, **options)


async def all_text(store: Any) -> str:
    """Everything a SQLite file's tables hold, as text (the other stores: nothing to read)."""
    if not isinstance(store, SQLiteStore):
        return ""
    tables = ("messages", "steps", "turns", "archived_messages", "archived_steps", "archived_turns")
    return repr([await store.dump_table(table) for table in tables])


async def test_expired_turns_lose_their_payloads_and_keep_identity_status_and_usage(store):
    model, landed = Model(), Compactions(store)
    async with AgentRuntime(store, agent(model)) as runtime:
        session = runtime.session("a", "s")
        for n in (1, 2):
            await session.turn(f"secret {n}", turn_id=f"t{n}")
        before = {t.turn_id: t for t in await session.turns()}
        later = max(t.ended_at or 0 for t in before.values()) + HOUR + 1
        assert await runtime.expire_history(now=later) == 1  # one session's turns moved out
        await landed.wait_for(1)  # at once, or by the worker as it stops
        assert await runtime.expire_history(now=later) == 0  # nothing is expired twice
        live, turns = await session.transcript(), await session.turns()
        archive = await session.archived(0)
        again = await session.start("secret 1", turn_id="t1")  # a redelivery of an expired turn
        with pytest.raises(UnknownTurnError, match="history retention"):
            await session.result(again)
        third = await session.turn("anything kept?", turn_id="t3")
        stored = await all_text(store)

    assert (live, turns) == ([], [])
    assert archive is not None
    assert archive.transcript == []  # the messages are gone, not archived
    assert archive.steps == {}
    for turn_id, was in before.items():
        kept = archive.turns[turn_id]
        assert (kept.turn_id, kept.seq, kept.status) == (was.turn_id, was.seq, "completed")
        assert (kept.admitted_at, kept.ended_at) == (was.admitted_at, was.ended_at)
        assert kept.expired_at == later
        assert kept.input.text == ""
        assert isinstance(kept.result, Completed)
        assert kept.result.text == ""
        assert kept.result.usage == USAGE + USAGE  # the call and the answer
    assert "secret" not in stored
    # the model is told what happened, never shown half a turn
    assert isinstance(third, Completed)
    request = model.answered[-1]
    assert request[0].text.endswith(EXPIRED_NOTICE)
    assert [m.text for m in request[1:]] == ["anything kept?"]


async def test_only_turns_past_the_period_expire_and_a_summary_goes_with_its_oldest(store):
    model, landed = Model(), Compactions(store)
    compacting = Compacting(keep_turns=1, every=2)
    async with AgentRuntime(store, agent(model, compacting=compacting)) as runtime:
        session = runtime.session("a", "s")
        for n in (1, 2, 3):
            await session.turn(f"secret {n}", turn_id=f"t{n}")
        await landed.wait_for(1)  # t1 and t2 summarised and archived; t3 live
        state = await store.load(KEY)
        assert state.summary == "S1: they shared secrets"
        archived = await session.archived(0)
        assert archived is not None
        t2_ended = archived.turns["t2"].ended_at
        [t3] = await session.turns()
        assert t2_ended is not None
        assert t3.ended_at is not None
        # past t1 and t2's period, not yet t3's
        now = (t2_ended + t3.ended_at) / 2 + HOUR
        expired = await runtime.expire_history(now=now)
        await landed.wait_for(2)  # the summary's notice
        after = await store.load(KEY)
        archive = await session.archived(0)
        [kept] = await session.turns()
        live = await session.transcript()

    assert expired == 3  # t1 and t2 in the archive, and the session whose summary went
    assert after.summary == EXPIRED_NOTICE
    assert after.summary_since is None
    assert archive is not None
    assert {t: r.expired_at for t, r in archive.turns.items()} == {"t1": now, "t2": now}
    assert archive.transcript == []
    assert kept.turn_id == "t3"
    assert kept.expired_at is None
    assert [m.text for m in live if isinstance(m, UserMessage)] == ["secret 3"]


async def test_a_session_at_work_is_expired_by_its_worker_after_the_turn_not_mid_turn(store):
    in_tool, may_finish = asyncio.Event(), asyncio.Event()

    @tool
    async def wait_a_while() -> str:
        """Wait until the test lets the call finish."""
        in_tool.set()
        await may_finish.wait()
        return "waited"

    def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.text == "slow":
            return reply("", call("wait_a_while"))
        return reply("done")

    slow = Agent(
        name="a", model=ScriptedModel(script), tools=[wait_a_while], history_retention=HOUR
    )
    landed = Compactions(store)
    async with AgentRuntime(store, slow) as runtime:
        session = runtime.session("a", "s")
        await session.turn("secret 1", turn_id="t1")
        [first] = await session.turns()
        assert first.ended_at is not None
        second = await session.start("slow", turn_id="t2")
        await asyncio.wait_for(in_tool.wait(), WAIT)
        # past the first turn's period, not the second's, which has not ended yet
        cut = (first.ended_at + time.time()) / 2
        runtime.clock = lambda: cut + HOUR
        assert await runtime.expire_history() == 1  # at work: handed to its worker
        assert [t.turn_id for t in await session.turns()] == ["t1", "t2"]  # not mid-turn
        may_finish.set()
        await session.result(second)
        await landed.wait_for(1)  # the worker commits it right after the turn
        kept = [t.turn_id for t in await session.turns()]
        archive = await session.archived(0)

    assert kept == ["t2"]  # the turn's end expired the first one
    assert archive is not None
    assert sorted(archive.turns) == ["t1"]
    assert archive.turns["t1"].expired_at == cut + HOUR


async def swept(replica: AgentRuntime, *, now: float) -> int:
    """A replica's sweep, once the writer let the idle session go.

    The writer drops its lease just after its turn's result is given, so a sweep at
    that moment finds the session held (and rightly leaves it to its writer).
    """
    for _ in range(2000):
        if expired := await replica.expire_history(now=now):
            return expired
        await asyncio.sleep(0.005)
    raise AssertionError("the writer never let its idle session go")


async def test_a_replica_expires_a_session_another_wrote_and_the_writer_reads_it_back(tmp_path):
    first, second = Model(), Model()
    path = tmp_path / "shared.db"
    store_a, store_b = await SQLiteStore.open(path), await SQLiteStore.open(path)
    try:
        async with (
            AgentRuntime(store_a, agent(first)) as replica_a,
            AgentRuntime(store_b, agent(second)) as replica_b,
        ):
            writer = replica_a.session("a", "s")
            for n in (1, 2):
                await writer.turn(f"secret {n}", turn_id=f"t{n}")
            ended = max(t.ended_at or 0 for t in await writer.turns())
            # the other replica's sweep: once the session is idle it takes it and expires it
            assert await swept(replica_b, now=ended + HOUR + 1) == 1
            # the writer finds the session moved on when it takes it back, and reads it again
            await writer.turn("what is left?", turn_id="t3")
            kept = [t.turn_id for t in await writer.turns()]
    finally:
        await store_a.close()
        await store_b.close()

    assert kept == ["t3"]
    request = first.answered[-1]
    assert request[0].text.endswith(EXPIRED_NOTICE)
    assert [m.text for m in request[1:]] == ["what is left?"]


async def test_a_session_whose_every_turn_expired_still_cancels_and_runs_new_turns(store):
    model, landed = Model(), Compactions(store)
    async with AgentRuntime(store, agent(model)) as runtime:
        session = runtime.session("a", "s")
        await session.turn("secret 1", turn_id="t1")
        [first] = await session.turns()
        assert first.ended_at is not None
        assert await runtime.expire_history(now=first.ended_at + HOUR + 1) == 1
        await landed.wait_for(1)
        assert await session.transcript() == []  # nothing live is left
        # a turn queued behind a hold is cancelled: its ending looks for calls it owes
        await session.interrupt("looking into it")
        queued = await session.start("secret 2", turn_id="t2")
        assert await session.cancel(queued)
        cancelled = await session.result(queued)
        await session.resume_session()
        answered = await session.turn("anything?", turn_id="t3")

    assert cancelled.status == "cancelled"
    assert isinstance(answered, Completed)
    assert answered.text == "kept it"
