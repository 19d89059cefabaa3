"""`Holding`: interrupting a turn or the whole session, and releasing a held session.

An exact-turn interrupt is a stop request like a cancel, with the reserved reason
``interrupted``: the turn ends `Interrupted` at its next checkpoint boundary and
the next queued turn runs. A session interrupt does that to the turn at work and
holds the session in the same write: its queued turns, and the new ones admitted
meanwhile, wait until `release` (`AgentSession.resume_session`). The poison-turn
hold (`TurnRun`) writes the same hold. The hold is stored, so it outlives a
restart; a process that does not write the session hands the work over.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from agent.core.records import Commit, apply_commit
from agent.engine.session._cancel import Cancels
from agent.engine.session._inbox import Inbox
from agent.engine.session._state import SessionState, unfinished_turns
from agent.engine.session._worker import Worker
from agent.engine.session._writer import Writer
from agent.errors import RuntimeClosedError

__all__ = ["INTERRUPTED_BY_OPERATOR", "Holding"]

INTERRUPTED_BY_OPERATOR = "interrupted"
"""The stop reason of an exact-turn or session interrupt (see `INTERRUPT_REASONS`)."""


class Holding:
    """Interrupts and holds one session, and releases it."""

    def __init__(
        self, shared: SessionState, writer: Writer, worker: Worker, cancels: Cancels, inbox: Inbox
    ) -> None:
        self._shared = shared
        self._writer = writer
        self._worker = worker
        self._cancels = cancels
        self._inbox = inbox

    async def interrupt_turn(self, turn_id: str) -> bool:
        """Stop one turn for good; see `AgentSession.interrupt_turn`."""
        return await self._cancels.cancel(turn_id, INTERRUPTED_BY_OPERATOR)

    async def interrupt(self, why: str) -> list[str]:
        """Stop the turn at work and hold the session; see `AgentSession.interrupt`."""
        self._shared.host.check_open()
        may_hand_over = self._inbox.may_hand_over(self._shared.host.hands_over)
        async with self._writer.locked_and_leased(wait=not may_hand_over) as held:
            if not held:
                await self._inbox.hand_over("hold", uuid.uuid4().hex, {"why": why})
                return []
            state = await self._shared.loaded()
            self._shared.refuse_if_halted()
            # the turn at work: opened and not ended (the queued ones stay queued)
            at_work = [
                t
                for t in unfinished_turns(state)
                if t.opening_index is not None or t.turn_id == self._shared.active
            ]
            plan = self._cancels.plan(state, at_work, INTERRUPTED_BY_OPERATOR)
            commit = plan.commit(Commit(hold=why, release_hold=state.hold is not None))
            if await self._cancels.commit_plan(state, plan, commit):
                raise asyncio.CancelledError
            return [t.turn_id for t in at_work]

    async def release(self) -> bool:
        """Release the session's hold; see `AgentSession.resume_session`."""
        self._shared.host.check_open()
        may_hand_over = self._inbox.may_hand_over(self._shared.host.hands_over)
        async with self._writer.locked_and_leased(wait=not may_hand_over) as held:
            if not held:
                state = await self._shared.reread_unless_busy()
                if state.hold is None:
                    return False
                await self._inbox.hand_over("release", uuid.uuid4().hex, None)
                return True
            state = await self._shared.loaded()
            if state.hold is None:
                return False
            self._shared.refuse_if_halted()
            commit = Commit(release_hold=True)
            caller_left = await self._writer.commit_shielded(commit)
            apply_commit(state, commit)
            if not self._shared.queued_unfinished:
                self._worker.queue_unfinished_turns(state)
            with contextlib.suppress(RuntimeClosedError):
                self._worker.start()
            if caller_left:
                raise asyncio.CancelledError
            return True
