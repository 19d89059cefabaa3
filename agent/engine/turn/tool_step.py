"""A tool step: run one call the model asked for, and commit its result.

The step's id is ``tool:<n>:<call_id>`` for a call of the assistant message at
transcript index n. A local tool (a plain ``def``) runs inside the transaction
that records its result, so it runs exactly once; a remote tool (``async def``)
is awaited first and its result committed after, so it runs at least once. A
tool that raises reports the error to the model; `FatalToolError` fails the turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from agent._json import JsonValue
from agent.core.events import ActionCompleted, ActionRequested
from agent.core.hitl import (
    EXPIRED,
    InputRequest,
    InputRequired,
    answer_step,
    answerers_from,
    check_schema,
    own_request_id,
    with_expiry,
)
from agent.core.messages import AssistantMessage, ToolCall, ToolMessage
from agent.core.turns import INTERRUPT_REASONS
from agent.definition.tools import (
    Tool,
    ToolContext,
    describe_error,
    idempotency_key,
    jsonable_result,
)
from agent.engine.turn.approval import approved_or_declined
from agent.engine.turn.context import RunContext, StepFailed
from agent.engine.turn.kinds import needs_approval, recorded_kind
from agent.engine.turn.placement import Placement
from agent.engine.turn.progress import ProgressLine
from agent.errors import FatalToolError, ToolError

__all__ = ["tool_step"]

log = logging.getLogger(__name__)


async def tool_step(run: RunContext, at: int, call: ToolCall, placement: Placement) -> None:
    """Run ``call`` of the assistant message at transcript index ``at``; commit its result.

    ``placement`` says where the result goes (see `agent.engine.turn.placement`).

    Raises:
        StepFailed: The tool raised `FatalToolError`.
        InputRequired: A person's answer is needed and not stored yet: the call's
            approval (see `agent.engine.turn.approval`), or the tool's own request.
    """
    step = f"tool:{at}:{call.id}"
    asking = run.transcript[at]
    note = asking.note_before(call.id) if isinstance(asking, AssistantMessage) else ""
    run.emit(ActionRequested, call_id=call.id, name=call.name, input=call.input, note=note)
    progress = ProgressLine(run, call)
    ctx = ToolContext(
        agent=run.key.agent,
        session_id=run.key.session_id,
        turn_id=run.turn_id,
        call_id=call.id,
        idempotency_key=idempotency_key(run.turn_id, call.id),
        reporter=progress,
        event=run.record.input.event,
    )
    # a denied tool is no tool at all here, whatever the model was talked into
    tool = run.tool_for(call.name)
    recorded = await recorded_kind(run, at, call)
    if tool is not None and not tool.is_local:
        ctx = dataclasses.replace(
            ctx, inputs=_AnswerLookup(run, call), delegation=_Delegation(run, call)
        )
    try:
        if tool is None:
            raise ToolError(f"unknown tool: {call.name}")
        arguments = tool.parse_input(call.input)
        declined = await approved_or_declined(run, call) if needs_approval(recorded, tool) else None
    except ToolError as exc:
        message = _tool_message(run, call, error=exc)
        await placement.record(step, message)
    else:
        try:
            if declined is not None:
                message = _declined(run, call, declined)
                await placement.record(step, message)
            elif tool.is_local:
                message = await _local_call(run, placement, step, call, tool, arguments, ctx)
            else:
                message = await _remote_call(run, placement, step, call, tool, arguments, ctx)
        except FatalToolError as exc:
            raise StepFailed(describe_error(exc), phase="tool", step=step, call_id=call.id) from exc
        finally:
            progress.close()
    run.emit(
        ActionCompleted,
        call_id=call.id,
        name=call.name,
        result=message.result,
        error=message.result.get("error") if message.is_error else None,
    )


async def _local_call(
    run: RunContext,
    placement: Placement,
    step: str,
    call: ToolCall,
    tool: Tool,
    arguments: dict[str, Any],
    ctx: ToolContext,
) -> ToolMessage:
    def work(handle: Any) -> JsonValue:
        return jsonable_result(tool, tool.call(arguments, dataclasses.replace(ctx, handle=handle)))

    def outcome_message(outcome: JsonValue | Exception) -> ToolMessage:
        if isinstance(outcome, FatalToolError):
            raise outcome
        if isinstance(outcome, Exception):
            return _tool_message(run, call, error=outcome)
        return _tool_message(run, call, result=outcome)

    return await placement.record_local(step, work, outcome_message)


async def _remote_call(
    run: RunContext,
    placement: Placement,
    step: str,
    call: ToolCall,
    tool: Tool,
    arguments: dict[str, Any],
    ctx: ToolContext,
) -> ToolMessage:
    """Await a remote tool in a task of its own, so that nothing makes the turn wait forever.

    The call ends when the tool returns or raises; when its own ``timeout`` passes (its
    result is then a `TimeoutError`, as if it raised); or when the turn is to stop (a
    cancel, a replace, a reset, the time limit) and the tool has not finished within
    the agent's ``tool_cancel_grace`` (its result then says it was stopped, and why).
    """
    running = asyncio.ensure_future(_unwrap_input_required(tool.call(arguments, ctx)))
    try:
        stopped = await _until_done_or_stopped(run, tool, running)
    except asyncio.CancelledError:
        # this task was cancelled (a shutdown): the tool's task goes with it
        await _stop(running, run.agent.tool_cancel_grace)
        raise
    if stopped is not None:
        message = stopped(call)
    else:
        try:
            result = running.result()
            message = _tool_message(run, call, result=jsonable_result(tool, result))
        except FatalToolError:
            raise
        except Exception as exc:
            message = _tool_message(run, call, error=exc)
        except asyncio.CancelledError as exc:
            # something the tool awaited was cancelled, not this turn: the call failed
            message = _tool_message(run, call, error=exc)
    await placement.record(step, message)
    return message


def _declined(run: RunContext, call: ToolCall, result: JsonValue) -> ToolMessage:
    return ToolMessage(
        turn_id=run.turn_id, call_id=call.id, name=call.name, result=result, is_error=True
    )


async def _until_done_or_stopped(
    run: RunContext, tool: Tool, running: asyncio.Future[Any]
) -> Callable[[ToolCall], ToolMessage] | None:
    """Wait for ``running``; None once it is done, else how to record the call it stopped."""
    loop = asyncio.get_running_loop()
    deadline = None if tool.timeout is None else loop.time() + tool.timeout
    grace_ends: float | None = None
    while not running.done():
        if run.cancel_reason() is None:
            grace_ends = None  # no cancel, or one whose write failed and was taken back
        elif grace_ends is None:
            grace_ends = loop.time() + run.agent.tool_cancel_grace
        ends = min((t for t in (deadline, grace_ends) if t is not None), default=None)
        # Until a cancel is seen, its interrupt wakes this wait; once the grace runs,
        # the interrupt is still set, so the wait is for the tool or the grace's end.
        interrupted = asyncio.ensure_future(run.interrupted.wait())
        waits = (running,) if grace_ends is not None else (running, interrupted)
        try:
            await asyncio.wait(
                waits,
                timeout=None if ends is None else max(0.0, ends - loop.time()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            interrupted.cancel()
        if running.done():
            return None
        now = loop.time()
        reason = run.cancel_reason()
        if grace_ends is not None and now >= grace_ends and reason is not None:
            await _stop(running, run.agent.tool_cancel_grace)
            return _stopped_by_cancel(run, reason)
        if deadline is not None and now >= deadline:
            await _stop(running, run.agent.tool_cancel_grace)
            return _timed_out(run, tool)
        if reason is None and run.interrupted.is_set():
            run.interrupted.clear()  # the interrupt's cancel was never stored: wait on
    return None


def _stopped_by_cancel(run: RunContext, reason: str) -> Callable[[ToolCall], ToolMessage]:
    grace = run.agent.tool_cancel_grace
    if reason == "timeout":
        why = "ran past its time limit"
    elif reason in INTERRUPT_REASONS:
        why = f"was interrupted ({INTERRUPT_REASONS[reason]})"
    else:
        why = f"was cancelled ({reason})"
    text = f"stopped: the turn {why} while this call ran, and it did not finish within {grace:g} s"
    ended = "interrupted" if reason in INTERRUPT_REASONS else "cancelled"

    def record(call: ToolCall) -> ToolMessage:
        return ToolMessage(
            turn_id=run.turn_id,
            call_id=call.id,
            name=call.name,
            result={ended: True, "reason": reason, "error": text},
            is_error=True,
        )

    return record


def _timed_out(run: RunContext, tool: Tool) -> Callable[[ToolCall], ToolMessage]:
    error = TimeoutError(f"tool {tool.name} did not finish within {tool.timeout:g} s")
    return lambda call: _tool_message(run, call, error=error)


async def _stop(running: asyncio.Future[Any], grace: float) -> None:
    """Cancel a tool's task and let it unwind for up to ``grace`` seconds.

    A tool that swallows its cancellation and goes on is left to end on its own (it
    is kept referenced until then): the turn does not wait for it.
    """
    running.cancel()
    await asyncio.wait((running,), timeout=grace)
    if not running.done():
        _ABANDONED.add(running)
        running.add_done_callback(_ABANDONED.discard)
        log.warning("a tool ignored its cancellation and still runs; the turn goes on")
    elif not running.cancelled():
        running.exception()  # retrieved, so asyncio does not report it as never seen


_ABANDONED: set[asyncio.Future[Any]] = set()
"""Tool tasks that ignored their cancellation, kept referenced until they end."""


def _tool_message(
    run: RunContext, call: ToolCall, *, result: JsonValue = None, error: BaseException | None = None
) -> ToolMessage:
    if error is not None:
        return ToolMessage(
            turn_id=run.turn_id,
            call_id=call.id,
            name=call.name,
            result={"error": describe_error(error)},
            is_error=True,
        )
    return ToolMessage(turn_id=run.turn_id, call_id=call.id, name=call.name, result=result)


class _AnswerLookup:
    """Answers one remote call's ``request_input``: a stored answer, or the turn suspends."""

    def __init__(self, run: RunContext, call: ToolCall) -> None:
        self._run = run
        self._call = call

    async def ask(
        self,
        *,
        id: str,
        prompt: str,
        schema: dict[str, JsonValue] | None,
        answerers: Any,
        ttl: float | None,
    ) -> JsonValue:
        answers = await self._run.answers()
        stored = answers.get(answer_step(self._run.turn_id, id))
        if stored is not None and stored.get("call") != self._call.id:
            # Another call of this turn asked with the same id. Its answer is not this
            # call's (approving one post must not approve the next), so this call asks
            # under an id of its own.
            id = own_request_id(id, self._call.id)
            stored = answers.get(answer_step(self._run.turn_id, id))
        if stored is not None:
            return EXPIRED if stored.get("expired") else stored.get("value")
        check_schema(schema)
        request = InputRequest(
            id=id,
            prompt=prompt,
            call_id=self._call.id,
            tool=self._call.name,
            schema=schema,
            answerers=answerers_from(answerers, self._run.record.input.event),
        )
        raise InputRequired(with_expiry(request, ttl, self._run.now()))


class _Delegation:
    """Starts one remote call's child turns, numbered in the order the call asks for them."""

    def __init__(self, run: RunContext, call: ToolCall) -> None:
        self._run = run
        self._call = call
        self._started = 0

    async def delegate(self, agent: str, task: str) -> JsonValue:
        if self._run.delegator is None:
            raise ToolError("this turn runs where no other agent is mounted to delegate to")
        nth, self._started = self._started, self._started + 1
        return await self._run.delegator.delegate(self._run, self._call, agent, task, nth)


async def _unwrap_input_required(running: Any) -> Any:
    """Await a tool; an `InputRequired` raised inside its own task group still suspends the turn.

    A task group wraps what its tasks raise in a `BaseExceptionGroup`; the first
    `InputRequired` in it is raised on its own, as if the tool had raised it.
    """
    try:
        return await running
    except BaseExceptionGroup as group:
        asked, _ = group.split(InputRequired)
        if asked is None:
            raise
        first: BaseException = asked
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
