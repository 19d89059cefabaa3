"""The writes that end a turn early: failed, cancelled or interrupted, and held.

Each is one transaction: the turn's record and a result for every call it still
owes, so the next model request gets a valid transcript. A call whose result
committed before the calls ahead of it (a concurrent batch) keeps that result.
"""

from __future__ import annotations

import dataclasses

from agent._json import JsonValue
from agent.core.events import TurnCancelled, TurnFailed, TurnInterrupted
from agent.core.records import Commit
from agent.core.turns import Cancelled, Failed, Interrupted, TurnResult, stop_result
from agent.engine.turn.batch import unplaced_results
from agent.engine.turn.commits import NOT_RUN_AFTER_FAILURE, closing_result, ending_commit
from agent.engine.turn.context import RunContext, StepFailed

__all__ = ["fail", "hold", "stop"]


async def fail(run: RunContext, failure: StepFailed) -> TurnResult:
    """End the turn failed, where ``failure`` says."""
    result = Failed(
        turn_id=run.turn_id,
        error=failure.error,
        phase=failure.phase,  # type: ignore[arg-type]
        step=failure.step,
    )
    # the calls that failed the turn ran: each keeps its own error, the rest were not run
    own: dict[str, JsonValue] = {
        call_id: {"error": error} for call_id, error in failure.also.items()
    }
    if failure.call_id is not None:
        own[failure.call_id] = {"error": failure.error}
    await run.commit(await _ending(run, result, NOT_RUN_AFTER_FAILURE, own=own))
    run.emit(TurnFailed, error=failure.error, phase=failure.phase, step=failure.step)
    return result


async def stop(run: RunContext, reason: str) -> TurnResult:
    """End the turn as its stop request says: cancelled, or interrupted (see `stop_result`)."""
    result = stop_result(run.turn_id, reason)
    await run.commit(await _ending(run, result, closing_result(result)))
    if isinstance(result, Cancelled):
        run.emit(TurnCancelled, reason=reason)
    else:
        run.emit(TurnInterrupted, reason=result.reason, detail=result.detail)
    return result


async def hold(run: RunContext) -> TurnResult:
    """End a turn the process died under `POISON_RUNS` times in a row: held, not resumed."""
    detail = (
        f"the process stopped {run.record.runs} times in a row while running this turn "
        "(a tool may be killing it), so it is not resumed again; an operator may retry "
        "or drop it (python -m bot turns --held)"
    )
    result = Interrupted(turn_id=run.turn_id, reason="held", detail=detail)
    ending = await _ending(run, result, closing_result(result))
    # the turns queued behind it wait too, until the operator decides (see `holds`)
    await run.commit(dataclasses.replace(ending, hold=f"turn {run.turn_id} is held: {detail}"))
    run.emit(TurnInterrupted, reason="held", detail=detail)
    return result


async def _ending(
    run: RunContext,
    result: Failed | Cancelled | Interrupted,
    closing: JsonValue,
    *,
    own: dict[str, JsonValue] | None = None,
) -> Commit:
    """The ending's commit, placing what calls of the batch settled before it."""
    settled = await unplaced_results(run)
    return ending_commit(run.state, run.record, result, closing, own=own, settled=settled)
