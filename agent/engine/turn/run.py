"""`TurnRun`: drives one turn from wherever its transcript says it stands to its ending.

The loop reads its position off the transcript: an assistant message with calls
still owed a result means tool steps, anything else means a model step, and a
reply that asks for no tool ends the turn. The run writes the ending itself:
completed, failed, cancelled, interrupted (held after the process died under it
too often), or suspended on a person's answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

from agent._json import JsonValue
from agent.core.events import (
    InputRequested,
    MessageCompleted,
    TurnCompleted,
    TurnEvent,
    TurnStarted,
    TurnSteered,
)
from agent.core.hitl import InputRequired
from agent.core.messages import AssistantMessage, Usage
from agent.core.records import Commit, SessionKey, StoredMessage, StoredSession, StoredStep
from agent.core.turns import (
    POISON_RUNS,
    Completed,
    Suspended,
    TurnRecord,
    TurnResult,
    moved,
)
from agent.definition.agent import Agent
from agent.engine.turn.batch import run_batch, unplaced_results
from agent.engine.turn.commits import (
    opening_commit,
    owed_calls,
)
from agent.engine.turn.context import Delegator, Interrupted, RunContext, StepFailed
from agent.engine.turn.endings import fail, hold, stop
from agent.engine.turn.model_step import model_step
from agent.engine.turn.output import ask_for_output, settle_output
from agent.engine.turn.steering import PendingSteer, SteerBox, steer_step, steers_placed
from agent.errors import ReplayIntegrityError
from agent.ports import SessionStore

__all__ = ["TurnRun"]


class TurnRun:
    """Drives one turn from wherever its transcript says it stands to a result."""

    def __init__(
        self,
        *,
        agent: Agent,
        store: SessionStore,
        key: SessionKey,
        state: StoredSession,
        record: TurnRecord,
        emit: Callable[[TurnEvent], None],
        clock: Callable[[], float] = time.time,
        holder: str | None = None,
        opened_here: bool = False,
        still_ours: Callable[[], Awaitable[None]] | None = None,
        stop_landed: Callable[[], Awaitable[None]] | None = None,
        steers: SteerBox | None = None,
        delegator: Delegator | None = None,
        forward: Callable[[TurnEvent], None] | None = None,
    ) -> None:
        """Set up one run of ``record``'s turn.

        ``opened_here``: this process's admission opened the turn just now, so this
        is its first run, counted in the opening commit already. ``stop_landed``:
        waits until a request to stop this turn is on disk (or was taken back).
        ``steers``: the session's steers not yet placed (see `agent.engine.turn.steering`).
        ``delegator`` runs the child turns its calls delegate to, and ``forward`` shows
        their events to this turn's watchers.
        """
        self._opened_here = opened_here
        self._counted = opened_here
        self._run = RunContext(
            agent=agent,
            store=store,
            key=key,
            state=state,
            record=record,
            emit=emit,
            clock=clock,
            holder=holder,
            still_ours=still_ours,
            delegator=delegator,
            forward=forward,
        )
        self._run.is_replay = self._is_replay()
        self._stop_landed = stop_landed
        self._steers = steers if steers is not None else SteerBox()
        self._steers_read = False

    @property
    def turn_id(self) -> str:
        """The turn this run drives."""
        return self._run.turn_id

    @property
    def counted(self) -> bool:
        """Whether this run is counted in the turn's stored ``runs`` (see `TurnRecord.runs`).

        A run stopped by a clean close of the runtime is no death of the process: the
        runtime takes the count back (see ``Worker.take_back_runs``).
        """
        return self._counted

    @property
    def stop_reason(self) -> str | None:
        """Why the turn is to stop (a stored cancel, its time limit), or None."""
        return self._run.cancel_reason()

    def interrupt(self) -> None:
        """Stop at the next checkpoint boundary: a cancel request was stored for this turn.

        A model reply being streamed is abandoned (its request aborted) at once; a remote
        tool that is running gets the agent's ``tool_cancel_grace`` to finish (its result
        commits), then its task is cancelled and its result says it was stopped.
        """
        self._run.interrupted.set()

    async def run(self) -> TurnResult:
        """Run the turn until it completes, fails, is cancelled or suspends; each step commits."""
        limit = self._run.agent.max_turn_seconds
        timer = None
        if limit is not None:
            # each run has the whole limit: time spent suspended on an answer does not count
            timer = asyncio.get_running_loop().call_later(limit, self._run.time_up)
        try:
            return await self._run_to_ending()
        finally:
            if timer is not None:
                timer.cancel()

    async def _run_to_ending(self) -> TurnResult:
        run = self._run
        # The cancel came before the turn opened (nothing of it is written yet), or the
        # turn was recovered after a stop with its cancel already stored.
        if run.cancel_reason() and (cancelled := await self._cancel_if_still_asked()):
            return cancelled
        if self._is_replay() and run.record.runs >= POISON_RUNS:
            return await hold(self._run)
        if self._is_replay() and run.record.runs and run.agent.on_lost == "interrupt":
            # a run counted and never ended: the process under it was lost, not stopped
            return await stop(self._run, "lost")
        await self._open()
        trigger = "resume" if run.record.resumes else run.record.input.trigger
        parent = run.record.input.parent
        run.emit(TurnStarted, trigger=trigger, parent=parent.turn_id if parent else None)
        while True:
            try:
                return await self._loop()
            except StepFailed as failure:
                return await fail(self._run, failure)
            except Interrupted:
                if cancelled := await self._cancel_if_still_asked():
                    return cancelled
                # the cancel's write failed, so it was never asked for: go on from the
                # last checkpoint (what the interrupted step had not written is asked again)
                run.interrupted.clear()
            except InputRequired as asked:
                # nobody is to be asked for a cancelled turn
                if run.cancel_reason() and (cancelled := await self._cancel_if_still_asked()):
                    return cancelled
                return await self._suspend(asked)

    async def _cancel_if_still_asked(self) -> TurnResult | None:
        """End the turn as cancelled once the request is on disk; None if it was taken back.

        A request to stop is marked here before its write lands. Ending the turn before
        then could put the ending on disk first (on a store of many connections), and a
        crash between the two would leave the turn cancelled by a replace whose new turn
        was never admitted.
        """
        if self._stop_landed is not None:
            await self._stop_landed()
        reason = self._run.cancel_reason()
        return None if reason is None else await stop(self._run, reason)

    async def _suspend(self, asked: InputRequired) -> TurnResult:
        """Suspend the turn on what was ``asked``, in one checkpoint.

        The checkpoint holds everything the resumed turn needs, so nothing of the
        turn is kept in memory while it waits for the answer.
        """
        run = self._run
        given = run.record.input
        result = Suspended(
            turn_id=run.turn_id,
            request=asked.request,
            others=asked.others,
            opening_text=given.text,
            event=given.event,
            policy=given.policy,
            settled=await unplaced_results(run),
        )
        record = moved(run.record, "suspended", result=result)
        await run.commit(Commit(turns=(record,), status="suspended"))
        # a cancel came while the suspend was being written: nobody is to be asked after all
        if run.cancel_reason() and (cancelled := await self._cancel_if_still_asked()):
            return cancelled
        others = [other.as_dict() for other in asked.others]
        run.emit(InputRequested, request=asked.request.as_dict(), others=others)
        return result

    def _is_replay(self) -> bool:
        """Whether this run picks the turn up again (a crash, a takeover, an answer)."""
        return self._run.record.opening_index is not None and not self._opened_here

    async def _open(self) -> None:
        """Write the turn's opening, or, for a replay, count the run it begins.

        The count is what tells a poison turn at the next start: a run that ends the
        turn writes the ending, and a clean close takes the count of the run it stopped
        back, so a count that keeps growing means the process died under each run (see
        `TurnRecord.runs`).
        """
        run = self._run
        if self._is_replay():
            commit = Commit(turns=(dataclasses.replace(run.record, runs=run.record.runs + 1),))
        elif run.record.opening_index is not None:
            return  # opened by this process's admission, in the opening commit
        else:
            _, commit = opening_commit(run.record, len(run.transcript))
        # A close that lands meanwhile must know whether the count did, to take it back.
        cancelled = await run.commit_through_cancel(commit)
        self._counted = True
        if cancelled:
            raise asyncio.CancelledError

    async def _loop(self) -> TurnResult:
        run = self._run
        while True:
            last = run.transcript[-1]
            if last.turn_id != run.turn_id:
                raise ReplayIntegrityError(
                    f"{run.key}: turn {run.turn_id} is not at the end of the transcript; "
                    "refusing to continue it out of order",
                    turn_id=run.turn_id,
                    expected=f"turn {run.turn_id} at transcript index {len(run.transcript) - 1}",
                    found=f"a message of turn {last.turn_id}",
                )
            owed, at = owed_calls(run.transcript, run.turn_id)
            if owed:
                # the calls not run (a cancel, a failure) get a closing result at the ending
                await run_batch(run, at, owed)
                continue
            run.stop_if_cancelled()
            if await self._place_steers():
                continue
            if run.agent.output_type is not None:
                if (done := await settle_output(run, self._steers, last)) is not None:
                    return await self._complete(done.text, output=done.value)
                if isinstance(last, AssistantMessage) and not last.tool_calls:
                    continue  # the reply gave no result: the model was asked for it
            elif isinstance(last, AssistantMessage) and not last.tool_calls:
                # the reply that ends the turn is written, but the turn was never marked
                # completed (or a steer came as it was written): mark it now
                if self._steers.close_unless_steered(run.turn_id):
                    return await self._complete(last.text)
                continue
            final = await model_step(run, len(run.transcript))
            if final is None:
                continue
            if run.agent.output_type is not None:
                await ask_for_output(run, self._steers, final.text, final.messages, final.steps)
                continue
            if self._steers.close_unless_steered(run.turn_id):
                return await self._complete(final.text, final.messages, final.steps)
            # steered as the reply came: it stays, and the model answers the steer next
            await run.commit(Commit(messages=final.messages, steps=final.steps))
            if final.text:
                run.emit(MessageCompleted, text=final.text, index=final.messages[0].index)

    async def _place_steers(self) -> bool:
        """Put the steers that landed into the transcript, in one commit; whether any was.

        A replay first reads back the steers stored before the process stopped and
        not yet placed.
        """
        run = self._run
        if not self._steers_read:
            self._steers_read = True
            if self._is_replay():
                await self._read_back_steers()
        pending = self._steers.pending(run.turn_id)
        if not pending:
            return False
        for steer in pending:
            await asyncio.shield(steer.landed)
        taken = [steer for steer in pending if steer.landed.result()]
        self._steers.drop(run.turn_id, {steer.steer_id for steer in pending})
        if not taken:
            return False
        at = len(run.transcript)
        messages = tuple(
            StoredMessage(at + i, steer.message(run.turn_id)) for i, steer in enumerate(taken)
        )
        await run.commit(Commit(messages=messages))
        for stored, steer in zip(messages, taken, strict=True):
            run.emit(
                TurnSteered,
                steer_id=steer.steer_id,
                text=steer.text,
                by=steer.by,
                index=stored.index,
            )
        return True

    async def _read_back_steers(self) -> None:
        run = self._run
        placed = steers_placed(run.transcript, run.turn_id, run.record.opening_index or 0)
        prefix = steer_step(run.turn_id, "")
        for step_id, memo in (await run.stored_steps()).items():
            steer_id = step_id.removeprefix(prefix)
            if not step_id.startswith(prefix) or steer_id in placed:
                continue
            if self._steers.find(run.turn_id, steer_id) is None:
                self._steers.add(run.turn_id, PendingSteer.from_memo(steer_id, memo))

    async def _complete(
        self,
        text: str,
        messages: tuple[StoredMessage, ...] = (),
        steps: tuple[StoredStep, ...] = (),
        *,
        output: JsonValue = None,
    ) -> TurnResult:
        """Mark the turn completed, in the same transaction as its final reply when given."""
        run = self._run
        usage = self._usage_so_far(messages)
        result = Completed(turn_id=run.turn_id, text=text, usage=usage, output=output)
        record = moved(run.record, "completed", result=result)
        await run.commit(Commit(messages=messages, steps=steps, turns=(record,), status="idle"))
        if messages and text:
            run.emit(MessageCompleted, text=text, index=messages[0].index)
        run.emit(TurnCompleted, text=text, usage=usage, output=output)
        return result

    def _usage_so_far(self, pending: tuple[StoredMessage, ...]) -> Usage:
        """The turn's committed model usage, read off the transcript so a replay counts it too."""
        run = self._run
        total = Usage()
        start = run.record.opening_index or 0
        replies = [*run.transcript[start:], *(stored.message for stored in pending)]
        for message in replies:
            if isinstance(message, AssistantMessage) and message.turn_id == run.turn_id:
                total += message.usage or Usage()
        return total
