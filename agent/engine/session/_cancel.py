"""`Cancels`: cancelling turns and resetting a session, planned and written in one transaction.

A cancel is planned first (`CancelPlan`): a turn nothing runs (never begun, or
suspended) ends in the cancel's own write; a turn this process runs is only
asked to stop, and its run ends it at its next checkpoint boundary. The request
is marked in memory before the write is queued, so the run sees it at once, and
the run writes the ending only once the request has landed; if the write fails,
the marks and the queue are put back as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from typing import Final

from agent.core.events import TurnCancelled, TurnInterrupted
from agent.core.phases import TurnPhase, phase_of
from agent.core.records import (
    Commit,
    SessionStatus,
    StoredMessage,
    StoredSession,
    StoredStep,
    apply_commit,
)
from agent.core.turns import (
    Cancelled,
    Interrupted,
    SessionReset,
    TurnRecord,
    stop_result,
)
from agent.engine.session._inbox import ELSEWHERE_POLL_SECONDS, Inbox
from agent.engine.session._state import SessionState, suspended_in, unfinished_turns
from agent.engine.session._waiters import Waiters
from agent.engine.session._worker import Worker
from agent.engine.session._writer import Writer
from agent.engine.turn.commits import closing_result, ending_commit
from agent.errors import ConflictError, RuntimeClosedError, StoreConflictError

__all__ = ["CancelPlan", "Cancels"]

_ENDS_AT_ONCE: Final[frozenset[TurnPhase]] = frozenset({"queued", "suspended", "ending_suspended"})
"""Phases in which nothing runs the turn, so a cancel ends it in the cancel's own write."""


