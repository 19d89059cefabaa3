"""`Admission`: a new turn, or a redelivered one, admitted to the session in one write.

A start is an admission under the session's lock and lease: a turn id the
session already has is a redelivery (an unfinished turn is replayed, an ended
or suspended one left as it is); a new turn is refused while the session is
suspended on a person's answer, queues behind the turns still unfinished on
disk, and with ``replace`` cancels the unfinished turns in the write that admits
it. When nothing is ahead of it, the same write opens it. A retry admits an
interrupted turn's input again. Start-up recovery, and the runtime's sweep,
admit what another process (a stopped one, or the operator's command) left
unfinished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from agent.core.records import Commit
from agent.core.turns import TurnInput, TurnRecord
from agent.engine.holds import is_undecided_hold, retry_commit
from agent.engine.session._cancel import CancelPlan, Cancels
from agent.engine.session._inbox import Inbox
from agent.engine.session._state import SessionState, is_held_by_suspend, unfinished_turns
from agent.engine.session._worker import Worker
from agent.engine.session._writer import Writer
from agent.engine.turn.commits import opening_commit
from agent.errors import ConflictError, RuntimeClosedError, UnknownTurnError

__all__ = ["RETRYABLE", "Admission"]

RETRYABLE = frozenset({"failed", "cancelled", "interrupted"})
"""The statuses of the turns `AgentSession.retry` answers again: ended, and unanswered."""

logger = logging.getLogger("agent")


class Admission:
    """Admits turns to one session: new ones, redelivered ones, and those found at start-up."""

    def __init__(
        self,
        shared: SessionState,
        writer: Writer,
        worker: Worker,
        cancels: Cancels,
        inbox: Inbox,
    ) -> None:
        self._shared = shared
        self._writer = writer
        self._worker = worker
        self._cancels = cancels
        self._inbox = inbox

    async def start(self, given: TurnInput, turn_id: str | None, *, replace: bool) -> str:
        """Admit a turn durably and return its id; see `AgentSession.start`."""
        self._shared.host.check_open()
        turn_id = turn_id or uuid.uuid4().hex
        may_hand_over = self._inbox.may_hand_over(self._shared.host.hands_over)
        async with self._writer.locked_and_leased(wait=not may_hand_over) as held:
            if not held:
                await self._hand_over(given, turn_id, replace=replace)
                return turn_id
            state = await self._shared.loaded()
            known = state.turns.get(turn_id)
            if known is None or known.is_unfinished:
                self._shared.refuse_if_halted()
            if known is not None:
                # a redelivery: an unfinished turn is replayed, a suspended one stays suspended
                self._worker.queue_if_unfinished(known)
                return turn_id
            if await self._shared.is_archived(state, turn_id):
                return turn_id  # a redelivered turn that was archived: nothing is left to run
            if is_held_by_suspend(state):
                # another process may have resumed it
                state = await self._shared.reread_unless_busy()
                if is_held_by_suspend(state):
                    raise self._shared.suspended_error(state)
            if not self._shared.queued_unfinished:
                # turns left unfinished on disk and not queued here yet run before this one
                self._worker.queue_unfinished_turns(state)
            plan = CancelPlan()
            if replace:
                plan = self._cancels.plan(state, unfinished_turns(state), "replaced")
            seq = state.next_seq()
            record = TurnRecord(
                turn_id=turn_id,
                seq=seq,
                status="queued",
                input=given,
                admitted_at=self._shared.host.clock(),
            )
            ahead = [q for q in self._shared.queue if q not in plan.ended_ids]
            if (
                self._shared.worker_task is None
                and not ahead
                and not plan.cancels
                and state.reset_through is None
                and state.hold is None
            ):
                # Nothing is queued ahead of this turn, so it opens in the transaction that
                # admits it, which saves a write.
                record, opening = opening_commit(record, len(state.transcript))
                commit = plan.commit(opening)
            else:
                commit = plan.commit(Commit(turns=(record,)))
            caller_left = await self._cancels.commit_plan(state, plan, commit)
            if record.opening_index is not None:
                self._shared.opened_here.add(turn_id)  # its first run is counted
                self._shared.counted.add(turn_id)
            # If the runtime closed meanwhile, the turn is admitted all the same and runs
            # at the next start.
            with contextlib.suppress(RuntimeClosedError):
                self._worker.enqueue(turn_id)
            if caller_left:
                # The caller was cancelled while the admission was being written. The turn
                # is admitted and runs anyway; only the caller's cancellation goes on.
                raise asyncio.CancelledError
        return turn_id

    async def _hand_over(self, given: TurnInput, turn_id: str, *, replace: bool) -> None:
        """Hand the start to the process that writes the session, checked as far as it can be.

        Raises:
            SessionSuspendedError: The session waits for a person's answer, as read now.
        """
        state = await self._shared.reread_unless_busy()
        if turn_id in state.turns:
            # a redelivery, admitted already: the process that writes the session has it
            self._shared.handed_over.setdefault(turn_id, None)
            logger.info("%s: turn %s is run by another process", self._shared.key, turn_id)
            return
        if await self._shared.is_archived(state, turn_id):
            return
        if is_held_by_suspend(state):
            raise self._shared.suspended_error(state)
        body = self._inbox.start_body(given, replace)
        await self._inbox.hand_over("start", turn_id, body, turn_id=turn_id)

    async def retry(self, turn_id: str, new_turn_id: str | None = None) -> str:
        """Admit an ended turn's input again as a new turn; see `AgentSession.retry`."""
        self._shared.host.check_open()
        async with self._writer.locked_and_leased():
            state = await self._shared.loaded()
            record = state.turns.get(turn_id)
            if record is None:
                raise await self._shared.no_turn_error(state, turn_id)
            if new_turn_id is not None and (
                new_turn_id in state.turns or await self._shared.is_archived(state, new_turn_id)
            ):
                given = state.turns.get(new_turn_id)
                if given is not None and given.retry_of == turn_id:
                    return new_turn_id  # the same retry asked again: it is admitted
                raise ConflictError(
                    f"{self._shared.key}: turn id {new_turn_id} is taken; a retry needs a new one"
                )
            if record.status not in RETRYABLE:
                raise ConflictError(
                    f"{self._shared.key}: turn {turn_id} is {record.status}; only a failed, "
                    "cancelled or interrupted turn can be retried"
                    + ("; send its input again for another answer" if record.is_ended else "")
                )
            self._shared.refuse_if_halted()
            if is_held_by_suspend(state):
                raise self._shared.suspended_error(state)
            if not self._shared.queued_unfinished:
                self._worker.queue_unfinished_turns(state)
            steps = await self._shared.host.store.load_steps(self._shared.key, turn_id)
            new_id, commit = retry_commit(
                state, record, decides_hold=is_undecided_hold(record, steps), new_id=new_turn_id
            )
            caller_left = await self._cancels.commit_plan(state, CancelPlan(), commit)
            with contextlib.suppress(RuntimeClosedError):
                self._worker.enqueue(new_id)
            if caller_left:
                raise asyncio.CancelledError  # admitted all the same, as in `start`
        return new_id

    async def pick_up(self, turn_id: str) -> None:
        """Queue an unfinished turn that another process wrote (the runtime's sweep).

        Another live process that holds the session runs its turns itself: nothing is
        done then. Otherwise the lease comes from whoever wrote last, so the session is
        read again and every unfinished turn in it is queued here.
        """
        async with self._writer.locked_and_leased(wait=False) as held:
            if not held or self._shared.halted is not None:
                return
            state = await self._shared.loaded()
            if turn_id not in state.turns:
                state = await self._shared.reread_unless_busy()  # written without a lease
            record = state.turns.get(turn_id)
            if record is not None:
                self._worker.queue_if_unfinished(record)

    async def recover(self, turn_id: str) -> None:
        """Queue an unfinished turn found in the store (start-up recovery)."""
        async with self._writer.locked():
            state = await self._shared.loaded()
            record = state.turns.get(turn_id)
            if record is None:
                raise UnknownTurnError(f"{self._shared.key}: no turn {turn_id}")
            self._worker.queue_if_unfinished(record)

    async def recover_reset(self) -> None:
        """Carry out a reset that was asked for before the process stopped (start-up)."""
        async with self._writer.locked():
            state = await self._shared.loaded()
            if state.reset_through is not None:
                self._worker.start()
