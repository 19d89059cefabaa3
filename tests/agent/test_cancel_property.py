"""Rules 19-21 under random interleavings: cancel, replace, reset and crash never break history.

Hypothesis drives one SQLite-backed session through random sequences of plain and
replacing starts, cancels of known turns, resets, crash-and-recover (the runtime
closed where it stands, a new one opened on the same file) and short waits. The
scripted model's turns take several steps (batches of async, spinning and local
tools, sometimes a tool that parks for a person), so cancels land at every kind of
boundary. After each operation, and once all work has drained, the file is read
with a connection of its own and checked:

1. every tool call has exactly one result, right after it, in call order; only the
   newest reply of the one open (running, queued or parked) turn may still owe some;
2. nothing is written twice: one opening message per turn, one result per call id,
   one step memo per message, turns never interleave, transcript indexes are dense;
3. the session's status agrees with its turns (``running`` iff an opened turn is
   unfinished, ``suspended`` iff exactly one turn is parked, ``new`` only when empty);
4. a reset archives the whole generation (what was live before it, plus only the
   endings of the turns it stopped) and leaves the live tables empty;
5. the transcript, with a next message appended, is a request the Messages API
   (the fake's checks and ours) would accept.

Through the API it also checks what callers are promised: ``cancel`` says False
exactly for turns that already ended, a refused ``start`` (the session is parked)
asks nothing of the parked turn, a turn's reported ending never changes and is
emitted once, a turn that a cancel, replace or reset was accepted for ends
cancelled (or completed, if its final reply was being recorded) and never waits for
a person, and no turn is lost across crashes and resets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent import (
    Agent,
    AgentRuntime,
    AgentSession,
    AssistantMessage,
    Cancelled,
    Completed,
    Message,
    ModelReply,
    ModelRequest,
    SQLiteStore,
    ToolContext,
    ToolMessage,
    TriggerMessage,
    TurnRecord,
    UserMessage,
    tool,
)
from agent.core.messages import MESSAGE_ADAPTER
from agent.core.turns import TURN_RECORD_ADAPTER, SessionReset, TurnResult
from agent.errors import (
    ConflictError,
    ResumeConflictError,
    SessionSuspendedError,
    StoreConflictError,
    UnknownTurnError,
)
from agent.models.anthropic.wire import api_messages
from agent.testing import RecordingSink, ScriptedModel, call, reply
from tests.fakes.anthropic_api import _check_request

from .wire_checks import assert_valid_api_messages

AGENT, SESSION = "a", "s1"
WAIT = 5.0
"""Seconds any one turn may take to reach its end once nothing else is asked of it."""
UNFINISHED = frozenset({"queued", "running"})
OPEN = frozenset({"queued", "running", "suspended"})
TERMINAL_EVENTS = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})


# -- what a turn does --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    """A turn's script: one batch of ``(tool, n)`` calls per step, then a final text.

    ``delay`` is how many times the model yields before each reply, so a cancel can
    find the reply mid-stream.
    """

    steps: tuple[tuple[tuple[str, int], ...], ...]
    delay: int


def _tool_name(n: int) -> str:
    # mostly spinning async tools, some local ones, now and then one that parks
    return "ask" if n == 9 else "note" if n >= 6 else "spin"


calls = st.tuples(st.integers(0, 9).map(_tool_name), st.integers(0, 3))
plans = st.builds(
    Plan,
    steps=st.lists(st.lists(calls, min_size=1, max_size=3).map(tuple), max_size=3).map(tuple),
    delay=st.integers(0, 3),
)


@tool
async def spin(n: int) -> dict[str, int]:
    """An async tool that yields to the loop ``n`` times."""
    for _ in range(n):
        await asyncio.sleep(0)
    return {"spun": n}


@tool
def note(n: int) -> str:
    """A local tool: it runs inside its step's transaction."""
    return f"noted {n}"


@tool
async def ask(n: int, ctx: ToolContext) -> dict[str, Any]:
    """Parks the turn until U1 answers."""
    answer = await ctx.request_input(
        id="ok", prompt=f"go ahead with {n}?", schema={"type": "boolean"}, answerers={"user": "U1"}
    )
    return {"approved": answer}


