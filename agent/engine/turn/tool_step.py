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
    with_expiry,
)
from agent.core.messages import AssistantMessage, ToolCall, ToolMessage
from agent.core.records import Commit, StoredMessage, StoredStep, apply_commit
from agent.definition.tools import (
    Tool,
    ToolContext,
    describe_error,
    idempotency_key,
    jsonable_result,
)
from agent.engine.turn.context import RunContext, StepFailed, is_being_cancelled
from agent.errors import FatalToolError, ToolError

__all__ = ["tool_step"]


async def tool_step(run: RunContext, at: int, call: ToolCall) -> None:
    """Run ``call`` of the assistant message at transcript index ``at``; commit its result.

    Raises:
        StepFailed: The tool raised `FatalToolError`.
        InputRequired: A remote tool asked for a person's answer that is not stored yet.
    """
    step = f"tool:{at}:{call.id}"
    asking = run.transcript[at]
    note = asking.note_before(call.id) if isinstance(asking, AssistantMessage) else ""
    run.emit(ActionRequested, call_id=call.id, name=call.name, input=call.input, note=note)
    ctx = ToolContext(
        agent=run.key.agent,
        session_id=run.key.session_id,
        turn_id=run.turn_id,
        call_id=call.id,
        idempotency_key=idempotency_key(run.turn_id, call.id),
    )
    # a denied tool is no tool at all here, whatever the model was talked into
    tool = None if call.name in run.denied else run.agent.tools_by_name.get(call.name)
    if tool is not None and not tool.is_local:
        ctx = dataclasses.replace(ctx, inputs=_AnswerLookup(run, call))
    try:
        if tool is None:
            raise ToolError(f"unknown tool: {call.name}")
        arguments = tool.parse_input(call.input)
    except ToolError as exc:
        message = _tool_message(run, call, error=exc)
        await run.commit(_tool_commit(run, step, message))
    else:
        try:
            if tool.is_local:
                message = await _local_call(run, step, call, tool, arguments, ctx)
            else:
                message = await _remote_call(run, step, call, tool, arguments, ctx)
        except FatalToolError as exc:
            raise StepFailed(describe_error(exc), phase="tool", step=step, call_id=call.id) from exc
    run.emit(
        ActionCompleted,
        call_id=call.id,
        name=call.name,
        result=message.result,
        error=message.result.get("error") if message.is_error else None,
    )


async def _local_call(
    run: RunContext,
    step: str,
    call: ToolCall,
    tool: Tool,
    arguments: dict[str, Any],
    ctx: ToolContext,
) -> ToolMessage:
    def work(handle: Any) -> JsonValue:
        return jsonable_result(tool, tool.call(arguments, dataclasses.replace(ctx, handle=handle)))

    def record(outcome: JsonValue | Exception) -> Commit:
        if isinstance(outcome, FatalToolError):
            raise outcome
        if isinstance(outcome, Exception):
            return _tool_commit(run, step, _tool_message(run, call, error=outcome))
        return _tool_commit(run, step, _tool_message(run, call, result=outcome))

    def fenced(outcome: JsonValue | Exception) -> Commit:
        return dataclasses.replace(record(outcome), holder=run.holder)

    commit = await run.store.commit_with(run.key, work, fenced)
    apply_commit(run.state, commit)
    message = commit.messages[0].message
    assert isinstance(message, ToolMessage)
    return message


async def _remote_call(
    run: RunContext,
    step: str,
    call: ToolCall,
    tool: Tool,
    arguments: dict[str, Any],
    ctx: ToolContext,
) -> ToolMessage:
    try:
        result = await _unwrap_input_required(tool.call(arguments, ctx))
        message = _tool_message(run, call, result=jsonable_result(tool, result))
    except FatalToolError:
        raise
    except Exception as exc:
        message = _tool_message(run, call, error=exc)
    except asyncio.CancelledError as exc:
        if is_being_cancelled():
            raise
        # something the tool awaited was cancelled, not this turn: the call failed
        message = _tool_message(run, call, error=exc)
    await run.commit(_tool_commit(run, step, message))
    return message


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


def _tool_commit(run: RunContext, step: str, message: ToolMessage) -> Commit:
    index = len(run.transcript)
    memo = {"message": index, "is_error": message.is_error}
    return Commit(
        messages=(StoredMessage(index, message),),
        steps=(StoredStep(step, run.turn_id, memo),),
    )


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
            id = f"{id}@{self._call.id}"
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
