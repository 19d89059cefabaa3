"""A turn's lifecycle: the transition table, the one function that moves a turn, its phases.

The table in `agent.core.turns` is the engine's only list of how a turn's status
may change. These tests check the table itself, that `moved` refuses what it does
not list, and, by running turns through every kind of ending, that every status
change the engine writes is a move `moved` made, and that every edge of the table
is one the engine really takes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from typing import Any, get_args

import pytest

from agent import (
    Agent,
    AgentRuntime,
    Cancelled,
    Completed,
    Failed,
    Suspended,
    ToolContext,
    ToolMessage,
    TurnRecord,
    UserMessage,
    tool,
)
from agent.core import turns
from agent.core.hitl import InputRequest
from agent.core.phases import is_suspend_ending, outcome_of, phase_of
from agent.core.records import Commit, SessionKey, StoredMessage
from agent.core.turns import (
    POISON_RUNS,
    TURN_STATUSES_ENDED,
    TURN_STATUSES_UNFINISHED,
    TURN_TRANSITIONS,
    Interrupted,
    TurnInput,
    TurnStatus,
    may_move,
    moved,
)
from agent.errors import FatalToolError, ModelError, TurnError
from agent.testing import MemoryStore, ScriptedModel, call, reply

STATUSES: tuple[TurnStatus, ...] = get_args(TurnStatus)
EDGES = {(status, to) for status, nexts in TURN_TRANSITIONS.items() for to in nexts}

# Every move the engine makes, and where.
ENGINE_MOVES = {
    ("queued", "running"): "a turn opens: its first message commits",
    ("queued", "completed"): "a resumed turn (stored queued while it runs on) completes",
    ("queued", "failed"): "a resumed turn fails",
    ("queued", "cancelled"): "a turn is cancelled before it ever opened, or while resumed",
    ("queued", "suspended"): "a resumed turn asks a person again",
    ("running", "completed"): "the model's reply asks for no tool",
    ("running", "failed"): "a model or fatal tool failure",
    ("running", "cancelled"): "a cancel reaches a checkpoint boundary",
    ("running", "suspended"): "a tool asks a person",
    ("suspended", "queued"): "an answer resumes the turn",
    ("suspended", "cancelled"): "a cancel or reset withdraws the request",
    ("queued", "interrupted"): "a resumed turn the process died under too often is held",
    ("running", "interrupted"): "an interrupt, or the time limit, reaches a boundary",
    ("suspended", "interrupted"): "an exact-turn interrupt withdraws the request",
}


def record(status: TurnStatus, *, opening_index: int | None = 0, turn_id: str = "t1") -> TurnRecord:
    return TurnRecord(
        turn_id=turn_id,
        seq=1,
        status=status,
        input=TurnInput(text="hi"),
        opening_index=None if status == "queued" else opening_index,
        result=result_for(status, turn_id),
    )


def result_for(status: TurnStatus, turn_id: str = "t1") -> Any:
    request = InputRequest(id="ok", prompt="OK?", call_id="c1", tool="ask")
    return {
        "completed": Completed(turn_id=turn_id, text="done"),
        "failed": Failed(turn_id=turn_id, error="boom"),
        "cancelled": Cancelled(turn_id=turn_id, reason="requested"),
        "interrupted": Interrupted(turn_id=turn_id, reason="held"),
        "suspended": Suspended(turn_id=turn_id, request=request),
    }.get(status)


# -- the table ------------------------------------------------------------------


def test_the_table_has_a_row_for_every_status_and_ended_turns_go_nowhere():
    assert set(TURN_TRANSITIONS) == set(STATUSES)
    assert {s for s in STATUSES if not TURN_TRANSITIONS[s]} == TURN_STATUSES_ENDED
    assert TURN_STATUSES_UNFINISHED | TURN_STATUSES_ENDED | {"suspended"} == set(STATUSES)


def test_the_table_is_exactly_the_moves_the_engine_makes():
    assert set(ENGINE_MOVES) == EDGES


@pytest.mark.parametrize(("status", "to"), sorted(ENGINE_MOVES), ids="->".join)
def test_every_move_the_engine_makes_is_allowed(status: TurnStatus, to: TurnStatus):
    assert may_move(status, to)
    after = moved(record(status), to, result=result_for(to))
    assert (after.status, after.result) == (to, result_for(to))


FORBIDDEN = sorted((s, t) for s in STATUSES for t in STATUSES if (s, t) not in EDGES)


@pytest.mark.parametrize(("status", "to"), FORBIDDEN, ids="->".join)
def test_a_move_the_table_does_not_list_raises(status: TurnStatus, to: TurnStatus):
    before = record(status)
    with pytest.raises(TurnError, match=f"may not move from '{status}' to '{to}'") as caught:
        moved(before, to, result=result_for(to))
    assert caught.value.turn_id == "t1"
    assert before.status == status  # nothing changed


def test_an_answered_turn_is_queued_before_it_runs_again():
    # the table's odd edge: a resumed turn never goes back to "running"
    assert not may_move("suspended", "running")
    resumed = moved(record("suspended"), "queued", resumes=1)
    assert (resumed.status, resumed.result, resumed.resumes) == ("queued", None, 1)
    assert resumed.opening_index == 0  # it runs on under its old opening
    assert moved(resumed, "completed", result=result_for("completed")).status == "completed"


@pytest.mark.parametrize(
    ("status", "to", "result"),
    [
        ("running", "completed", None),
        ("running", "completed", Failed(turn_id="t1", error="boom")),
        ("running", "suspended", None),
        ("queued", "running", Completed(turn_id="t1", text="done")),
        ("suspended", "queued", result_for("suspended")),
    ],
    ids=["ending-without-result", "result-of-another-status", "suspend-without-request",
         "result-while-running", "resumed-keeps-old-suspend"],
)  # fmt: skip
def test_a_result_that_does_not_say_the_new_status_raises(status, to, result):
    with pytest.raises(TurnError, match="was given a result"):
        moved(record(status), to, result=result)


def test_opening_sets_the_index_and_keeps_the_rest():
    opened = moved(record("queued"), "running", opening_index=7)
    assert (opened.status, opened.opening_index, opened.seq, opened.input.text) == (
        "running", 7, 1, "hi",
    )  # fmt: skip


# -- phases -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("turn", "cancels", "phase"),
    [
        (record("queued"), {}, "queued"),
        (record("queued"), {"t1": "requested"}, "queued"),
        (moved(record("suspended"), "queued", resumes=1), {}, "resuming"),
        (record("running"), {}, "running"),
        (record("running"), {"t1": "requested"}, "running"),
        (record("suspended"), {}, "suspended"),
        (record("suspended"), {"t2": "requested"}, "suspended"),
        (record("suspended"), {"t1": "requested"}, "ending_suspended"),
        (record("completed"), {}, "completed"),
        (record("failed"), {}, "failed"),
        (record("cancelled"), {}, "cancelled"),
    ],
)
def test_phase_of_names_what_the_status_alone_does_not(turn, cancels, phase):
    assert phase_of(turn, cancels) == phase
    assert is_suspend_ending(turn, cancels) == (phase == "ending_suspended")


def test_outcome_is_told_for_endings_and_suspends_but_not_a_suspend_being_ended():
    assert outcome_of(record("queued"), {}) is None
    assert outcome_of(record("running"), {}) is None
    assert outcome_of(record("completed"), {}) == result_for("completed")
    assert outcome_of(record("suspended"), {}) == result_for("suspended")
    assert outcome_of(record("suspended"), {"t1": "reset"}) is None


# -- the engine goes through `moved`, and takes every edge of the table -------------


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> list[TurnRecord]:
    """Every record `moved` returned, wherever in agent/ it was imported."""
    made: list[TurnRecord] = []
    original = turns.moved

    def recording(record: TurnRecord, to: TurnStatus, **changes: Any) -> TurnRecord:
        after = original(record, to, **changes)
        made.append(after)
        return after

    patched = [
        name
        for name, module in list(sys.modules.items())
        if name.startswith("agent.") and getattr(module, "moved", None) is original
    ]
    for name in patched:
        monkeypatch.setattr(sys.modules[name], "moved", recording)
    assert any(name.startswith("agent.engine.") for name in patched)
    return made


class WatchedStore(MemoryStore):
    """A memory store that checks each turn record it writes came from `moved`."""

    def __init__(self, made: list[TurnRecord]) -> None:
        super().__init__()
        self._made = made
        self._statuses: dict[tuple[SessionKey, str], TurnStatus] = {}
        self._records: dict[tuple[SessionKey, str], TurnRecord] = {}
        self.taken: set[tuple[str, str]] = set()
        """The status changes written, as ``(from, to)``."""

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        await super().commit(key, commit)  # a refused write changes no status
        for written in commit.turns:
            before = self._statuses.get((key, written.turn_id))
            previous = self._records.get((key, written.turn_id))
            self._statuses[key, written.turn_id] = written.status
            self._records[key, written.turn_id] = written
            if before is None and written.status == "queued":
                continue  # admitted, not moved
            if (
                previous is not None
                and abs(written.runs - previous.runs) == 1
                and written == dataclasses.replace(previous, runs=written.runs)
            ):
                # a replay counts the run it begins, a clean close takes the count of the
                # run it stopped back: no status change
                continue
            assert before != written.status, f"{written.turn_id} rewritten as {before}"
            assert any(written is made for made in self._made), (
                f"{written.turn_id}: {before} -> {written.status} did not go through moved()"
            )
            self.taken.add((before or "queued", written.status))

    def died_during_a_run(self, key: SessionKey, status: TurnStatus) -> None:
        """Store what a process that died in the turn's last allowed run left behind."""
        record = TurnRecord(
            turn_id="t",
            seq=1,
            status=status,
            input=TurnInput(text="hi"),
            opening_index=0,
            resumes=1 if status == "queued" else 0,
            runs=POISON_RUNS,
        )
        opening = StoredMessage(0, UserMessage(turn_id="t", text="hi"))
        self._apply(key, Commit(messages=(opening,), turns=(record,), status="running"))
        self._statuses[key, "t"] = status
        self._records[key, "t"] = record


