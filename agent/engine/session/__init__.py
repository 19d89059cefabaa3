"""`AgentSession`: one conversation's turns, run one at a time in admission order.

`AgentSession` is the public face. Its work is done by parts that share one
`SessionState` (``_state``), each in its own module; a part imports only the
parts listed below it:

- ``_admission``: `AgentSession.start`, and start-up recovery;
- ``_answers``: `AgentSession.resume` and `AgentSession.expire`;
- ``_holding``: `AgentSession.interrupt`, `AgentSession.interrupt_turn` and
  `AgentSession.resume_session`;
- ``_cancel``: `AgentSession.cancel` and `AgentSession.reset`, each planned and
  written in one transaction;
- ``_writer``: one write at a time, under the session's lock and lease, and never
  lost to a caller that was cancelled while it waited;
- ``_worker``: the task that runs the queued turns one at a time, carries out a
  pending reset, and halts the session after a store failure;
- ``_waiters``: `AgentSession.result`, `AgentSession.observe` and
  `AgentSession.stream`, and the one way an event reaches them;
- ``_inbox``: work handed to the process that writes the session by one that
  does not (replicas), and carrying it out there;
- ``_lifecycle``: the calls on a turn's lifecycle beyond start and cancel (retry,
  steer, interrupts, holds, waits with a timeout), a base of `AgentSession`;
- ``_steering``: `AgentSession.steer`;
- ``_state``: the state they share, and the invariants that span them;
- ``_upkeep``: what the runtime does to the session (`AgentSession.upkeep`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from agent._json import JsonValue
from agent.core.events import TurnEvent
from agent.core.hitl import Grant, InputRequest, StoredAnswer, answer_step
from agent.core.messages import Message
from agent.core.records import Archive, Commit, SessionKey, SessionStatus
from agent.core.turns import (
    INTERRUPT_REASONS,
    Cancelled,
    Completed,
    Failed,
    Interrupted,
    SessionReset,
    Suspended,
    TurnInput,
    TurnRecord,
    TurnResult,
)
from agent.engine.session._admission import Admission
from agent.engine.session._answers import Answers
from agent.engine.session._cancel import Cancels
from agent.engine.session._holding import Holding
from agent.engine.session._inbox import Inbox
from agent.engine.session._lifecycle import LifecycleCalls
from agent.engine.session._state import Observer, SessionState, suspend_is_ending, suspended_in
from agent.engine.session._steering import Steers, steering_of
from agent.engine.session._upkeep import Upkeep
from agent.engine.session._waiters import Waiters
from agent.engine.session._worker import Worker
from agent.engine.session._writer import Writer
from agent.errors import (
    TurnCancelledError,
    TurnFailedError,
    TurnInterruptedError,
    TurnSuspendedError,
)

if TYPE_CHECKING:
    from agent.definition.agent import Agent
    from agent.engine.host import SessionHost

__all__ = ["AgentSession", "Observer"]


class AgentSession(LifecycleCalls):
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
        self._inbox = Inbox(self._shared)
        self._cancels = Cancels(
            self._shared, self._writer, self._worker, self._waiters, self._inbox
        )
        self._answers = Answers(self._shared, self._writer, self._worker, self._inbox)
        self._steers = Steers(self._shared, self._writer, self._inbox)
        self._holding = Holding(
            self._shared, self._writer, self._worker, self._cancels, self._inbox
        )
        self._admission = Admission(
            self._shared, self._writer, self._worker, self._cancels, self._inbox
        )
        self.upkeep = Upkeep(
            self,
            self._shared,
            admission=self._admission,
            answers=self._answers,
            cancels=self._cancels,
            worker=self._worker,
            writer=self._writer,
            inbox=self._inbox,
            waiters=self._waiters,
        )
        """The runtime's calls: recovery at start-up, the sweep, the close."""

    # -- the session and what it holds -----------------------------------------

    @property
    def runtime(self) -> SessionHost:
        """The runtime hosting this session."""
        return self._shared.host

    @property
    def agent(self) -> Agent:
        """The agent whose session this is."""
        return self._shared.agent

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
        """Every turn of the session, in admission order, each with its `steering`."""
        state = await self._shared.loaded()
        records = sorted(state.turns.values(), key=lambda t: t.seq)
        steers = self._shared.steers
        return [
            dataclasses.replace(t, steering=steered)
            if (steered := steering_of(state, t, steers.pending(t.turn_id)))
            else t
            for t in records
        ]

    async def archived(self, generation: int) -> Archive | None:
        """The history a reset archived as ``generation`` (None if there is no such one)."""
        return await self._shared.host.store.load_archive(self.key, generation)

    # -- admitting turns -------------------------------------------------------

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
        return await self._admission.start(given, turn_id, replace=replace)

    # -- cancel and reset ------------------------------------------------------

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
            ValueError: ``reason`` is one `INTERRUPT_REASONS` reserves (use
                `interrupt_turn`).
        """
        if reason in INTERRUPT_REASONS:
            raise ValueError(f"cancel reason {reason!r} is reserved for interrupts")
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

    # -- human in the loop -----------------------------------------------------

    async def suspended(self) -> Suspended | None:
        """The checkpoint of the turn this session is suspended on, if it is."""
        state = await self._shared.loaded()
        return None if suspend_is_ending(state) else suspended_in(state)

    async def pending(self) -> tuple[InputRequest, ...]:
        """The requests the session is suspended on, in call order; empty if it is not."""
        suspended = await self.suspended()
        return suspended.requests if suspended else ()

    async def answer_of(self, turn_id: str, input_id: str) -> StoredAnswer | None:
        """How request ``input_id`` of ``turn_id`` was settled, or None while it is open.

        For a mirror of a child turn's request, how the child's request was settled.
        """
        steps = await self._shared.host.store.load_steps(self.key, turn_id)
        answer = StoredAnswer.from_memo(steps.get(answer_step(turn_id, input_id)))
        if answer is not None and (child := answer.request.child) is not None:
            # a mirror is settled once its child's request is: that one says how
            return await self._shared.host.delegations.answer_of(child) or answer
        return answer

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

    # -- waiting and watching --------------------------------------------------

    async def result(self, turn_id: str) -> TurnResult:
        """Wait for the turn to end: completed, suspended, failed, cancelled or interrupted.

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
            TurnInterruptedError: The engine interrupted the turn (it held a poison turn).
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
        if isinstance(result, Interrupted):
            raise TurnInterruptedError(result.reason, result.detail, turn_id=turn_id)
        raise TurnSuspendedError(
            f"turn {turn_id} is suspended for input; turn() does not wait for people",
            turn_id=turn_id,
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

    # -- what the process that writes it is doing --------------------------------

    def was_handed_over(self, turn_id: str) -> bool:
        """Whether the turn's start or answer went to the process writing the session.

        That one runs the turn, and shows it (see ``AgentRuntime(hand_over=)``).
        """
        return turn_id in self._shared.handed_over and not self.upkeep.knows(turn_id)

    async def is_written_elsewhere(self) -> bool:
        """Whether another live process writes the session now (it runs and shows its turns).

        The lease is taken if it is free and let go again; nothing is read or queued.
        """
        async with self._shared.admit_lock:
            lease = self._shared.lease
            if lease.is_held:
                return False
            if not await lease.take(wait=False):
                return True
            if self._shared.worker_task is None:
                await lease.drop()
            return False

    async def settle_inbox_item(self, item: int) -> None:
        """Delete an inbox item that was carried out with nothing else to write."""
        async with self._writer.locked_and_leased():
            await self._writer.commit_shielded(Commit(inbox_done=(item,)))
