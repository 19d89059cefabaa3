"""Steering: input added to a running turn, placed before its next model call.

A steer is stored as a step memo of its turn, ``steer:<turn>:<steer id>``, and
only placed in the transcript (a `UserMessage` whose ``steer`` names it) at the
turn's next safe point: before a model call, when no call of the last batch is
owed a result. Two rules keep a steer from being lost or answered twice:

- A steer is marked here, in memory, before its write is queued, and the run
  places it only once the write landed. A run about to write the reply that ends
  the turn first checks, in one step with no await, that nothing is marked; if a
  steer is, the reply commits as an ordinary message and the model is asked again
  with the steer; if none is, the turn is closing and every later steer is
  refused.
- A steer stored but not yet placed when the process died is read back from the
  store when the turn is replayed, so the replay places it as the first run would
  have.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agent._json import JsonValue
from agent.core.messages import Message, UserMessage

__all__ = ["STEER_STEP_PREFIX", "PendingSteer", "SteerBox", "steer_step", "steers_placed"]

STEER_STEP_PREFIX = "steer:"


def steer_step(turn_id: str, steer_id: str) -> str:
    """The step id a steer's memo is stored under."""
    return f"{STEER_STEP_PREFIX}{turn_id}:{steer_id}"


@dataclass(slots=True, kw_only=True)
class PendingSteer:
    """A steer taken for a running turn and not yet placed in its transcript."""

    steer_id: str
    text: str
    by: str | None
    number: int
    """Its place among the turn's steers, from 1: they are placed in this order."""
    landed: asyncio.Future[bool] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """True once its memo is on disk; False when the write failed (it was never taken)."""

    def memo(self) -> JsonValue:
        """What its step stores."""
        return {"text": self.text, "by": self.by, "number": self.number}

    @classmethod
    def from_memo(cls, steer_id: str, memo: JsonValue) -> PendingSteer:
        """A steer read back from its stored memo: it landed long ago."""
        body = memo if isinstance(memo, dict) else {}
        by = body.get("by")
        number = body.get("number")
        steer = cls(
            steer_id=steer_id,
            text=str(body.get("text", "")),
            by=by if isinstance(by, str) else None,
            number=number if isinstance(number, int) else 0,
        )
        steer.landed.set_result(True)
        return steer

    def message(self, turn_id: str) -> UserMessage:
        """The transcript message that places it."""
        return UserMessage(turn_id=turn_id, text=self.text, user=self.by, steer=self.steer_id)


def steers_placed(transcript: list[Message], turn_id: str, start: int) -> dict[str, int]:
    """The steers of ``turn_id`` already in the transcript, by id: their index."""
    placed: dict[str, int] = {}
    # a compacted session holds nothing below its base (a turn's messages never are)
    for index in range(max(start, getattr(transcript, "base", 0)), len(transcript)):
        message = transcript[index]
        if isinstance(message, UserMessage) and message.steer and message.turn_id == turn_id:
            placed[message.steer] = index
    return placed


class SteerBox:
    """The steers of one session's running turns that are not placed yet, in memory."""

    def __init__(self) -> None:
        self._pending: dict[str, list[PendingSteer]] = {}
        self._closing: set[str] = set()

    def is_closing(self, turn_id: str) -> bool:
        """Whether the reply that ends ``turn_id`` is being written: no steer may come."""
        return turn_id in self._closing

    def pending(self, turn_id: str) -> list[PendingSteer]:
        """The turn's steers not placed yet, in the order they are to be placed."""
        return sorted(self._pending.get(turn_id, ()), key=lambda s: s.number)

    def find(self, turn_id: str, steer_id: str) -> PendingSteer | None:
        """The turn's steer with this id, if it waits here."""
        return next((s for s in self._pending.get(turn_id, ()) if s.steer_id == steer_id), None)

    def add(self, turn_id: str, steer: PendingSteer) -> None:
        """Mark a steer taken for the turn (before its write is queued)."""
        self._pending.setdefault(turn_id, []).append(steer)

    def drop(self, turn_id: str, steer_ids: set[str]) -> None:
        """Forget steers that were placed, or whose write failed."""
        kept = [s for s in self._pending.get(turn_id, ()) if s.steer_id not in steer_ids]
        if kept:
            self._pending[turn_id] = kept
        else:
            self._pending.pop(turn_id, None)

    def close_unless_steered(self, turn_id: str) -> bool:
        """Close the turn to steering unless a steer is marked; True when it closed.

        Called with no await between it and the write of the turn's final reply, so a
        steer is either seen here or refused after.
        """
        if self._pending.get(turn_id):
            return False
        self._closing.add(turn_id)
        return True

    def reopen(self, turn_id: str) -> None:
        """The final reply's write failed: the turn goes on, and may be steered again."""
        self._closing.discard(turn_id)

    def forget(self, turn_id: str) -> None:
        """The turn's run is over: what it did not place is not to be placed by it."""
        self._pending.pop(turn_id, None)
        self._closing.discard(turn_id)