@tool
async def ask(ids: list[str], ctx: ToolContext, fatal: bool = False) -> str:
    """Ask a person each of ``ids`` in turn, then fail the turn if ``fatal``."""
    for input_id in ids:
        await ctx.request_input(id=input_id, prompt=f"{input_id}?")
    if fatal:
        raise FatalToolError("the answer made it impossible")
    return "asked"


def opening_text(request: Any) -> str:
    return next(
        m.text
        for m in request.messages
        if isinstance(m, UserMessage) and m.turn_id == request.turn_id
    )


def scripted(hanging: asyncio.Event) -> ScriptedModel:
    """A model whose every turn does what its opening text names."""

    async def script(request: Any) -> Any:
        text, last = opening_text(request), request.messages[-1]
        if isinstance(last, ToolMessage):
            return reply("done")
        if text == "fail":
            raise ModelError("the model is broken", retryable=False)
        if text == "hang":
            hanging.set()
            await asyncio.Event().wait()  # until the cancel aborts the request
        if text.startswith("ask"):
            ids = text.split(":")[1].split(",")
            return reply("", call("ask", {"ids": ids, "fatal": text.startswith("ask-fatal")}))
        return reply(f"you said {text}")

    return ScriptedModel(script)


async def test_every_status_change_the_engine_writes_goes_through_moved(moves):
    store = WatchedStore(moves)
    hung = asyncio.Event()
    agent = Agent(name="a", model=scripted(hung), tools=[ask])
    async with AgentRuntime(store, agent) as runtime:
        # opened at admission, then completed
        plain = runtime.session("a", "plain")
        assert (await plain.turn("hi")).text == "you said hi"

        # the second turn is queued behind the first, and opened by its own run
        both = runtime.session("a", "both")
        first, second = await both.start("one"), await both.start("two")
        assert {(await both.result(t)).status for t in (first, second)} == {"completed"}

        failing = runtime.session("a", "fail")
        assert isinstance(await failing.result(await failing.start("fail")), Failed)

        # cancelled while running, and a turn queued behind it, before it opened
        hanging = runtime.session("a", "hang")
        running = await hanging.start("hang")
        waiting = await hanging.start("two")
        await asyncio.wait_for(hung.wait(), 10)  # the running turn is in its model call
        assert await hanging.cancel(waiting)
        assert await hanging.cancel(running)
        assert isinstance(await hanging.result(running), Cancelled)
        assert isinstance(await hanging.result(waiting), Cancelled)

        # suspended, answered (queued again), completed
        answered = runtime.session("a", "answered")
        turn_id = await answered.start("ask:ok")
        assert isinstance(await answered.result(turn_id), Suspended)
        await answered.resume(turn_id, "ok", True)
        assert isinstance(await answered.result(turn_id), Completed)

        # answered, then suspended again straight from queued, then withdrawn
        again = runtime.session("a", "again")
        turn_id = await again.start("ask:first,second")
        assert isinstance(await again.result(turn_id), Suspended)
        await again.resume(turn_id, "first", True)
        suspended = await again.result(turn_id)
        assert isinstance(suspended, Suspended)
        assert suspended.request.id == "second"
        assert await again.cancel(turn_id)
        assert isinstance(await again.result(turn_id), Cancelled)

        # answered, then failed straight from queued
        fatal = runtime.session("a", "fatal")
        turn_id = await fatal.start("ask-fatal:ok")
        assert isinstance(await fatal.result(turn_id), Suspended)
        await fatal.resume(turn_id, "ok", True)
        assert isinstance(await fatal.result(turn_id), Failed)

        # a reset withdraws a suspended turn's request too
        reset = runtime.session("a", "reset")
        turn_id = await reset.start("ask:ok")
        assert isinstance(await reset.result(turn_id), Suspended)
        await reset.reset()

        # an exact-turn interrupt withdraws one too, and ends it interrupted
        stopped = runtime.session("a", "stopped")
        turn_id = await stopped.start("ask:ok")
        assert isinstance(await stopped.result(turn_id), Suspended)
        assert await stopped.interrupt_turn(turn_id)
        assert isinstance(await stopped.result(turn_id), Interrupted)

    # held at the next start: a process died under the turn's every run, POISON_RUNS in a
    # row, while it ran, and while it ran on after an answer (stored "queued")
    for status in ("running", "queued"):
        store.died_during_a_run(SessionKey("a", f"poison-{status}"), status)
    async with AgentRuntime(store, agent) as runtime:
        for status in ("running", "queued"):
            held = await runtime.session("a", f"poison-{status}").result("t")
            assert isinstance(held, Interrupted)
            assert held.reason == "held"

    # nothing bypassed moved(), and the table lists no move the engine never makes
    assert store.taken == EDGES
