"""A batch: the tool calls one model reply asked for, run to a result each.

Since `PARALLEL_CALLS`, the calls of a batch run concurrently (at most the
agent's ``max_parallel_calls`` at once, taking their places in call order), while
local calls take their transactions one at a time; each result commits as its
call ends and reaches the transcript in call order (see
`agent.engine.turn.placement`). A turn recorded before that change runs its calls
one after another, as it was recorded.

A replay finds what the batch had committed: results in the transcript, and
results of calls that finished before a call ahead of them, kept as their step's
memo. Only the calls with neither run again. A stored step that the transcript
contradicts is a `ReplayIntegrityError`, raised before anything is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence

from agent._json import JsonValue
from agent.core.hitl import InputRequest, InputRequired, own_request_id
from agent.core.messages import ToolCall, ToolMessage
from agent.engine.turn.commits import owed_calls, settled_memo, settled_message
from agent.engine.turn.context import RunContext, StepFailed
from agent.engine.turn.patches import PARALLEL_CALLS, patched
from agent.engine.turn.placement import InCallOrder, OneByOne
from agent.engine.turn.tool_step import tool_step
from agent.errors import ReplayIntegrityError

__all__ = ["run_batch", "unplaced_results"]


async def run_batch(run: RunContext, at: int, owed: Sequence[ToolCall]) -> None:
    """Run the calls ``owed`` of the reply at transcript index ``at`` to a result each.

    Raises:
        Interrupted: The turn is to stop; the calls not started are still owed.
        StepFailed: A call raised `FatalToolError` (the first in call order, if several).
        InputRequired: A call waits for a person; the others ran to their results first.
        ReplayIntegrityError: The store holds a result the transcript contradicts.
    """
    settled = await _settled(run, at, owed)
    if not patched(run.record, PARALLEL_CALLS):
        if settled:
            first = next(iter(settled))
            raise ReplayIntegrityError(
                f"{run.key}: turn {run.turn_id} runs its calls one after another, yet a "
                "result is stored for a call the transcript still owes",
                turn_id=run.turn_id,
                expected=f"no step for call {first} before index {len(run.transcript)}",
                found=f"step tool:{at}:{first}",
            )
        one_by_one = OneByOne(run)
        for call in owed:
            run.stop_if_cancelled()  # a cancel is honoured between calls
            await tool_step(run, at, call, one_by_one)
        return
    placement = InCallOrder(run, owed, settled)
    await placement.place_head()
    bound = asyncio.Semaphore(run.agent.max_parallel_calls)
    asked: dict[str, tuple[InputRequest, ...]] = {}
    failed: dict[str, StepFailed] = {}

    async def one(call: ToolCall) -> None:
        # calls take the slots in call order, so with one slot they run one by one
        async with bound:
            # one slot means strict call order: nothing starts after a call that asks
            waits = bool(asked) and run.agent.max_parallel_calls == 1
            if run.cancel_reason() is not None or failed or waits:
                return  # never started: it stays owed (the ending, or the answer, runs it)
            try:
                await tool_step(run, at, call, placement)
            except InputRequired as asking:
                # a call that delegated asks whatever its child turn asks
                asked[call.id] = (asking.request, *asking.others)
            except StepFailed as failure:
                failed[call.id] = failure

    await _all_of([asyncio.ensure_future(one(call)) for call in owed if call.id not in settled])
    order = [call.id for call in owed]
    if failed:
        first, *rest = sorted(failed, key=order.index)
        failure = failed[first]
        failure.also = {call_id: failed[call_id].error for call_id in rest}
        raise failure
    run.stop_if_cancelled()
    if asked:
        # every call that asks is asked at once; the turn runs on once all are answered
        in_order = sorted(asked, key=order.index)
        asking, *others = _distinct(r for call_id in in_order for r in asked[call_id])
        raise InputRequired(asking, tuple(others))


def _distinct(requests: Iterable[InputRequest]) -> list[InputRequest]:
    """The batch's requests, each under an id of its own.

    Two calls of one tool ask under the same id; all but the first (in call order) ask
    as ``<id>@<call id>``, which is where their replay looks once the first id's answer
    is stored for another call (see ``_AnswerLookup``), so each call gets its own answer.
    """
    seen: set[str] = set()
    distinct = []
    for request in requests:
        if request.id in seen:
            request = dataclasses.replace(request, id=own_request_id(request.id, request.call_id))
        seen.add(request.id)
        distinct.append(request)
    return distinct


async def unplaced_results(run: RunContext) -> dict[str, JsonValue]:
    """The settled results of the calls the turn still owes, by call id: what its ending places."""
    owed, at = owed_calls(run.transcript, run.turn_id)
    if not owed:
        return {}
    settled = await _settled(run, at, owed)
    return {call_id: settled_memo(message) for call_id, message in settled.items()}


async def _settled(run: RunContext, at: int, owed: Sequence[ToolCall]) -> dict[str, ToolMessage]:
    """The owed calls whose result is committed already, waiting for a call ahead of them."""
    settled: dict[str, ToolMessage] = {}
    stored = await run.stored_steps()
    for call in owed:
        step = f"tool:{at}:{call.id}"
        memo = run.unplaced.get(call.id, stored.get(step))
        if memo is None:
            continue
        message = settled_message(run.turn_id, call, memo)
        if message is None:
            placed = memo.get("message") if isinstance(memo, dict) else None
            raise ReplayIntegrityError(
                f"{run.key}: turn {run.turn_id}: step {step} says its result is in the "
                "transcript, but the transcript still owes that call one",
                turn_id=run.turn_id,
                expected=f"the result of call {call.id} at transcript index {len(run.transcript)}",
                found=f"step {step} placed at index {placed}",
            )
        settled[call.id] = message
    return settled


async def _all_of(tasks: list[asyncio.Future[None]]) -> None:
    """Wait for every task; the first error (in task order) is raised once all have stopped.

    Each task catches what a call may end in; anything else (the store failed, the
    lease was lost, a replay disagreed) stops the others, and so does a cancel of the
    batch itself (a shutdown): each running call then gets its grace to finish.
    """
    if not tasks:
        return
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        raise
    if not all(task.done() for task in tasks):
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
    errors = [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]
    if errors:
        raise errors[0]  # type: ignore[misc]
