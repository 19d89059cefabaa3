"""`AgentSession`: one conversation's turns, run one at a time in admission order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from agent._json import JsonValue
from agent.core.events import TurnEvent
from agent.core.hitl import (
    Grant,
    InputRequest,
    StoredAnswer,
    answer_step,
)
from agent.core.messages import Message
from agent.core.records import (
    Archive,
    Commit,
    SessionKey,
    SessionStatus,
)
from agent.core.turns import (
    Cancelled,
    Completed,
    Failed,
    SessionReset,
    Suspended,
    TurnInput,
    TurnRecord,
    TurnResult,
)
from agent.engine.lease import drop_quietly
from agent.engine.session._answers import Answers
from agent.engine.session._cancel import CancelPlan, Cancels
from agent.engine.session._state import (
    Observer,
    SessionState,
    is_held_by_suspend,
    suspend_is_ending,
    suspended_in,
    unfinished_turns,
)
from agent.engine.session._waiters import Waiters
from agent.engine.session._worker import Worker
from agent.engine.session._writer import Writer
from agent.engine.turn.commits import opening_commit
from agent.errors import (
    RuntimeClosedError,
    TurnCancelledError,
    TurnFailedError,
    TurnSuspendedError,
    UnknownTurnError,
)

if TYPE_CHECKING:
    from agent.definition.agent import Agent
    from agent.engine.host import SessionHost

__all__ = ["AgentSession", "Observer"]

logger = logging.getLogger("agent")


class AgentSession:
    """The turns of one session, addressed by ``(agent, session id)``.

    Get one from `AgentRuntime.session`. Turns of a session run one at a time,
    in the order they were admitted; different sessions run concurrently.
    """

    def __init__(self, runtime: SessionHost, key: SessionKey) -> None:
        self.key = key
        self._shared = SessionState(runtime, key)
        self._waiters = Waiters(self._shared)
        self._worker = Worker(self._shared, self._waiters)
        self._writer = Writer(self._shared, self._worker)
        self._cancels = Cancels(self._shared, self._writer, self._worker, self._waiters)
        self._answers = Answers(self._shared, self._writer, self._worker)

    @property
    def is_idle(self) -> bool:
        """Nothing runs, waits, watches or is being admitted here right now."""
        return self._shared.is_idle

    def unload(self) -> None:
        """Drop the in-memory copy of an idle session; the next use reads it again."""
        if self.is_idle:
            self._shared.in_memory = None

    async def status(self) -> SessionStatus:
        """``new``, ``idle``, ``running`` or ``suspended``."""
        return (await self._shared.loaded()).status

    async def transcript(self) -> list[Message]:
        """The live generation's messages, oldest first."""
        return list((await self._shared.loaded()).transcript)

    async def turns(self) -> list[TurnRecord]:
        """Every turn of the session, in admission order."""
        return sorted((await self._shared.loaded()).turns.values(), key=lambda t: t.seq)

    async def start(
        self, input: str | TurnInput, *, turn_id: str | None = None, replace: bool = False
    ) -> str:
        """Admit a turn durably and return its id without waiting for it to run.

        Starting with a ``turn_id`` the session already has replays that turn
        instead of opening a second one: a finished turn is left as it is, an
        unfinished one resumes from its last checkpoint. So a redelivered event
        (a Slack retry) is idempotent, even a replacing one.

        Args:
            input: The opening text, or a `TurnInput`.
            turn_id: A caller-chosen id (for example the Slack event id).
            replace: Cancel every unfinished turn of the session, running or queued,
                with reason ``replaced``, in the transaction that admits this one. A
                turn suspended on a person's answer is never cancelled this way.

        Returns:
            The turn's id.

        Raises:
            SessionSuspendedError: The session waits for a person's answer.
            StoreError: The store failed, or an earlier store failure halted this
                session until the runtime starts again.
            RuntimeClosedError: The runtime was closed.
        """
        given = TurnInput(text=input) if isinstance(input, str) else input
        self._shared.host.check_open()
        async with self._writer.locked_and_leased():
            state = await self._shared.loaded()
            turn_id = turn_id or uuid.uuid4().hex
            known = state.turns.get(turn_id)
            if known is None or known.is_unfinished:
                self._shared.refuse_if_halted()
            if known is not None:
                # a redelivery: an unfinished turn is replayed, a suspended one stays suspended
                self._worker.queue_if_unfinished(known)
                return turn_id
            if turn_id in state.retired:
                return turn_id  # a redelivered turn that a reset archived: nothing is left to run
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
            seq = max((t.seq for t in state.turns.values()), default=0) + 1
            record = TurnRecord(turn_id=turn_id, seq=seq, status="queued", input=given)
            ahead = [q for q in self._shared.queue if q not in plan.ended_ids]
            if (
                self._shared.worker_task is None
                and not ahead
                and not plan.cancels
                and state.reset_through is None
            ):
                # Nothing is queued ahead of this turn, so it opens in the transaction that
                # admits it, which saves a write.
                record, opening = opening_commit(record, len(state.transcript))
                commit = plan.commit(opening)
            else:
                commit = plan.commit(Commit(turns=(record,)))
            caller_left = await self._cancels.commit_plan(state, plan, commit)
            # If the runtime closed meanwhile, the turn is admitted all the same and runs
            # at the next start.
            with contextlib.suppress(RuntimeClosedError):
                self._worker.enqueue(turn_id)
            if caller_left:
                # The caller was cancelled while the admission was being written. The turn
                # is admitted and runs anyway; only the caller's cancellation goes on.
                raise asyncio.CancelledError
        return turn_id

    # -- cancel and reset -------------------------------------------------------

    async def cancel(self, turn_id: str, reason: str = "requested") -> bool:
        """Cancel a turn: it stops at its next checkpoint boundary and ends ``cancelled``.

        The request is stored before anything acts on it, so a turn lost to a crash
        is finished as cancelled by the next start, not replayed to completion. What
        committed stays; calls of the newest batch that had not run get a closing
        ``{"cancelled": true}`` result. A queued turn that never opened ends at once,
        writing no message; a suspended turn ends at once, its request withdrawn. A turn
        whose final reply is already being written completes anyway: ``True`` means
        the request was taken, and `result` tells how the turn ended.

        Args:
            turn_id: The turn to cancel.
            reason: Carried on ``turn.cancelled`` and the turn's result.

        Returns:
            False when the turn had already ended; True otherwise.

        Raises:
            UnknownTurnError: The session has no such turn.
        """
        return await self._cancels.cancel(turn_id, reason)

    async def reset(self) -> SessionReset:
        """Start the session afresh; its history goes to the archive, still readable.

        Unfinished turns are cancelled (reason ``reset``), a suspended one included; then,
        in order on the session's turn chain, the transcript, steps and turns are
        archived under the current generation and the status goes back to ``new``.
        While the reset is pending, `resume` refuses and new turns queue behind it.
        A reset asked for before a crash is carried out by the next start.

        Returns:
            The archived address (``<session>#g<n>``) and the new generation.
        """
        return await self._cancels.reset()

    async def archived(self, generation: int) -> Archive | None:
        """The history a reset archived as ``generation`` (None if there is no such one)."""
        return await self._shared.host.store.load_archive(self.key, generation)

    # -- human in the loop ------------------------------------------------------

    @property
    def runtime(self) -> SessionHost:
        """The runtime hosting this session."""
        return self._shared.host

    @property
    def agent(self) -> Agent:
        """The agent whose session this is."""
        return self._shared.agent

    async def suspended(self) -> Suspended | None:
        """The checkpoint of the turn this session is suspended on, if it is."""
        state = await self._shared.loaded()
        return None if suspend_is_ending(state) else suspended_in(state)

    async def pending(self) -> InputRequest | None:
        """The request the session is suspended on, if it is."""
        suspended = await self.suspended()
        return suspended.request if suspended else None

    async def answer_of(self, turn_id: str, input_id: str) -> StoredAnswer | None:
        """How request ``input_id`` of ``turn_id`` was settled, or None while it is open."""
        steps = await self._shared.host.store.load_steps(self.key, turn_id)
        return StoredAnswer.from_memo(steps.get(answer_step(turn_id, input_id)))

    async def resume(
        self,
        turn_id: str,
        input_id: str,
        value: JsonValue,
        *,
        by: str | None = None,
        granted: Grant | None = None,
    ) -> None:
        """Answer the request a suspended turn waits on, and run the turn on from there.

        The answer is stored under ``input:<turn_id>:<input_id>`` before anything
        runs; the suspended tool runs again from the top and its ``request_input``
        returns ``value``. Of two resumes racing for one request (two clicks, two
        processes), exactly one is applied.

        Args:
            turn_id: The suspended turn.
            input_id: The request's id.
            value: The answer; it must match the request's schema.
            by: The resumer's verified identity (a signed Slack click's user id).
            granted: From `grant_answer`, for a ``{policy}`` request.

        Raises:
            ResumeConflictError: No such turn, it is not suspended, it waits for
                another request, or the request was already answered (the message
                says by whom and how).
            ResumeAuthorizationError: The resumer may not answer this request.
            InvalidAnswerError: ``value`` does not match the request's schema.
        """
        await self._answers.resume(turn_id, input_id, value, by=by, granted=granted)

    async def expire(self, turn_id: str, input_id: str) -> bool:
        """Answer an overdue request as expired; False when it was answered meanwhile."""
        return await self._answers.expire(turn_id, input_id)

    async def recover(self, turn_id: str) -> None:
        """Queue an unfinished turn found in the store (start-up recovery)."""
        async with self._writer.locked():
            state = await self._shared.loaded()
            record = state.turns.get(turn_id)
            if record is None:
                raise UnknownTurnError(f"{self.key}: no turn {turn_id}")
            self._worker.queue_if_unfinished(record)

    async def end_cancelled_suspend(self) -> None:
        """End a suspend whose cancel was stored while it was being written (start-up)."""
        await self._cancels.end_cancelled_suspend()

    async def recover_reset(self) -> None:
        """Carry out a reset that was asked for before the process stopped (start-up)."""
        async with self._writer.locked():
            state = await self._shared.loaded()
            if state.reset_through is not None:
                self._worker.start()

    async def result(self, turn_id: str) -> TurnResult:
        """Wait for the turn to end: completed, suspended, failed or cancelled.

        Raises:
            UnknownTurnError: The session has no such turn.
        """
        return await self._waiters.result(turn_id)

    async def turn(
        self, input: str | TurnInput, *, turn_id: str | None = None, replace: bool = False
    ) -> Completed:
        """Start a turn and wait for its reply; for non-interactive callers.

        Raises:
            TurnSuspendedError: The turn was suspended for input; use `start` and `result`.
            TurnFailedError: The turn failed.
            TurnCancelledError: The turn was cancelled.
        """
        turn_id = await self.start(input, turn_id=turn_id, replace=replace)
        result = await self.result(turn_id)
        if isinstance(result, Completed):
            return result
        if isinstance(result, Failed):
            raise TurnFailedError(
                result.error, turn_id=turn_id, phase=result.phase, step=result.step
            )
        if isinstance(result, Cancelled):
            raise TurnCancelledError(result.reason, turn_id=turn_id)
        raise TurnSuspendedError(
            f"turn {turn_id} parked for input; turn() does not wait for people", turn_id=turn_id
        )

    async def observe(
        self, callback: Observer, *, turn_id: str | None = None, replay: bool = False
    ) -> Callable[[], None]:
        """Call ``callback`` with each event of the session (or of one turn).

        The callback runs on the event loop and must not block. With ``replay``,
        the committed history of ``turn_id`` (messages, actions, its ending) is
        folded into events first, then live events follow with no gap between.

        Returns:
            A function that stops the subscription.
        """
        return await self._waiters.observe(callback, turn_id=turn_id, replay=replay)

    def stream(self, turn_id: str, *, replay: bool = True) -> AsyncIterator[TurnEvent]:
        """Iterate the events of one turn until its terminal event.

        Use it as ``async for event in session.stream(turn_id)``. With ``replay``,
        the turn's committed history comes first (see `observe`); without it, a turn
        that already ended yields nothing.

        Raises:
            UnknownTurnError: The session has no such turn (when iteration begins).
        """
        return self._waiters.stream(turn_id, replay=replay)

    async def let_go(self) -> None:
        """Give up the session's lease as the runtime closes."""
        await drop_quietly(self._shared.lease)
        self._shared.lease.forget()

    def abandon_waiters(self) -> None:
        """Tell everyone awaiting a turn that this runtime will not finish it."""
        self._waiters.abandon()