def scripted(plans_by_turn: dict[str, Plan]) -> ScriptedModel:
    """A model that follows each turn's plan; a replay of a step gets the same reply."""

    async def script(request: ModelRequest) -> ModelReply:
        plan = plans_by_turn[request.turn_id]
        for _ in range(plan.delay):
            await asyncio.sleep(0)  # mid-stream: a cancel abandons the reply here
        step = sum(
            1
            for m in request.messages
            if isinstance(m, AssistantMessage) and m.turn_id == request.turn_id
        )
        if step < len(plan.steps):
            batch = [
                call(name, {"n": n}, id=f"{request.turn_id}-{step}-{i}")
                for i, (name, n) in enumerate(plan.steps[step])
            ]
            return reply(f"step {step}" if step % 2 else "", *batch)
        return reply(f"done {request.turn_id}")

    return ScriptedModel(script, chunk=3)


# -- operations --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Start:
    plan: Plan
    replace: bool = False


@dataclasses.dataclass(frozen=True)
class Cancel:
    pick: int
    """Index (modulo) into the turns admitted so far, finished or not."""


@dataclasses.dataclass(frozen=True)
class Reset:
    """Reset the session and wait for the reset to be carried out."""


@dataclasses.dataclass(frozen=True)
class Crash:
    """Close the runtime and its store where they stand, then open both again."""


@dataclasses.dataclass(frozen=True)
class Yield:
    times: int


@dataclasses.dataclass(frozen=True)
class Wait:
    pick: int
    timeout: float


@dataclasses.dataclass(frozen=True)
class Answer:
    value: bool


Op = Start | Cancel | Reset | Crash | Yield | Wait | Answer

operations = st.one_of(
    st.builds(Start, plans, st.just(False)),
    st.builds(Start, plans, st.just(True)),
    st.builds(Cancel, st.integers(0, 11)),
    st.builds(Yield, st.integers(0, 12)),
    st.builds(Wait, st.integers(0, 11), st.sampled_from([0.001, 0.01, 0.05])),
    st.builds(Reset),
    st.builds(Crash),
    st.builds(Answer, st.booleans()),
)


# -- reading the file --------------------------------------------------------------------


@dataclasses.dataclass
class Disk:
    """One consistent read of the session's rows."""

    status: str
    generation: int
    reset_through: int | None
    transcript: list[Message]
    turns: dict[str, TurnRecord]
    cancels: dict[str, str]
    steps: dict[tuple[str, str], Any]
    archives: dict[int, tuple[list[Message], dict[str, TurnRecord]]]


def read_disk(db: Path) -> Disk:
    with contextlib.closing(
        sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
    ) as conn:
        conn.execute("BEGIN")  # one read transaction: one snapshot of every table
        row = conn.execute(
            "SELECT id, status, generation, reset_through FROM sessions"
            " WHERE agent = ? AND session_id = ?",
            (AGENT, SESSION),
        ).fetchone()
        if row is None:
            conn.execute("COMMIT")
            return Disk("new", 0, None, [], {}, {}, {}, {})
        sid, status, generation, reset_through = row
        rows = conn.execute(
            "SELECT idx, body FROM messages WHERE id BETWEEN ? AND ? ORDER BY id",
            (sid << 32, sid << 32 | 0xFFFFFFFF),
        ).fetchall()
        assert [idx for idx, _ in rows] == list(range(len(rows))), "transcript has gaps"
        transcript = [MESSAGE_ADAPTER.validate_json(body) for _, body in rows]
        turns: dict[str, TurnRecord] = {}
        cancels: dict[str, str] = {}
        for body, cancel in conn.execute(
            "SELECT record, cancel FROM turns WHERE session = ? ORDER BY seq", (sid,)
        ):
            record = TURN_RECORD_ADAPTER.validate_json(body)
            turns[record.turn_id] = record
            if cancel is not None:
                cancels[record.turn_id] = cancel
        steps = {
            (turn_id, step_id): json.loads(result)
            for turn_id, step_id, result in conn.execute(
                "SELECT turn_id, step_id, result FROM steps WHERE session = ?", (sid,)
            )
        }
        archives: dict[int, tuple[list[Message], dict[str, TurnRecord]]] = {}
        for gen, idx, body in conn.execute(
            "SELECT generation, idx, body FROM archived_messages WHERE session = ?"
            " ORDER BY generation, idx",
            (sid,),
        ):
            messages = archives.setdefault(gen, ([], {}))[0]
            assert idx == len(messages), f"archive {gen} has gaps"
            messages.append(MESSAGE_ADAPTER.validate_json(body))
        for gen, body in conn.execute(
            "SELECT generation, record FROM archived_turns WHERE session = ? ORDER BY seq",
            (sid,),
        ):
            record = TURN_RECORD_ADAPTER.validate_json(body)
            archives.setdefault(gen, ([], {}))[1][record.turn_id] = record
        conn.execute("COMMIT")
    return Disk(status, generation, reset_through, transcript, turns, cancels, steps, archives)


