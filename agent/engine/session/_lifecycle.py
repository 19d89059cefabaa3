"""`LifecycleCalls`: what an application may do to a turn beyond starting and cancelling it.

A base of `AgentSession`, kept apart so each module stays small: retry an ended
turn, interrupt a turn or the whole session, release a held session, and wait
for a turn with a timeout. Each delegates to the session's part that owns it.
"""

from __future__ import annotations

import asyncio

from agent.core.steering import Steered
from agent.core.turns import TurnResult, WaitTimedOut
from agent.engine.session._admission import Admission
from agent.engine.session._holding import Holding
from agent.engine.session._state import SessionState
from agent.engine.session._steering import Steers
from agent.engine.session._waiters import Waiters

__all__ = ["LifecycleCalls"]


class LifecycleCalls:
    """Retry, interrupts, holds and waits with a timeout; see `AgentSession`."""

    _shared: SessionState
    _admission: Admission
    _holding: Holding
    _steers: Steers
    _waiters: Waiters

    async def steer(
        self,
        text: str,
        *,
        turn_id: str | None = None,
        steer_id: str | None = None,
        by: str | None = None,
    ) -> Steered:
        """Add ``text`` to the turn at work; the model reads it in its next call.

        The input is stored with the turn before this returns (a ``steer:`` step), and
        placed in the transcript as a user message at the turn's next safe point: after
        the results of the calls in flight, before the next model call. A reply that was
        being streamed when it came stays, and the model is asked again with the steer.
        A crash in between places it on the replay. `turns` lists each turn's steering.

        Args:
            text: What to add.
            turn_id: The turn meant; refused if it is not the one at work.
            steer_id: A caller-chosen id (a Slack message's): the same id twice is
                taken once.
            by: Who sent it (a verified id), kept with it.

        Returns:
            Which turn took it, under which id.

        Raises:
            SteerRefusedError: No turn is at work, it waits for a person's answer, it is
                being stopped, or its final reply is already being written; ``reason``
                says which. Start a turn with the input instead.
        """
        return await self._steers.steer(text, turn_id=turn_id, steer_id=steer_id, by=by)

    async def retry(self, turn_id: str, *, new_turn_id: str | None = None) -> str:
        """Answer a failed, cancelled or interrupted turn's input again as a new turn.

        The new turn (``new_turn_id``, or else ``<turn id>.retry`` with one ``'`` more
        for each earlier retry) queues behind the session's unfinished turns and runs at
        once when none is ahead; its record's ``retry_of`` names ``turn_id``, which
        stays as it ended. Retrying twice makes two retries, both linked to it. Retrying
        a held turn decides its hold (`held_turns` stops listing it) and releases the
        session's hold. A retry runs the work again from the start: mind that the first
        turn's tools may have done any part of theirs (its committed steps stay in the
        transcript).

        A caller that must know the new turn's id before it exists (to promise its reply
        somewhere, then admit it) chooses ``new_turn_id``; asking the same retry again
        with it admits nothing more and returns it, as `start` with a known turn id does.

        Returns:
            The new turn's id.

        Raises:
            UnknownTurnError: The session has no such turn.
            ConflictError: The turn completed (send its input again for another answer),
                or has not ended; or ``new_turn_id`` names another turn.
            SessionSuspendedError: The session waits for a person's answer.
        """
        return await self._admission.retry(turn_id, new_turn_id)

    async def interrupt_turn(self, turn_id: str) -> bool:
        """Stop one turn for good: it ends `Interrupted` (reason ``interrupted``).

        As `cancel`, at its next checkpoint boundary, and the next queued turn runs;
        unlike a cancel, it tells a program it was stopped, not answered with "no".

        Returns:
            False when the turn had already ended; True otherwise.
        """
        return await self._holding.interrupt_turn(turn_id)

    async def interrupt(self, why: str = "an operator interrupted the session") -> list[str]:
        """Interrupt the turn at work and hold the session, in one write.

        The turn at work ends `Interrupted` at its next boundary; the queued turns stay
        queued, and new ones queue behind them (`held` says why), until
        `resume_session`. A turn suspended on a person's answer stays suspended. The
        hold is stored: a restart keeps it. The poison-turn hold is the same hold.

        Returns:
            The turns asked to stop (empty when none was at work, or the work was handed
            to the process that writes the session).
        """
        return await self._holding.interrupt(why)

    async def resume_session(self) -> bool:
        """Release the session's hold: its queued turns run, in order. False if not held."""
        return await self._holding.release()

    async def held(self) -> str | None:
        """Why the session is held (`interrupt`, a poison turn), or None if it is not."""
        shared = self._shared
        if shared.worker_task is not None and shared.in_memory is not None:
            return shared.in_memory.hold  # this process writes the session: it is up to date
        # Another process may have held or released it since this one read it, and what
        # is in memory here may still be needed (a queue waiting for the hold), so ask the
        # store without replacing it.
        return (await shared.host.store.load(shared.key)).hold

    # a timed-out wait is an outcome here, not an error, and it leaves the turn be
    async def wait(
        self,
        turn_id: str,
        *,
        timeout: float,  # noqa: ASYNC109
    ) -> TurnResult | WaitTimedOut:
        """`result`, or `WaitTimedOut` after ``timeout`` seconds: that ends the wait only.

        Raises:
            UnknownTurnError: The session has no such turn.
        """
        try:
            return await asyncio.wait_for(self._waiters.result(turn_id), timeout)
        except TimeoutError:
            return WaitTimedOut(turn_id=turn_id, waited=timeout)