class Cancels:
    """Cancels the turns of one session, and asks for its reset."""

    def __init__(
        self, shared: SessionState, writer: Writer, worker: Worker, waiters: Waiters, inbox: Inbox
    ) -> None:
        self._shared = shared
        self._writer = writer
        self._worker = worker
        self._waiters = waiters
        self._inbox = inbox

    async def cancel(self, turn_id: str, reason: str) -> bool:
        """Cancel one turn; see `AgentSession.cancel`."""
        self._shared.host.check_open()
        may_hand_over = self._inbox.may_hand_over(self._shared.host.hands_over)
        async with self._writer.locked_and_leased(wait=not may_hand_over) as held:
            if not held:
                return await self._hand_over_cancel(turn_id, reason)
            state = await self._shared.loaded()
            record = state.turns.get(turn_id)
            if record is None:
                raise await self._shared.no_turn_error(state, turn_id)
            if record.status == "suspended":
                state = await self._shared.reread_unless_busy()
                record = state.turns[turn_id]
            if record.is_ended:
                return False
            self._shared.refuse_if_halted()
            plan = self.plan(state, [record], reason)
            await self._apply(state, plan, Commit())
            return True

    async def _hand_over_cancel(self, turn_id: str, reason: str) -> bool:
        state = await self._shared.reread_unless_busy()
        record = state.turns.get(turn_id)
        if record is None:
            raise await self._shared.no_turn_error(state, turn_id)
        if record.is_ended:
            return False
        await self._inbox.hand_over("cancel", turn_id, {"reason": reason})
        return True

    async def _reset_elsewhere(self) -> SessionReset:
        """Hand the reset to the process that writes the session, and wait until it is done."""
        before = (await self._shared.reread_unless_busy()).generation
        await self._inbox.hand_over("reset", uuid.uuid4().hex, None)
        while True:
            await asyncio.sleep(ELSEWHERE_POLL_SECONDS)
            self._shared.host.check_open()
            state = await self._shared.reread_unless_busy()
            if state.generation > before:
                return SessionReset(
                    previous_session=f"{self._shared.key.session_id}#g{state.generation - 1}",
                    generation=state.generation,
                )

    async def reset(self) -> SessionReset:
        """Cancel the unfinished turns and ask for a reset; see `AgentSession.reset`."""
        self._shared.host.check_open()
        may_hand_over = self._inbox.may_hand_over(self._shared.host.hands_over)
        async with self._writer.locked_and_leased(wait=not may_hand_over) as held:
            done = await self._ask_reset() if held else None
        if done is None:
            return await self._reset_elsewhere()
        return await asyncio.shield(done)

    async def _ask_reset(self) -> asyncio.Future[SessionReset]:
        """Store the reset and have the worker carry it out; under the lock and lease."""
        state = await self._shared.reread_unless_busy()
        self._shared.refuse_if_halted()
        # A reset asked for while another is pending extends that one over the turns
        # admitted since.
        through = max((t.seq for t in state.turns.values()), default=0)
        plan = self.plan(state, unfinished_turns(state, suspended_too=True), "reset")
        commit = plan.commit(Commit(reset_through=through))
        caller_left = await self.commit_plan(state, plan, commit)
        done = self._shared.reset_future()
        # The worker carries the reset out even if the caller has left: it is stored.
        self._worker.start()
        if caller_left:
            raise asyncio.CancelledError
        return done

    async def end_cancelled_suspend(self) -> None:
        """End a suspend whose cancel was stored while it was being written (start-up)."""
        async with self._writer.locked_and_leased(wait=False) as lease_held:
            if not lease_held:
                return  # another live process writes it; it ends the suspend when it runs
            state = await self._shared.loaded()
            suspended = suspended_in(state)
            if suspended is None or suspended.turn_id == self._shared.active:
                return
            reason = state.cancels.get(suspended.turn_id)
            if reason is not None:
                plan = self.plan(state, [state.turns[suspended.turn_id]], reason)
                await self._apply(state, plan, Commit())

    def plan(self, state: StoredSession, records: list[TurnRecord], reason: str) -> CancelPlan:
        """How to cancel ``records``: end some now, ask the others to stop at a boundary."""
        plan = CancelPlan()
        for record in records:
            turn_id = record.turn_id
            if turn_id == self._shared.active:
                # This process runs the turn (it may be writing the turn's suspend right
                # now), so only the request is stored: the run sees it at its next
                # boundary and ends the turn itself.
                if turn_id not in state.cancels:
                    plan.cancels.append((turn_id, reason))
            elif phase_of(record, state.cancels) in _ENDS_AT_ONCE:
                # Nothing runs this turn: it is suspended (its request is withdrawn and its
                # tool call closed), or it has never begun (it ends without ever opening).
                # Either way it ends in the cancel's own write.
                ended = stop_result(turn_id, reason)
                plan.end(record, ended, ending_commit(state, record, ended, closing_result(ended)))
            elif record.is_unfinished and turn_id not in state.cancels:
                plan.cancels.append((turn_id, reason))
        return plan

    async def _apply(self, state: StoredSession, plan: CancelPlan, base: Commit) -> None:
        if await self.commit_plan(state, plan, plan.commit(base)):
            raise asyncio.CancelledError

    async def commit_plan(self, state: StoredSession, plan: CancelPlan, commit: Commit) -> bool:
        """Write a cancel plan (with whatever else ``commit`` holds) and act on it.

        Returns:
            Whether the caller was cancelled while it waited (re-raise after).

        Raises:
            ConflictError: Another process moved one of the turns first.
        """
        # While this write is in flight, the worker must not pick up a turn the write
        # ends, so those turns leave the queue first.
        queued = list(self._shared.queue)
        withdrawn = {t for t in queued if t in plan.ended_ids}
        for turn_id in withdrawn:
            self._shared.queue.remove(turn_id)
        asked = self._stop_at_next_boundary(state, plan)
        try:
            try:
                caller_left = await self._writer.commit_shielded(commit)
            except Exception as exc:
                self._take_back(state, asked, queued, withdrawn)
                if isinstance(exc, StoreConflictError):
                    await self._shared.reread_unless_busy()
                    raise ConflictError(
                        f"{self._shared.key}: a turn changed under the cancel (another runtime "
                        "on this store answered or ended it first); try again"
                    ) from None
                raise
            apply_commit(state, commit)
        finally:
            self._landed(asked)
        self._announce_ended(plan)
        return caller_left

    def _take_back(
        self, state: StoredSession, asked: list[str], queued: list[str], withdrawn: set[str]
    ) -> None:
        """Nothing of the write landed: put the cancel marks and the queue back."""
        for turn_id in asked:
            state.cancels.pop(turn_id, None)
        # Under the admit lock nothing joins the queue; the worker may only have taken
        # turns from its head meanwhile, so the turns still queued keep their order.
        still = set(self._shared.queue) | withdrawn
        self._shared.queue.clear()
        self._shared.queue.extend(t for t in queued if t in still)
        if withdrawn:
            with contextlib.suppress(RuntimeClosedError):
                self._worker.start()

    def _landed(self, asked: list[str]) -> None:
        """The write that asked ``asked`` to stop is settled: their run may end them now."""
        landing = self._shared.stop_landing
        if asked and landing is not None and not landing.done():
            landing.set_result(None)

    def _stop_at_next_boundary(self, state: StoredSession, plan: CancelPlan) -> list[str]:
        """Let the turns asked to stop see it at their very next boundary.

        The run sees the mark at once, but writes its cancelled ending only once the
        request has landed (`SessionState.stop_landed`): on a store of many connections
        the ending could otherwise reach the disk first, and a crash between the two
        would leave the turn cancelled by a replace whose new turn was never admitted.
        If the write fails, the marks are taken back and the run goes on from its last
        checkpoint.

        Returns:
            The turns newly marked.
        """
        asked = [turn_id for turn_id, _ in plan.cancels if turn_id not in state.cancels]
        for turn_id, reason in plan.cancels:
            state.cancels.setdefault(turn_id, reason)
        if asked:
            self._shared.stop_landing = asyncio.get_running_loop().create_future()
        running = self._shared.running
        if running is not None and running.turn_id in asked:
            running.interrupt()
        return asked

    def _announce_ended(self, plan: CancelPlan) -> None:
        """Tell everyone about turns a committed plan ended."""
        key = self._shared.key
        for result in plan.ended:
            self._shared.host.cancel_expiry(key, result.turn_id)
            ids = {"agent": key.agent, "session": key.session_id, "turn_id": result.turn_id}
            if isinstance(result, Cancelled):
                self._waiters.emit(TurnCancelled(**ids, seq=1, reason=result.reason))
            else:
                self._waiters.emit(
                    TurnInterrupted(**ids, seq=1, reason=result.reason, detail=result.detail)
                )
            self._waiters.settle(result.turn_id, result)
        if plan.ended and self._shared.queue:
            with contextlib.suppress(RuntimeClosedError):
                # a withdrawn suspend no longer holds back the turns queued behind it
                self._worker.start()


