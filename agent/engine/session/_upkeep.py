"""`Upkeep`: what the runtime does to a session at start-up, in its sweep, and as it closes.

None of it is for an application: it recovers what a stopped process left, picks
up what another process wrote, carries out what others handed over, and lets
the session go at close. `AgentSession.upkeep` is the runtime's handle on it.
"""

from __future__ import annotations

from agent.engine.lease import drop_quietly
from agent.engine.session._admission import Admission
from agent.engine.session._answers import Answers
from agent.engine.session._cancel import Cancels
from agent.engine.session._inbox import HandOverTarget, Inbox
from agent.engine.session._state import SessionState
from agent.engine.session._waiters import Waiters
from agent.engine.session._worker import Worker
from agent.engine.session._writer import Writer

__all__ = ["Upkeep"]


class Upkeep:
    """The runtime's calls on one session."""

    def __init__(
        self,
        session: HandOverTarget,
        shared: SessionState,
        *,
        admission: Admission,
        answers: Answers,
        cancels: Cancels,
        worker: Worker,
        writer: Writer,
        inbox: Inbox,
        waiters: Waiters,
    ) -> None:
        self._session = session
        self._shared = shared
        self._admission = admission
        self._answers = answers
        self._cancels = cancels
        self._worker = worker
        self._writer = writer
        self._inbox = inbox
        self._waiters = waiters

    async def recover(self, turn_id: str) -> None:
        """Queue an unfinished turn found in the store (start-up recovery)."""
        await self._admission.recover(turn_id)

    def knows(self, turn_id: str) -> bool:
        """Whether this process runs or queued ``turn_id``, or halted the session."""
        shared = self._shared
        return shared.halted is not None or turn_id == shared.active or turn_id in shared.queue

    async def settle_mirror(self, turn_id: str, input_id: str) -> bool:
        """Settle a mirror whose child request is no longer open; False if settled already.

        See `agent.engine.delegations`.
        """
        return await self._answers.settle_mirror(turn_id, input_id)

    async def wake(self, turn_id: str) -> bool:
        """Run a suspended turn again with no answer: it asks again for what is open.

        For a parent whose child asks what it does not show yet (see
        `agent.engine.delegations`); False if the turn no longer waits.
        """
        return await self._answers.wake(turn_id)

    async def stop(self, turn_id: str, reason: str) -> bool:
        """Cancel a turn, or interrupt it for one of `INTERRUPT_REASONS`.

        A parent's stop reaches its child this way, with the parent's own reason.
        """
        return await self._cancels.cancel(turn_id, reason)

    async def pick_up(self, turn_id: str) -> None:
        """Queue an unfinished turn another process wrote meanwhile (the runtime's sweep)."""
        await self._admission.pick_up(turn_id)

    async def carry_out_inbox(self) -> int:
        """Carry out what others handed to this session, if this process writes it; how many."""
        async with self._writer.locked_and_leased(wait=False) as held:
            if not held:
                return 0  # the process that writes it carries them out
        return await self._inbox.carry_out(self._session)

    async def expire_history(self, *, before: float, at: float) -> bool:
        """Move out, expired, the turns that ended before ``before``; whether any are.

        A session another process writes is left to that process's own sweep. One at
        work here is expired by its worker at its next pause between turns; an idle
        one, at once.
        """
        async with self._writer.locked_and_leased(wait=False) as held:
            if not held:
                return False
            await self._shared.loaded()
            compactor = self._worker.compactor
            if not compactor.plan_expiry(before=before, at=at):
                return False
            if self._shared.worker_task is not None:
                return True  # the worker commits it (or starts again to, as it stops)
            return await compactor.commit_if_ready()

    async def compact_if_due(self) -> bool:
        """Start the summary a session this process writes is due; whether one was.

        The summary is written in the background and the worker commits it, as after a
        turn: the runtime's sweep catches a session that outgrew its turns with none since
        (compaction newly turned on, a summary that failed).
        """
        async with self._writer.locked_and_leased(wait=False) as held:
            if not held:
                return False
            await self._shared.loaded()
            return self._worker.compactor.plan(on_ready=self._worker.start)

    async def end_cancelled_suspend(self) -> None:
        """End a suspend whose cancel was stored while it was being written (start-up)."""
        await self._cancels.end_cancelled_suspend()

    async def recover_reset(self) -> None:
        """Carry out a reset that was asked for before the process stopped (start-up)."""
        await self._admission.recover_reset()

    async def let_go(self) -> None:
        """Give up the session's lease as the runtime closes.

        First the runs the close stopped are taken back from their turns' counts: a
        clean stop is no death of the process (see `TurnRecord.runs`).
        """
        await self._worker.take_back_runs()
        await drop_quietly(self._shared.lease)
        self._shared.lease.forget()

    def abandon_waiters(self) -> None:
        """Tell everyone awaiting a turn that this runtime will not finish it."""
        self._waiters.abandon()
