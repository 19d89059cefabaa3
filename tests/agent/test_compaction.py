"""Issue 21, point 5: compaction keeps a long-lived session's memory and requests flat.

An agent with `Compacting` has its model summarise a session's oldest turns once
enough have ended; the summary stands for them before the live messages of every
later request, and the turns, their messages and their steps move into the archive
of the session's generation. Each runs on every store.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    Compacting,
    Completed,
    ModelRequest,
    UnknownTurnError,
    UserMessage,
)
from agent.core.records import SessionKey
from agent.engine.retention import sweep_interval
from agent.models.anthropic.wire import api_messages
from agent.testing import ScriptedModel, reply
from tests.agent.commit_watch import Compactions

from .wire_checks import assert_valid_api_messages

KEY = SessionKey("a", "s")
WAIT = 10.0


async def count(session: Any, first: int, last: int) -> None:
    """Turns ``t<first>`` to ``t<last>``, each saying "count <n>"."""
    for n in range(first, last + 1):
        await session.turn(f"count {n}", turn_id=f"t{n}")


class Summaries:
    """A scripted model: answers each turn, and writes numbered summaries when asked."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.asked_to_summarise: list[ModelRequest] = []
        self.summary_texts: list[str] = []
        self.answered: list[list[Any]] = []
        self._fail_first = fail_first
        self.first_asked = asyncio.Event()

    def model(self) -> ScriptedModel:
        def script(request: ModelRequest) -> Any:
            if request.step == "summary":
                self.asked_to_summarise.append(request)
                self.summary_texts.append(request.messages[0].text)
                if self._fail_first and len(self.asked_to_summarise) == 1:
                    self.first_asked.set()
                    raise RuntimeError("the model is down")
                return reply(f"S{len(self.asked_to_summarise)}: they counted")
            self.answered.append(list(request.messages))
            return reply(f"answer to {request.messages[-1].text}")

        return ScriptedModel(script)

    def agent(self, keep: int = 2, every: int = 3) -> Agent:
        return Agent(
            name="a", model=self.model(), compacting=Compacting(keep_turns=keep, every=every)
        )


async def test_the_oldest_turns_give_way_to_a_summary_the_next_request_starts_with(store):
    model, compactions = Summaries(), Compactions(store)
    async with AgentRuntime(store, model.agent(keep=2, every=3)) as runtime:
        session = runtime.session("a", "s")
        await count(session, 1, 5)
        await compactions.wait_for(1)
        live = await session.transcript()
        kept = [t.turn_id for t in await session.turns()]
        archive = await session.archived(0)
        six = await session.turn("count 6", turn_id="t6")

    # the summary request carried the three oldest turns as text, with no tools
    [asked] = model.asked_to_summarise
    assert asked.tools == ()
    assert "Person: count 1" in model.summary_texts[0]
    assert "Assistant: answer to count 3" in model.summary_texts[0]
    assert "count 4" not in model.summary_texts[0]
    # the live state holds the two newest turns; the archive the three it moved out
    assert kept == ["t4", "t5"]
    assert [m.text for m in live if isinstance(m, UserMessage)] == ["count 4", "count 5"]
    assert archive is not None
    assert sorted(archive.turns) == ["t1", "t2", "t3"]
    assert [m.turn_id for m in archive.transcript] == ["t1", "t1", "t2", "t2", "t3", "t3"]
    # the next request starts with the summary, then the live messages, valid on the wire
    request = model.answered[-1]
    assert request[0].text.endswith("S1: they counted")
    assert [m.text for m in request[1:] if isinstance(m, UserMessage)] == [
        "count 4",
        "count 5",
        "count 6",
    ]
    assert_valid_api_messages(api_messages(request))
    assert isinstance(six, Completed)
    assert six.text == "answer to count 6"