# -- the invariants ----------------------------------------------------------------------


def blocks(transcript: list[Message]) -> dict[str, tuple[int, int]]:
    """Each turn's messages as ``[start, end)``; they must be one contiguous run."""
    spans: dict[str, tuple[int, int]] = {}
    for i, message in enumerate(transcript):
        start, end = spans.get(message.turn_id, (i, i))
        assert end == i, f"turn {message.turn_id} is interleaved with another at {i}"
        spans[message.turn_id] = (start, i + 1)
    return spans


def owed_tail(transcript: list[Message]) -> int | None:
    """The index of the newest reply if some of its calls have no result yet."""
    i = len(transcript) - 1
    answered = 0
    while i >= 0 and isinstance(transcript[i], ToolMessage):
        answered += 1
        i -= 1
    last = transcript[i] if i >= 0 else None
    if isinstance(last, AssistantMessage) and answered < len(last.tool_calls):
        return i
    return None


def check_history(transcript: list[Message], turns: dict[str, TurnRecord], where: str) -> None:
    """Rules 1 and 2 for one generation: calls answered once and in place, nothing twice."""
    spans = blocks(transcript)
    results_seen: set[str] = set()
    i = 0
    while i < len(transcript):
        message = transcript[i]
        record = turns.get(message.turn_id)
        assert record is not None, f"{where}: message {i} belongs to no turn ({message.turn_id})"
        start, _ = spans[message.turn_id]
        opening = isinstance(message, UserMessage | TriggerMessage)
        assert opening == (i == start), f"{where}: turn {message.turn_id} opens at {start}, not {i}"
        assert not isinstance(message, ToolMessage), f"{where}: result {i} follows no call"
        if opening:
            assert record.opening_index == i, f"{where}: {record} opened at {i}"
        i += 1
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            continue
        made = [c.id for c in message.tool_calls]
        answered: list[str] = []
        while i < len(transcript) and isinstance(transcript[i], ToolMessage):
            result = transcript[i]
            assert isinstance(result, ToolMessage)
            assert result.turn_id == message.turn_id, f"{where}: result {i} of another turn"
            assert result.call_id not in results_seen, f"{where}: two results for {result.call_id}"
            results_seen.add(result.call_id)
            answered.append(result.call_id)
            i += 1
        assert answered == made[: len(answered)], (
            f"{where}: results {answered} do not answer calls {made} in order"
        )
        if len(answered) < len(made):
            assert i == len(transcript), f"{where}: calls {made} left unanswered before {i}"
            assert record.status in OPEN, (
                f"{where}: turn {record.turn_id} is {record.status} but still owes "
                f"{made[len(answered) :]}"
            )
    for turn_id, record in turns.items():
        assert record.status != "failed", f"{where}: {record}"
        if record.opening_index is None:
            assert turn_id not in spans, f"{where}: unopened turn {turn_id} has messages"
            continue
        assert turn_id in spans, f"{where}: turn {turn_id} opened at {record.opening_index}, lost"
        if record.status == "completed":
            last = transcript[spans[turn_id][1] - 1]
            assert isinstance(last, AssistantMessage), f"{where}: {turn_id} ends on {last}"
            assert not last.tool_calls, f"{where}: completed turn {turn_id} ends on {last}"
            assert isinstance(record.result, Completed)
            assert record.result.text == last.text
    open_turns = [t for t in turns.values() if t.opening_index is not None and t.status in OPEN]
    assert len(open_turns) <= 1, f"{where}: two turns open at once: {open_turns}"
    if open_turns:
        assert transcript[-1].turn_id == open_turns[0].turn_id, (
            f"{where}: open turn {open_turns[0].turn_id} is not at the end"
        )


