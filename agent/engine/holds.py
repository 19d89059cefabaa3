"""Held turns: what start-up stopped resuming, and an operator's retry or drop of one.

A turn the process died under `POISON_RUNS` times in a row ends `Interrupted`
with reason ``held`` (see `TurnRun`). It stays listed as held until an operator
decides: ``drop`` keeps it as it ended; ``retry`` admits its input again as a
new turn of the same session (its record's ``retry_of`` names the held one),
which the runtime runs at its next start. Either decision is a step memo
``hold:<turn id>`` stored under the held turn, so it is made once.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.core.records import Commit, SessionKey, StoredStep
from agent.core.turns import Interrupted, TurnRecord
from agent.errors import ConflictError, UnknownTurnError
from agent.ports import SessionStore

__all__ = ["HeldTurn", "drop_held", "held_turns", "retry_held"]

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
        result = record.result
        if not isinstance(result, Interrupted) or result.reason != HELD:
            continue
        if _decision(record.turn_id) in await store.load_steps(key, record.turn_id):
            continue
        held.append(HeldTurn(key=key, record=record, detail=result.detail))
    return held


async def drop_held(store: SessionStore, turn_id: str) -> HeldTurn:
    """Stop listing a held turn: it stays interrupted, nothing more runs of it.

    Raises:
        UnknownTurnError: No held turn has that id (or it was decided already).
    """
    held = await _find(store, turn_id)
    await store.commit(held.key, Commit(steps=(_mark(held, {"dropped": True}),)))
    return held


async def retry_held(store: SessionStore, turn_id: str) -> str:
    """Admit a held turn's input again as a new turn of its session; returns the new id.

    The new turn is queued: the runtime runs it at its next start, after the
    session's other unfinished turns. Mind that the held turn may have done any
    part of its work before the process died under it.

    Raises:
        UnknownTurnError: No held turn has that id (or it was decided already).
        ConflictError: The session is waiting for a person's answer, so no turn may
            queue behind it; answer or cancel that first.
    """
    held = await _find(store, turn_id)
    state = await store.load(held.key)
    if state.status == "suspended":
        raise ConflictError(f"{held.key} waits for an answer; answer or cancel it first")
    new_id = f"{turn_id}.retry"
    while new_id in state.turns:
        new_id += "'"
    seq = max((t.seq for t in state.turns.values()), default=0) + 1
    record = TurnRecord(
        turn_id=new_id, seq=seq, status="queued", input=held.record.input, retry_of=turn_id
    )
    mark = _mark(held, {"retried_as": new_id})
    await store.commit(held.key, Commit(turns=(record,), steps=(mark,)))
    return new_id


async def _find(store: SessionStore, turn_id: str) -> HeldTurn:
    for held in await held_turns(store):
        if held.record.turn_id == turn_id:
            return held
    raise UnknownTurnError(f"no held turn {turn_id} (python -m bot turns --held lists them)")


def _decision(turn_id: str) -> str:
    return f"hold:{turn_id}"


def _mark(held: HeldTurn, memo: dict[str, object]) -> StoredStep:
    return StoredStep(_decision(held.record.turn_id), held.record.turn_id, memo)
