"""`Steers`: input added to the session's running turn (`AgentSession.steer`).

The steer is marked in the session's `SteerBox` before its memo is written, under
the session's lock and lease like a cancel; the turn's run places it before its
next model call once the write landed (see `agent.engine.turn.steering`). A
process that does not write the session hands the steer to the one that does.
"""

from __future__ import annotations

import asyncio
import uuid

from agent.core.messages import UserMessage
from agent.core.records import Commit, StoredSession, StoredStep
from agent.core.steering import Steered, Steering
from agent.core.turns import TurnRecord
from agent.engine.session._inbox import Inbox
from agent.engine.session._state import SessionState, unfinished_turns
from agent.engine.session._writer import Writer
from agent.engine.turn.steering import PendingSteer, steer_step, steers_placed
from agent.errors import SteerRefusedError

__all__ = ["Steers", "steering_of"]


class Steers:
    """Takes steering for one session's running turn."""

    def __init__(self, shared: SessionState, writer: Writer, inbox: Inbox) -> None:
        self._shared = shared
        self._writer = writer
        self._inbox = inbox

    async def steer(
        self, text: str, *, turn_id: str | None, steer_id: str | None, by: str | None
    ) -> Steered:
        """Add ``text`` to the running turn; see `AgentSession.steer`."""
        self._shared.host.check_open()
        steer_id = steer_id or uuid.uuid4().hex
        may_hand_over = self._inbox.may_hand_over(self._shared.host.hands_over)
        async with self._writer.locked_and_leased(wait=not may_hand_over) as held:
            if not held:
                state = await self._shared.reread_unless_busy()
                record = self._target(state, turn_id)
                body = {"text": text, "by": by, "turn_id": record.turn_id}
                await self._inbox.hand_over("steer", steer_id, body)
                return Steered(turn_id=record.turn_id, steer_id=steer_id, handed_over=True)
            state = await self._shared.loaded()
            if (known := self._known(state, steer_id)) is not None:
                return known  # the same steer again (a redelivered message): taken once
            record = self._target(state, turn_id)
            self._shared.refuse_if_halted()
            return await self._take(state, record, text, steer_id, by)

    async def _take(
        self, state: StoredSession, record: TurnRecord, text: str, steer_id: str, by: str | None
    ) -> Steered:
        box = self._shared.steers
        turn = record.turn_id
        placed = steers_placed(state.transcript, turn, record.opening_index or 0)
        steer = PendingSteer(
            steer_id=steer_id, text=text, by=by, number=len(placed) + len(box.pending(turn)) + 1
        )
        # Marked before the write is queued, so a run about to close the turn sees it;
        # the run places it only once the write has landed.
        box.add(turn, steer)
        commit = Commit(
            steps=(StoredStep(steer_step(turn, steer_id), turn, steer.memo()),),
            expect=((turn, record.status),),
        )
        try:
            caller_left = await self._writer.commit_shielded(commit)
        except BaseException:
            box.drop(turn, {steer_id})
            steer.landed.set_result(False)
            raise
        steer.landed.set_result(True)
        if caller_left:
            raise asyncio.CancelledError  # taken all the same
        return Steered(turn_id=turn, steer_id=steer_id)

    def _known(self, state: StoredSession, steer_id: str) -> Steered | None:
        """The steer with this id, if one was taken already (placed, or waiting)."""
        for record in unfinished_turns(state, suspended_too=True):
            if self._shared.steers.find(record.turn_id, steer_id) is not None:
                return Steered(turn_id=record.turn_id, steer_id=steer_id)
        for message in reversed(state.transcript):
            if isinstance(message, UserMessage) and message.steer == steer_id:
                return Steered(turn_id=message.turn_id, steer_id=steer_id)
        return None

    def _target(self, state: StoredSession, turn_id: str | None) -> TurnRecord:
        """The turn at work that may take steering, or the refusal that says why not."""
        key = self._shared.key
        at_work = [
            t
            for t in unfinished_turns(state, suspended_too=True)
            if t.opening_index is not None or t.turn_id == self._shared.active
        ]
        record = at_work[0] if at_work else None
        if record is None or (turn_id is not None and record.turn_id != turn_id):
            named = f"turn {turn_id} is not running" if turn_id else "no turn is running"
            raise SteerRefusedError(
                f"{key}: {named} to steer; start a turn instead", reason="no_turn", turn_id=turn_id
            )
        turn = record.turn_id
        if record.status == "suspended":
            raise SteerRefusedError(
                f"{key}: turn {turn} waits for a person's answer; steer it after the answer",
                reason="suspended",
                turn_id=turn,
            )
        stopping = state.cancels.get(turn)
        if stopping is not None:
            raise SteerRefusedError(
                f"{key}: turn {turn} is stopping ({stopping}); start a turn instead",
                reason="stopping",
                turn_id=turn,
            )
        running = self._shared.running
        if running is not None and running.turn_id == turn and running.stop_reason:
            raise SteerRefusedError(
                f"{key}: turn {turn} is stopping ({running.stop_reason}); start a turn instead",
                reason="stopping",
                turn_id=turn,
            )
        if self._shared.steers.is_closing(turn):
            raise SteerRefusedError(
                f"{key}: turn {turn} is writing its final reply; start a turn instead",
                reason="finishing",
                turn_id=turn,
            )
        return record


def steering_of(
    state: StoredSession, record: TurnRecord, waiting: list[PendingSteer]
) -> tuple[Steering, ...]:
    """The steering of ``record``'s turn: what its transcript holds, then what waits."""
    start = record.opening_index if record.opening_index is not None else len(state.transcript)
    placed = [
        Steering(steer_id=message.steer, text=message.text, by=message.user, index=index)
        for index, message in enumerate(state.transcript[start:], start)
        if isinstance(message, UserMessage) and message.steer and message.turn_id == record.turn_id
    ]
    waits = [Steering(steer_id=s.steer_id, text=s.text, by=s.by) for s in waiting]
    return (*placed, *waits)