def check_steps(disk: Disk) -> None:
    """Each reply and result is memoized by exactly the step that committed it.

    A result committed while a call ahead of it was still owed (calls run concurrently)
    is memoized by its value, and placed, unchanged, once the calls ahead have theirs.
    """
    transcript = disk.transcript
    at = -1
    placed: dict[tuple[str, str], Message] = {}
    for i, message in enumerate(transcript):
        if isinstance(message, AssistantMessage):
            at = i
            memo = disk.steps.get((message.turn_id, f"model:{i}"))
            assert memo is not None, f"reply {i} has no memo"
            assert memo["message"] == i, f"reply {i} has memo {memo}"
        elif isinstance(message, ToolMessage):
            step = f"tool:{at}:{message.call_id}"
            memo = disk.steps.get((message.turn_id, step))
            assert memo is not None, f"result {i} has no memo"
            placed[(message.turn_id, step)] = message
            if "message" in memo:
                assert memo["message"] == i, f"result {i} has memo {memo}"
            else:
                assert (memo["result"], memo["is_error"]) == (message.result, message.is_error), (
                    f"result {i} is not the one its step settled: {memo}"
                )
    for (turn_id, step_id), memo in disk.steps.items():
        assert turn_id in disk.turns, f"step {step_id} of turn {turn_id} outlived its turn"
        if step_id.startswith(("model:", "tool:")) and "message" in memo:
            index = memo["message"]
            assert index < len(transcript), f"step {step_id} of {turn_id} points past the end"
            assert transcript[index].turn_id == turn_id, f"step {step_id} points at {index}"
        elif step_id.startswith("tool:") and (turn_id, step_id) not in placed:
            # settled, waiting for a call ahead of it: only the open turn's newest batch
            record = disk.turns[turn_id]
            assert record.status in ("queued", "running", "suspended"), (
                f"step {step_id} of ended turn {turn_id} settled but never placed"
            )
            assert int(step_id.split(":")[1]) == at, f"step {step_id} is not of the newest batch"


def check_status(status: str, transcript: list[Message], turns: dict[str, TurnRecord]) -> None:
    """Rule 3: the session's status says what its turns say."""
    parked = [t for t in turns.values() if t.status == "suspended"]
    assert len(parked) <= 1, f"two parked turns: {parked}"
    assert (status == "suspended") == bool(parked), f"status {status} with parked {parked}"
    opened = [t for t in turns.values() if t.status in UNFINISHED and t.opening_index is not None]
    assert (status == "running") == bool(opened), f"status {status} with open turns {opened}"
    if status == "new":
        assert not transcript, "a new session has messages"
    if not any(t.status in OPEN for t in turns.values()):
        assert status in ("new", "idle"), f"quiescent but {status}"
        assert owed_tail(transcript) is None, "quiescent but a call is owed"


def check_wire(transcript: list[Message], where: str) -> None:
    """Rule 5: the next model call, from what is settled, would be accepted."""
    cut = owed_tail(transcript)
    settled = transcript if cut is None else transcript[:cut]
    wire = api_messages([*settled, UserMessage(turn_id="probe", text="and now?")])
    try:
        assert_valid_api_messages(wire)
        _check_request({"model": "claude-sonnet-5-5", "max_tokens": 1, "messages": wire})
    except Exception as exc:
        raise AssertionError(f"{where}: the API would refuse {wire}: {exc}") from exc


def check_disk(disk: Disk, where: str) -> None:
    check_history(disk.transcript, disk.turns, where)
    check_steps(disk)
    check_status(disk.status, disk.transcript, disk.turns)
    check_wire(disk.transcript, where)
    for generation, (messages, turns) in disk.archives.items():
        label = f"{where} (archive {generation})"
        assert generation < disk.generation, label
        check_history(messages, turns, label)
        assert all(t.status in ("completed", "cancelled") for t in turns.values()), label
        assert owed_tail(messages) is None, f"{label}: a call is owed for ever"
        check_wire(messages, label)


# -- the driver --------------------------------------------------------------------------


