"""Held turns: what start-up stopped resuming, and an operator's retry or drop of one.

A turn the process died under `POISON_RUNS` times in a row ends `Interrupted`
with reason ``held`` (see `TurnRun`), and its session is held in the same write,
as a session interrupt holds it: the turns queued behind it wait. It stays listed
as held until an operator decides: ``drop`` keeps it as it ended; ``retry`` admits
its input again as a new turn of the same session (its record's ``retry_of``
names the held one). Either decision is a step memo ``hold:<turn id>`` stored
under the held turn, so it is made once, and it releases the session's hold in
the same write, so the queued turns run.

These functions work on a store alone (``python -m bot turns --held``, another
process than the bot's). They write under the session's lease, as a runtime
does, so a running runtime reads the session again before its next write, and
its sweep (`AgentRuntime`, ``sweep_seconds``) runs the queued retry within
seconds; with no runtime running, the next start runs it. A runtime's own
session retries through `AgentSession.retry`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agent._json import JsonValue
from agent.core.records import Commit, SessionKey, StoredSession, StoredStep
from agent.core.turns import Interrupted, TurnRecord
from agent.engine.lease import SessionLease, drop_quietly, new_holder, retire
from agent.errors import ConflictError, UnknownTurnError
from agent.ports import SessionStore

__all__ = ["HeldTurn", "drop_held", "held_turns", "is_undecided_hold", "retry_commit", "retry_held"]

HELD = "held"
"""The `Interrupted` reason of a turn start-up held instead of resuming."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldTurn:
    """A held turn, and why it was held."""

    key: SessionKey
    record: TurnRecord
    detail: str


async def held_turns(store: SessionStore) -> list[HeldTurn]:
    """Every held turn no operator has retried or dropped yet, in order per session."""
    held = []
    for key, record in await store.interrupted_turns():
        steps = await store.load_steps(key, record.turn_id)
        if is_undecided_hold(record, steps):
            assert isinstance(record.result, Interrupted)
            held.append(HeldTurn(key=key, record=record, detail=record.result.detail))
    return held


def is_undecided_hold(record: TurnRecord, steps: dict[str, JsonValue]) -> bool:
    """Whether ``record`` is a held turn nobody retried or dropped (``steps``: its memos)."""
    result = record.result
    return (
        isinstance(result, Interrupted)
        and result.reason == HELD
        and _decision(record.turn_id) not in steps
    )


async def drop_held(store: SessionStore, turn_id: str) -> HeldTurn:
    """Stop listing a held turn: it stays interrupted, nothing more runs of it.

    Raises:
        UnknownTurnError: No held turn has that id (or it was decided already).
    """
    held = await _find(store, turn_id)
    async with _leased(store, held.key) as holder:
        held = await _find(store, turn_id)  # decided meanwhile?
        mark = _mark(held.record.turn_id, {"dropped": True})
        await store.commit(held.key, Commit(steps=(mark,), release_hold=True, holder=holder))
    return held


async def retry_held(store: SessionStore, turn_id: str) -> str:
    """Admit a held turn's input again as a new turn of its session; returns the new id.

    The new turn is queued behind the session's other unfinished turns. A running
    runtime hosting the session runs it within seconds (its sweep); otherwise the
    runtime runs it at its next start. Mind that the held turn may have done any
    part of its work before the process died under it.

    Raises:
        UnknownTurnError: No held turn has that id (or it was decided already).
        ConflictError: The session is waiting for a person's answer, so no turn may
            queue behind it; answer or cancel that first.
    """
    held = await _find(store, turn_id)
    async with _leased(store, held.key) as holder:
        held = await _find(store, turn_id)  # decided meanwhile?
        state = await store.load(held.key)
        if state.status == "suspended":
            raise ConflictError(f"{held.key} waits for an answer; answer or cancel it first")
        new_id, commit = retry_commit(state, held.record, decides_hold=True)
        await store.commit(held.key, dataclasses.replace(commit, holder=holder))
    return new_id


def retry_commit(
    state: StoredSession, record: TurnRecord, *, decides_hold: bool, new_id: str | None = None
) -> tuple[str, Commit]:
    """The write that admits ``record``'s input again as a new queued turn of ``state``.

    The new turn's id is ``new_id``, or else ``<turn id>.retry`` (with a ``'`` added
    per earlier retry); its record's ``retry_of`` names ``record``. With
    ``decides_hold`` the same write stores the hold's decision, so the held turn is no
    longer listed, and releases the session's hold, so the retry runs.

    Returns:
        The new turn's id, and the commit.
    """
    if new_id is None:
        new_id = f"{record.turn_id}.retry"
        while new_id in state.turns or new_id in state.retired:
            new_id += "'"
    seq = state.next_seq()
    retry = TurnRecord(
        turn_id=new_id,
        seq=seq,
        status="queued",
        input=record.input,
        retry_of=record.turn_id,
        admitted_at=time.time(),
    )
    marks = (_mark(record.turn_id, {"retried_as": new_id}),) if decides_hold else ()
    return new_id, Commit(turns=(retry,), steps=marks, release_hold=decides_hold)


@asynccontextmanager
async def _leased(store: SessionStore, key: SessionKey) -> AsyncIterator[str]:
    """Hold ``key``'s lease as a holder of this process, as a runtime does before it writes.

    A runtime that held the session before reads it again before its next write
    (the lease changed hands), so its copy in memory never misses this write.
    """
    holder = new_holder()
    lease = SessionLease(store, key, holder)
    try:
        await lease.take()
        yield lease.token
    finally:
        await drop_quietly(lease)
        retire(holder)


async def _find(store: SessionStore, turn_id: str) -> HeldTurn:
    for held in await held_turns(store):
        if held.record.turn_id == turn_id:
            return held
    raise UnknownTurnError(f"no held turn {turn_id} (python -m bot turns --held lists them)")


def _decision(turn_id: str) -> str:
    return f"hold:{turn_id}"


def _mark(turn_id: str, memo: dict[str, JsonValue]) -> StoredStep:
    return StoredStep(_decision(turn_id), turn_id, memo)