async def test_a_compacted_session_reloads_as_it_was_and_its_old_turns_stay_retired(store):
    model, compactions = Summaries(), Compactions(store)
    async with AgentRuntime(store, model.agent(keep=2, every=3)) as runtime:
        session = runtime.session("a", "s")
        await count(session, 1, 5)
        await compactions.wait_for(1)

    model.answered.clear()
    async with AgentRuntime(store, model.agent(keep=2, every=3)) as runtime:
        session = runtime.session("a", "s")
        again = await session.start("count 1", turn_id="t1")  # a redelivery of a compacted turn
        with pytest.raises(UnknownTurnError):
            await session.result(again)
        await session.turn("count 6", turn_id="t6")
        [six] = [t for t in await session.turns() if t.turn_id == "t6"]

    assert again == "t1"
    assert six.seq == 6  # numbering goes on above the compacted turns
    [request] = model.answered
    assert request[0].text.endswith("S1: they counted")
    assert [m.text for m in request if isinstance(m, UserMessage)][1:] == [
        "count 4",
        "count 5",
        "count 6",
    ]


async def test_each_summary_builds_on_the_last_and_a_reset_starts_clean(store):
    model, compactions = Summaries(), Compactions(store)
    async with AgentRuntime(store, model.agent(keep=1, every=2)) as runtime:
        session = runtime.session("a", "s")
        await count(session, 1, 3)
        await compactions.wait_for(1)
        await count(session, 4, 5)
        await compactions.wait_for(2)
        state = await store.load(KEY)
        reset = await session.reset()
        after = await store.load(KEY)
        archive = await session.archived(0)

    assert len(model.asked_to_summarise) == 2
    assert model.summary_texts[1].startswith("Earlier summary:\nS1: they counted")
    assert state.summary == "S2: they counted"
    assert [t.turn_id for t in state.turns.values()] == ["t5"]
    assert reset.generation == 1
    assert (after.transcript.base, after.summary, after.compacted_through) == (0, None, 0)
    assert archive is not None
    assert sorted(archive.turns) == ["t1", "t2", "t3", "t4", "t5"]  # all of generation 0
    assert [m.turn_id for m in archive.transcript][::2] == ["t1", "t2", "t3", "t4", "t5"]


async def test_a_summary_that_fails_leaves_the_turns_live_and_is_tried_again(store):
    model, compactions = Summaries(fail_first=True), Compactions(store)
    async with AgentRuntime(store, model.agent(keep=2, every=3)) as runtime:
        session = runtime.session("a", "s")
        await count(session, 1, 5)
        await asyncio.wait_for(model.first_asked.wait(), WAIT)
        await session.turn("count 6", turn_id="t6")  # its end plans again
        await compactions.wait_for(1)
        kept = [t.turn_id for t in await session.turns()]

    assert len(model.asked_to_summarise) == 2
    assert compactions.landed == 1  # the failed try moved nothing out
    assert kept == ["t5", "t6"]


async def test_the_runtimes_sweep_compacts_a_session_that_outgrew_its_turns_with_none_since(
    store,
):
    model, compactions = Summaries(), Compactions(store)
    plain = Agent(name="a", model=model.model())
    async with AgentRuntime(store, plain) as runtime:
        session = runtime.session("a", "s")
        await count(session, 1, 5)
    assert model.asked_to_summarise == []  # no compaction configured yet

    async with AgentRuntime(store, model.agent(keep=2, every=3)) as runtime:
        assert sweep_interval([model.agent()]) == 3600.0  # hourly, by itself
        assert await runtime.tend_history() == 1  # one summary started
        await compactions.wait_for(1)
        kept = [t.turn_id for t in await runtime.session("a", "s").turns()]
        assert await runtime.tend_history() == 0  # nothing more is due

    assert kept == ["t4", "t5"]
    assert len(model.asked_to_summarise) == 1


def test_the_sweep_runs_at_a_quarter_of_the_shortest_retention_and_at_least_hourly():
    model = ScriptedModel(lambda request: reply("hi"))
    day, hour = 86_400.0, 3600.0
    assert sweep_interval([Agent(name="a", model=model)]) is None
    assert sweep_interval([Agent(name="a", model=model, history_retention=hour)]) == hour / 4
    assert sweep_interval([Agent(name="a", model=model, history_retention=day)]) == hour