class Errors(logging.Handler):
    """The engine logs what it cannot handle (a halted session, a task that died)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def engine_errors() -> Iterator[Errors]:
    errors = Errors()
    logger = logging.getLogger("agent")
    logger.addHandler(errors)
    try:
        yield errors
    finally:
        logger.removeHandler(errors)


class Driver:
    def __init__(self, db: Path, errors: Errors) -> None:
        self.db = db
        self.errors = errors
        self.plans: dict[str, Plan] = {}
        self.model = scripted(self.plans)
        self.sink = RecordingSink()
        self.admitted: list[str] = []
        self.doomed: dict[str, set[str]] = {}
        """Turns a cancel, replace or reset was accepted for: the reasons they may end with."""
        self.ended: dict[str, TurnResult] = {}
        """The first terminal result seen of each turn: it must never change."""
        self.store: SQLiteStore | None = None
        self.runtime: AgentRuntime | None = None
        self.step = 0

    async def open(self) -> None:
        self.store = await SQLiteStore.open(self.db, synchronous="OFF")
        agent = Agent(name=AGENT, model=self.model, tools=[spin, note, ask])
        self.runtime = AgentRuntime(self.store, agent, sink=self.sink)
        await self.runtime.start()

    async def close(self) -> None:
        if self.runtime is not None:
            await self.runtime.close()
            self.runtime = None
        if self.store is not None:
            await self.store.close()
            self.store = None

    @property
    def session(self) -> AgentSession:
        assert self.runtime is not None
        return self.runtime.session(AGENT, SESSION)

    async def memory(self) -> dict[str, TurnRecord]:
        return {t.turn_id: t for t in await self.session.turns()}

    def doom(self, turn_id: str, reason: str) -> None:
        self.doomed.setdefault(turn_id, set()).add(reason)

    async def run(self, op: Op) -> None:
        self.step += 1
        where = f"after op {self.step} ({op})"
        if isinstance(op, Start):
            await self.start(op)
        elif isinstance(op, Cancel):
            await self.cancel(op)
        elif isinstance(op, Reset):
            await self.reset(where)
        elif isinstance(op, Crash):
            await self.close()
            await self.open()
        elif isinstance(op, Yield):
            for _ in range(op.times):
                await asyncio.sleep(0)
        elif isinstance(op, Wait):
            await self.wait(op)
        else:
            await self.answer(op.value)
        await self.check(where)

    async def answer(self, value: bool) -> None:
        parked = await self.session.suspended()
        if parked is None:
            return
        try:
            await self.session.resume(parked.turn_id, parked.request.id, value, by="U1")
        except ResumeConflictError:
            if parked.turn_id not in self.doomed:
                raise
            # parked on its way to a cancel asked earlier, which got there first

    async def start(self, op: Start) -> None:
        turn_id = f"t{len(self.plans) + 1}"
        self.plans[turn_id] = op.plan
        before = await self.memory()
        parked = await self.session.suspended()
        asked = read_disk(self.db).cancels
        try:
            await self.session.start(turn_id, turn_id=turn_id, replace=op.replace)
        except StoreConflictError as exc:
            # one process, one session: nobody else can have moved a turn
            raise AssertionError(f"start of {turn_id} (replace={op.replace}): {exc!r}") from exc
        except SessionSuspendedError:
            assert parked is not None, "start refused, but no turn is parked"
            # a park whose cancel was accepted is ending: turns queue behind it instead
            assert parked.turn_id not in self.doomed, f"start refused by doomed {parked.turn_id}"
            # a replacing start never cancels a parked approval
            assert (await self.memory())[parked.turn_id].status == "suspended"
            assert await self.session.pending() == (parked.request,)
            assert read_disk(self.db).cancels == asked, "a refused start asked a turn to stop"
            return
        assert parked is None, f"{turn_id} was admitted while {parked.turn_id} is parked"
        self.admitted.append(turn_id)
        if op.replace:
            for record in before.values():
                if record.status in UNFINISHED:
                    self.doom(record.turn_id, "replaced")

    async def cancel(self, op: Cancel) -> None:
        if not self.admitted:
            return
        turn_id = self.admitted[op.pick % len(self.admitted)]
        record = (await self.memory()).get(turn_id)
        if record is None:  # archived by a reset
            try:
                await self.session.cancel(turn_id)
            except UnknownTurnError:
                return
            raise AssertionError(f"cancel of archived turn {turn_id} was not refused")
        try:
            cancelled = await self.session.cancel(turn_id)
        except ConflictError as exc:
            # one process, one session: nobody else can have moved a turn
            raise AssertionError(f"cancel of {record}: {exc!r}") from exc
        assert cancelled == (record.status in OPEN), f"cancel({record}) said {cancelled}"
        if not cancelled:
            return
        self.doom(turn_id, "requested")
        if record.status == "suspended":
            # nobody runs a parked turn: it ends at once, its request withdrawn
            ended = (await self.memory())[turn_id]
            assert ended.result == Cancelled(turn_id=turn_id, reason="requested"), ended
            assert await self.session.pending() == ()

    async def wait(self, op: Wait) -> None:
        if not self.admitted:
            return
        turn_id = self.admitted[op.pick % len(self.admitted)]
        if turn_id not in await self.memory():
            return
        with contextlib.suppress(TimeoutError):
            result = await asyncio.wait_for(self.session.result(turn_id), op.timeout)
            if result.status != "suspended":
                self.saw_end(turn_id, result)

    async def reset(self, where: str) -> None:
        before_memory = await self.memory()
        before = read_disk(self.db)
        try:
            done = await asyncio.wait_for(self.session.reset(), WAIT)
        except ConflictError as exc:
            # one process, one session: nobody else can have moved a turn
            raise AssertionError(f"reset of {before.turns}: {exc!r}") from exc
        after = read_disk(self.db)
        assert isinstance(done, SessionReset)
        archived = done.generation - 1
        assert done.previous_session == f"{SESSION}#g{archived}", done
        assert after.generation == done.generation, (after.generation, done)
        assert after.reset_through is None
        if before.reset_through is not None:
            return  # it joined a reset a crash left pending: only what follows is checked
        assert archived == before.generation, (before.generation, done)
        # the live generation is empty: nothing was admitted after the reset was asked
        assert after.transcript == [], f"{where}: live messages after a reset"
        assert after.turns == {}, f"{where}: live turns after a reset"
        assert after.status == "new"
        messages, turns = after.archives.get(archived, ([], {}))
        assert set(turns) == set(before.turns) == set(before_memory), f"{where}: turns lost"
        live_before = len(before.transcript)
        assert messages[:live_before] == before.transcript, f"{where}: archive rewrote history"
        stopped = {t for t, r in before.turns.items() if r.status in OPEN}
        for extra in messages[live_before:]:
            assert extra.turn_id in stopped, f"{where}: archive gained {extra}"
        for turn_id in stopped:
            ended = turns[turn_id]
            if before.turns[turn_id].status == "suspended":
                assert ended.result == Cancelled(turn_id=turn_id, reason="reset"), ended
            else:
                reason = before.cancels.get(turn_id, "reset")
                assert isinstance(ended.result, Completed) or ended.result == Cancelled(
                    turn_id=turn_id, reason=reason
                ), f"{where}: {ended}"
            self.doom(turn_id, "reset")
        from_api = await self.session.archived(archived)
        if messages or turns:
            assert from_api is not None
            assert from_api.transcript == messages
        else:
            assert from_api is None

    def saw_end(self, turn_id: str, result: TurnResult | None) -> None:
        assert result is not None
        first = self.ended.setdefault(turn_id, result)
        assert result == first, f"turn {turn_id} ended {first}, then {result}"

    async def check(self, where: str) -> None:
        assert not self.errors.records, [r.getMessage() for r in self.errors.records]
        disk = read_disk(self.db)
        check_disk(disk, where)
        # the API's view: a parked session says so, and says which turn
        memory = await self.memory()
        for turn_id, record in memory.items():
            if record.status not in OPEN:
                self.saw_end(turn_id, record.result)
        status = await self.session.status()
        parked = [t for t in memory.values() if t.status == "suspended"]
        assert len(parked) <= 1
        assert (status == "suspended") == bool(parked), f"{where}: {status} / {parked}"
        # a park whose cancel was taken is ending: it asks nobody any more
        asking = bool(parked) and parked[0].turn_id not in self.doomed
        assert ((await self.session.pending()) == ()) == (not asking), f"{where}: {parked}"
        if not any(t.status in OPEN for t in memory.values()):
            assert status in ("new", "idle"), f"{where}: quiescent but {status}"

    async def must_not_stay_parked(self, turn_id: str) -> None:
        """Nobody is to be asked for a turn that was asked to stop: it must not stay parked."""
        for _ in range(100):  # it may pass through a park on its way to the end
            await asyncio.sleep(0.01)
            if (await self.memory())[turn_id].status != "suspended":
                return
        raise AssertionError(
            f"{turn_id} was to stop ({self.doomed[turn_id]}) but waits for a person"
        )

    async def drain(self) -> None:
        """Answer every park and wait every turn out, then check the quiescent session."""
        for _ in range(100):
            ending = [
                t.turn_id
                for t in await self.session.turns()
                if t.status == "suspended" and t.turn_id in self.doomed
            ]
            if ending:  # a park whose cancel was taken: its run is ending it
                await self.must_not_stay_parked(ending[0])
                continue
            parked = await self.session.suspended()
            if parked is not None:
                await self.session.resume(parked.turn_id, parked.request.id, True, by="U1")
                continue
            unfinished = [t for t in await self.session.turns() if t.status in UNFINISHED]
            if not unfinished:
                break
            turn_id = unfinished[0].turn_id
            try:
                await asyncio.wait_for(self.session.result(turn_id), WAIT)
            except TimeoutError:
                raise AssertionError(f"turn {turn_id} never ended: {unfinished}") from None
        else:
            raise AssertionError("the session never settled")
        await self.check("after draining")
        disk = read_disk(self.db)
        memory = await self.memory()
        assert {t: r.status for t, r in memory.items()} == {
            t: r.status for t, r in disk.turns.items()
        }, "memory and disk disagree on a quiet session"
        assert disk.status in ("new", "idle")
        assert all(r.status in ("completed", "cancelled") for r in disk.turns.values())
        ended = dict(disk.turns)
        for _, turns in disk.archives.values():
            ended.update(turns)
        assert sorted(ended) == sorted(self.admitted), "a turn was lost or invented"
        for turn_id, record in ended.items():
            self.saw_end(turn_id, record.result)
        for turn_id, reasons in self.doomed.items():
            result = ended[turn_id].result
            assert isinstance(result, Completed) or (
                isinstance(result, Cancelled) and result.reason in reasons
            ), f"turn {turn_id} was to stop ({reasons}) but ended {result}"
        terminal = Counter(e.turn_id for e in self.sink.events if e.type in TERMINAL_EVENTS)
        assert max(terminal.values(), default=0) <= 1, f"a turn ended twice: {terminal}"
        for event in self.sink.events:
            if event.type == "turn.cancelled":
                assert ended[event.turn_id].status == "cancelled", event


async def play(ops: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as folder, engine_errors() as errors:
        driver = Driver(Path(folder) / "sessions.db", errors)
        await driver.open()
        try:
            await driver.check("at the start")
            for op in ops:
                await driver.run(op)
            await driver.drain()
        finally:
            await driver.close()


QUICK = Plan(steps=(), delay=0)
"""A turn whose one model reply ends it."""
PARKS = Plan(steps=((("ask", 0),),), delay=0)
"""A turn that parks on its first tool call."""


@settings(max_examples=80, deadline=None, database=None)
@given(st.lists(operations, max_size=12))
# Shrunk failures, kept as regressions. In the first three, the worker pops the queued
# turn that a cancel (or replace, or reset) is ending "at once" while that cancel's write
# is in flight: the turn is reported cancelled, then opens and runs (or parks) anyway.
@example([Start(QUICK), Start(QUICK), Cancel(pick=1)])
@example([Start(QUICK), Start(QUICK), Start(QUICK, replace=True)])
@example([Start(Plan(steps=(), delay=3)), Start(PARKS), Reset()])
# The cancel is asked while the turn's park is being written (the first restart commits
# the reply that calls the parking tool, the second recovers the turn right at that
# tool): cancel says True, and the turn stays parked waiting for a person.
@example([Start(PARKS), Crash(), Crash(), Cancel(pick=0)])
def test_random_cancels_replaces_resets_and_crashes_keep_the_history_sound(ops: list[Op]) -> None:
    asyncio.run(play(ops))
