"""A model step: ask the model (again, while its failures are passing ones), stream, commit.

The step's id is ``model:<n>`` for the reply that becomes transcript index n.
Its memo and the assistant message commit in one transaction. A cancel that
lands while the reply streams abandons the request at once; a reply that has
arrived but is not yet written is dropped for a cancel too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.core.events import MessageCompleted, MessageDelta, ReasoningDelta
from agent.core.messages import AssistantMessage, TranscriptView
from agent.core.model import ModelReply, ModelRequest, TextDelta, ThinkingDelta
from agent.core.records import Commit, StoredMessage, StoredStep
from agent.definition.tools import describe_error
from agent.engine.turn.context import Interrupted, RunContext, StepFailed, is_being_cancelled
from agent.engine.turn.kinds import kinds_of
from agent.errors import LeaseLostError, ModelError, ReplayIntegrityError

__all__ = ["FinalReply", "model_step"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FinalReply:
    """A reply that asks for no tool, not yet written: it commits with the turn's ending."""

    text: str
    messages: tuple[StoredMessage, ...]
    steps: tuple[StoredStep, ...]


async def model_step(run: RunContext, index: int) -> FinalReply | None:
    """Ask the model for transcript index ``index``; commit a reply that calls tools.

    Returns:
        The reply, unwritten, when it asks for no tool: the turn completes with it in
        one transaction. None when the reply called tools and has committed.

    Raises:
        Interrupted: The turn is to stop; nothing of this step was written.
        StepFailed: The model failed for good, or its reply may not commit.
        ReplayIntegrityError: A replay found this reply stored as a step already.
    """
    step = f"model:{index}"
    await _check_no_reply_stored(run, index)
    while True:
        try:
            reply = await _unless_interrupted(run, _ask_model(run, step))
            break
        except Interrupted:
            if run.cancel_reason() is not None:
                raise
            # The interrupt came from a cancel whose write then failed, so the cancel
            # was never asked for: ask the model again.
            run.interrupted.clear()
    run.stop_if_cancelled()  # a reply not yet written is dropped for a cancel
    message = AssistantMessage(
        turn_id=run.turn_id,
        content=reply.content,
        stop_reason=reply.stop_reason,
        usage=reply.usage,
        model=reply.model,
        prompt_digest=reply.prompt_digest,
    )
    # The memo points at the message it committed with, so the reply is stored once.
    messages = (StoredMessage(index, message),)
    if not message.tool_calls:
        steps = (StoredStep(step, run.turn_id, {"message": index}),)
        return FinalReply(message.text, messages, steps)
    # each call's kind is decided here, once: a replay reads it back (see `kinds`)
    kinds = kinds_of(run, message.tool_calls)
    steps = (StoredStep(step, run.turn_id, {"message": index, "kinds": dict(kinds)}),)
    run.kinds[index] = kinds
    await run.commit(Commit(messages=messages, steps=steps))
    if message.text:
        run.emit(MessageCompleted, text=message.text, index=index)
    return None


async def _check_no_reply_stored(run: RunContext, index: int) -> None:
    """Refuse to ask the model for a reply the store says it already holds (a replay).

    Raises:
        ReplayIntegrityError: The step is stored but its message is not where the
            transcript ends: history and transcript disagree.
    """
    memo = (await run.stored_steps()).get(f"model:{index}")
    if memo is None:
        return
    placed = memo.get("message") if isinstance(memo, dict) else None
    raise ReplayIntegrityError(
        f"{run.key}: turn {run.turn_id}: the model's reply for index {index} is stored as "
        "a step, but the transcript ends before it",
        turn_id=run.turn_id,
        expected=f"no step model:{index} (the transcript ends at {index - 1})",
        found=f"step model:{index} placed at index {placed}",
    )


async def _ask_model(run: RunContext, step: str) -> ModelReply:
    """Ask the model for step ``step``, trying again while its failures are passing ones."""
    policy = run.agent.model_retry
    attempt = 1
    while True:
        try:
            return _checked(await _stream_reply(run, step, attempt), step)
        except ModelError as exc:
            if not exc.retryable or attempt >= policy.attempts:
                raise StepFailed(str(exc), phase="model", step=step) from exc
            await asyncio.sleep(policy.delay(attempt, exc.retry_after))
            attempt += 1


async def _unless_interrupted(run: RunContext, work: Coroutine[Any, Any, T]) -> T:
    """Await ``work``, abandoning it (its model request aborted) if the turn is cancelled."""
    task = asyncio.ensure_future(work)
    interrupted = asyncio.ensure_future(run.interrupted.wait())
    try:
        await asyncio.wait((task, interrupted), return_when=asyncio.FIRST_COMPLETED)
    finally:
        interrupted.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise Interrupted
    return task.result()


async def _stream_reply(run: RunContext, step: str, attempt: int) -> ModelReply | None:
    request = ModelRequest(
        system=run.system,
        messages=TranscriptView(run.transcript, run.summary),
        tools=run.tool_specs,
        agent=run.key.agent,
        session_id=run.key.session_id,
        turn_id=run.turn_id,
        step=step,
        attempt=attempt,
    )
    reply: ModelReply | None = None
    try:
        async for event in run.agent.model.stream(request):
            if run.still_ours is not None and isinstance(event, TextDelta | ThinkingDelta):
                await run.still_ours()  # woken past its lease, a process shows nothing more
            if isinstance(event, TextDelta):
                run.emit(MessageDelta, text=event.text, attempt=attempt)
            elif isinstance(event, ThinkingDelta):
                run.emit(ReasoningDelta, text=event.text, attempt=attempt)
            else:
                reply = event
    except (ModelError, LeaseLostError):
        raise
    except Exception as exc:
        raise StepFailed(describe_error(exc), phase="model", step=step) from exc
    except asyncio.CancelledError as exc:
        if is_being_cancelled():
            raise
        # something inside the model's client was cancelled, not this turn: the step failed
        raise StepFailed(describe_error(exc), phase="model", step=step) from exc
    return reply


def _checked(reply: ModelReply | None, step: str) -> ModelReply:
    """Refuse a reply that must not commit (rule 6), before anything is written."""
    if reply is None:
        raise StepFailed("the model stream ended without a reply", phase="model", step=step)
    if not (reply.text.strip() or reply.tool_calls):
        # blank text or thinking alone is nothing the person or the loop can use
        if reply.is_abnormal:
            raise StepFailed(
                f"the model stopped ({reply.stop_reason}) without any content",
                phase="model",
                step=step,
            )
        # a model sometimes ends a turn saying nothing; another try usually says something
        raise ModelError("the model's reply was empty", retryable=True)
    ids = [c.id for c in reply.tool_calls]
    if len(ids) != len(set(ids)):
        raise StepFailed("the model repeated a tool call id", phase="model", step=step)
    return reply