class CancelPlan:
    """What cancelling some turns writes: turns ended now, and requests to stop."""

    def __init__(self) -> None:
        self.ended: list[Cancelled | Interrupted] = []
        """The turns this plan ends in its own write, with how they ended."""
        self.cancels: list[tuple[str, str]] = []
        """``(turn id, reason)``: the requests to stop, for turns a run here ends itself."""
        self._records: list[TurnRecord] = []
        self._messages: list[StoredMessage] = []
        self._steps: list[StoredStep] = []
        self._expect: list[tuple[str, str]] = []
        self._status: SessionStatus | None = None

    @property
    def ended_ids(self) -> set[str]:
        """The ids of the turns this plan ends in its own write."""
        return {result.turn_id for result in self.ended}

    def end(self, record: TurnRecord, result: Cancelled | Interrupted, closing: Commit) -> None:
        """End ``record``'s turn in this plan's write, with ``closing`` (its ending commit).

        The write expects the turn's stored status to be unchanged, so a turn another
        process moved meanwhile makes the whole plan fail with a conflict.
        """
        self.ended.append(result)
        self._records.extend(closing.turns)
        self._messages.extend(closing.messages)
        self._steps.extend(closing.steps)
        self._expect.append((record.turn_id, record.status))
        self._status = closing.status or self._status

    def commit(self, base: Commit) -> Commit:
        """``base`` with this plan's writes in the same transaction."""
        # Of the turns a plan ends, only a suspended one's closing writes messages, and no
        # turn opens in the write that closes a suspended one, so the two never collide.
        assert not (self._messages and base.messages)
        return dataclasses.replace(
            base,
            messages=(*self._messages, *base.messages),
            steps=(*self._steps, *base.steps),
            turns=(*self._records, *base.turns),
            expect=(*self._expect, *base.expect),
            cancels=(*self.cancels, *base.cancels),
            status=base.status or self._status,
        )
