"""One turn's loop: ask the model, run the tools it asked for, ask again.

The position is read off the transcript: the last message says what comes
next. Every step commits its memo and its transcript message in one
transaction before the next step begins, so a replay of the same turn skips
what committed and runs only what is still owed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from agent._json import JsonValue
from agent.core.events import (
    ActionCompleted,
    ActionRequested,
    InputRequested,
    MessageCompleted,
    MessageDelta,
    ReasoningDelta,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
    TurnStarted,
)
from agent.core.hitl import (
    EXPIRED,
    InputRequest,
    InputRequired,
    answer_step,
    answerers_from,
    check_schema,
    with_expiry,
)
from agent.core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    TranscriptView,
    TriggerMessage,
    Usage,
    UserMessage,
)
from agent.core.model import ModelReply, ModelRequest, TextDelta, ThinkingDelta
from agent.core.records import (
    Commit,
    SessionKey,
    StoredMessage,
    StoredSession,
    StoredStep,
    apply_commit,
)
from agent.core.turns import (
    Cancelled,
    Completed,
    Failed,
    Suspended,
    TurnRecord,
    TurnResult,
    moved,
)
from agent.definition.agent import Agent
from agent.definition.policies import resolve_policy
from agent.definition.tools import (
    Tool,
    ToolContext,
    describe_error,
    idempotency_key,
    jsonable_result,
)
from agent.errors import FatalToolError, ModelError, StoreError, ToolError
from agent.ports import SessionStore

__all__ = ["TurnRun", "ending_commit", "opening_commit", "owed_calls"]

T = TypeVar("T")

NOT_RUN_AFTER_FAILURE = {"error": "not run: the turn failed before this call"}
CANCELLED_CALL = {"cancelled": True}


class _Interrupted(Exception):
    """The turn was cancelled (or ran out of time) while a step was in flight."""


class _StepFailed(Exception):
    def __init__(self, error: str, *, phase: str, step: str) -> None:
        super().__init__(error)
        self.error, self.phase, self.step = error, phase, step


def opening_commit(record: TurnRecord, index: int) -> tuple[TurnRecord, Commit]:
    """The transaction that opens a turn: its first message, and its record as running."""
    given = record.input
    message: Message
    if given.trigger == "proactive":
        message = TriggerMessage(turn_id=record.turn_id, text=given.text, by=given.by or "unknown")
    else:
        message = UserMessage(turn_id=record.turn_id, text=given.text, user=given.user)
    opened = moved(record, "running", opening_index=index)
    return opened, Commit(
        messages=(StoredMessage(index, message),), turns=(opened,), status="running"
    )


def owed_calls(transcript: list[Message], turn_id: str) -> tuple[tuple[ToolCall, ...], int]:
    """The calls of the newest assistant message, if it is ``turn_id``'s, still without a result.

    Returns:
        The calls, and the transcript index of the message that made them (-1 if none).
    """
    i = len(transcript) - 1
    answered: set[str] = set()
    while i >= 0 and isinstance(transcript[i], ToolMessage):
        answered.add(transcript[i].call_id)  # type: ignore[union-attr]
        i -= 1
    last = transcript[i] if i >= 0 else None
    if not isinstance(last, AssistantMessage) or last.turn_id != turn_id:
        return (), -1
    return tuple(c for c in last.tool_calls if c.id not in answered), i


def ending_commit(
    state: StoredSession, record: TurnRecord, result: Failed | Cancelled, closing: JsonValue
) -> Commit:
    """The transaction that ends a turn early: its record, and a result for each owed call.

    Every call the turn still owes gets ``closing`` as its result, so the next model
    call gets a valid transcript (a call with no result is refused by the model's API
    from then on, which would wedge the conversation for good).
    """
    owed, at = owed_calls(state.transcript, record.turn_id)
    messages: list[StoredMessage] = []
    steps: list[StoredStep] = []
    for offset, call in enumerate(owed):
        index = len(state.transcript) + offset
        message = ToolMessage(
            turn_id=record.turn_id, call_id=call.id, name=call.name, result=closing, is_error=True
        )
        messages.append(StoredMessage(index, message))
        steps.append(
            StoredStep(f"tool:{at}:{call.id}", record.turn_id, {"message": index, "is_error": True})
        )
    ended = moved(record, result.status, result=result)
    return Commit(
        messages=tuple(messages),
        steps=tuple(steps),
        turns=(ended,),
        # a turn that never opened held nothing of the session; one that did, held it all
        status="idle" if record.opening_index is not None else None,
    )


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
    ) -> None:
        self._agent = agent
        self._holder = holder
        """The session's lease this run writes under: the store refuses it once another took it."""
        self._store = store
        self._key = key
        self._state = state
        self._transcript = state.transcript
        self._record = record
        self._emit_to = emit
        self._seq = 0
        self._clock = clock
        self._answers: dict[str, JsonValue] | None = None
        self._interrupt = asyncio.Event()
        self._timed_out = False
        given = record.input
        # a turn admitted with no policy (before policies, or by a program) runs under its
        # source's as the agent has it now, rather than with every tool
        policy = given.policy or (
            resolve_policy(agent, given.event.source) if given.event else None
        )
        self._denied = frozenset(policy.deny_tools) if policy else frozenset()
        """Tools this turn's policy denies: never listed, and called, unknown."""
        self._system = policy.system if policy else agent.instructions
        self._tool_specs = tuple(s for s in agent.tool_specs if s.name not in self._denied)

    @property
    def turn_id(self) -> str:
        """The turn this run drives."""
        return self._record.turn_id

    @property
    def record(self) -> TurnRecord:
        """The turn's record as last committed."""
        return self._record

    def now(self) -> float:
        """The runtime's clock, in seconds since the epoch."""
        return self._clock()

    def interrupt(self) -> None:
        """Stop at the next checkpoint boundary: a cancel request was stored for this turn.

        A model reply being streamed is abandoned (its request aborted) at once; a tool
        that is running finishes, and its result commits.
        """
        self._interrupt.set()

    def _cancel_reason(self) -> str | None:
        reason = self._state.cancels.get(self.turn_id)
        if reason is None and self._timed_out:
            reason = "timeout"
        return reason

    def _stop_if_cancelled(self) -> None:
        if self._cancel_reason() is not None:
            raise _Interrupted

    def _time_up(self) -> None:
        self._timed_out = True
        self._interrupt.set()

    async def run(self) -> TurnResult:
        """Run the turn until it completes, fails, is cancelled or suspends; each step commits."""
        limit = self._agent.max_turn_seconds
        timer = None
        if limit is not None:
            # each run has the whole limit: time spent suspended on a person's answer does not count
            timer = asyncio.get_running_loop().call_later(limit, self._time_up)
        try:
            return await self._run()
        finally:
            if timer is not None:
                timer.cancel()

    async def _run(self) -> TurnResult:
        if reason := self._cancel_reason():
            # before it opened (nothing of it is written), or recovered after a cancel
            return await self._cancel(reason)
        await self._open()
        trigger = "resume" if self._record.resumes else self._record.input.trigger
        self._emit(TurnStarted, trigger=trigger)
        try:
            return await self._loop()
        except _StepFailed as failure:
            return await self._fail(failure.error, phase=failure.phase, step=failure.step)
        except _Interrupted:
            return await self._cancel(self._cancel_reason() or "requested")
        except InputRequired as asked:
            if reason := self._cancel_reason():
                return await self._cancel(reason)  # nobody is to be asked for a cancelled turn
            return await self._suspend(asked.request)

    async def _suspend(self, request: InputRequest) -> TurnResult:
        """Suspend the turn on ``request``, in one checkpoint.

        The checkpoint holds everything the resumed turn needs, so nothing of the
        turn is kept in memory while it waits for the answer.
        """
        given = self._record.input
        result = Suspended(
            turn_id=self.turn_id,
            request=request,
            opening_text=given.text,
            event=given.event,
            policy=given.policy,
        )
        record = moved(self._record, "suspended", result=result)
        await self._commit(Commit(turns=(record,), status="suspended"))
        if reason := self._cancel_reason():
            # a cancel came while the suspend was being written: nobody is to be asked after all
            return await self._cancel(reason)
        self._emit(InputRequested, request=request.as_dict())
        return result

    async def answers(self) -> dict[str, JsonValue]:
        """This turn's stored answers by step id, read once per run."""
        if self._answers is None:
            steps = await self._store.load_steps(self._key, self.turn_id)
            self._answers = {k: v for k, v in steps.items() if k.startswith("input:")}
        return self._answers

    async def _open(self) -> None:
        if self._record.opening_index is not None:
            return  # a replay: the opening message is already in the transcript
        _, commit = opening_commit(self._record, len(self._transcript))
        await self._commit(commit)

    async def _loop(self) -> TurnResult:
        while True:
            last = self._transcript[-1]
            if last.turn_id != self.turn_id:
                raise StoreError(
                    f"{self._key}: turn {self.turn_id} is not at the end of the transcript "
                    f"(turn {last.turn_id} is); refusing to continue it out of order"
                )
            if isinstance(last, AssistantMessage) and not last.tool_calls:
                return await self._complete(last.text)  # ended, but not yet marked so
            owed, at = owed_calls(self._transcript, self.turn_id)
            if owed:
                for call in owed:
                    self._stop_if_cancelled()  # between calls: the rest get a closing result
                    await self._tool_step(at, call)
                continue
            self._stop_if_cancelled()
            ended = await self._model_step(len(self._transcript))
            if ended is not None:
                return ended

    # -- model steps ---------------------------------------------------------

    async def _model_step(self, index: int) -> TurnResult | None:
        """Ask the model and commit its reply; a reply with no tool call also ends the turn."""
        step = f"model:{index}"
        while True:
            try:
                reply = await self._unless_interrupted(self._ask_model(step))
                break
            except _Interrupted:
                if self._cancel_reason() is not None:
                    raise
                self._interrupt.clear()  # the cancel's write failed: it was never asked
        self._stop_if_cancelled()  # a reply not yet written is dropped for a cancel
        message = AssistantMessage(
            turn_id=self.turn_id,
            content=reply.content,
            stop_reason=reply.stop_reason,
            usage=reply.usage,
            model=reply.model,
            prompt_digest=reply.prompt_digest,
        )
        # the memo points at the message it committed with; the reply is stored once
        committed = (
            (StoredMessage(index, message),),
            (StoredStep(step, self.turn_id, {"message": index}),),
        )
        if not message.tool_calls:
            return await self._complete(message.text, committed)
        await self._commit(Commit(messages=committed[0], steps=committed[1]))
        if message.text:
            self._emit(MessageCompleted, text=message.text, index=index)
        return None

    async def _ask_model(self, step: str) -> ModelReply:
        """Ask the model for step ``step``, trying again while its failures are passing ones."""
        policy = self._agent.model_retry
        attempt = 1
        while True:
            try:
                return _checked(await self._stream_reply(step, attempt), step)
            except ModelError as exc:
                if not exc.retryable or attempt >= policy.attempts:
                    raise _StepFailed(str(exc), phase="model", step=step) from exc
                await asyncio.sleep(policy.delay(attempt, exc.retry_after))
                attempt += 1

    async def _unless_interrupted(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work``, abandoning it (its model request aborted) if the turn is cancelled."""
        task = asyncio.ensure_future(work)
        interrupted = asyncio.ensure_future(self._interrupt.wait())
        try:
            await asyncio.wait((task, interrupted), return_when=asyncio.FIRST_COMPLETED)
        finally:
            interrupted.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            raise _Interrupted
        return task.result()

    async def _stream_reply(self, step: str, attempt: int) -> ModelReply | None:
        request = ModelRequest(
            system=self._system,
            messages=TranscriptView(self._transcript),
            tools=self._tool_specs,
            agent=self._key.agent,
            session_id=self._key.session_id,
            turn_id=self.turn_id,
            step=step,
            attempt=attempt,
        )
        reply: ModelReply | None = None
        try:
            async for event in self._agent.model.stream(request):
                if isinstance(event, TextDelta):
                    self._emit(MessageDelta, text=event.text, attempt=attempt)
                elif isinstance(event, ThinkingDelta):
                    self._emit(ReasoningDelta, text=event.text, attempt=attempt)
                else:
                    reply = event
        except ModelError:
            raise
        except Exception as exc:
            raise _StepFailed(describe_error(exc), phase="model", step=step) from exc
        except asyncio.CancelledError as exc:
            if _is_being_cancelled():
                raise
            # the model's own plumbing was cancelled, not this turn
            raise _StepFailed(describe_error(exc), phase="model", step=step) from exc
        return reply

    # -- tool steps ----------------------------------------------------------

    async def _tool_step(self, at: int, call: ToolCall) -> None:
        step = f"tool:{at}:{call.id}"
        asking = self._transcript[at]
        note = asking.note_before(call.id) if isinstance(asking, AssistantMessage) else ""
        self._emit(ActionRequested, call_id=call.id, name=call.name, input=call.input, note=note)
        ctx = ToolContext(
            agent=self._key.agent,
            session_id=self._key.session_id,
            turn_id=self.turn_id,
            call_id=call.id,
            idempotency_key=idempotency_key(self.turn_id, call.id),
        )
        # a denied tool is no tool at all here, whatever the model was talked into
        tool = None if call.name in self._denied else self._agent.tools_by_name.get(call.name)
        if tool is not None and not tool.is_local:
            ctx = dataclasses.replace(ctx, inputs=_Desk(self, call))
        try:
            if tool is None:
                raise ToolError(f"unknown tool: {call.name}")
            arguments = tool.parse_input(call.input)
        except ToolError as exc:
            message = self._tool_message(call, error=exc)
            await self._commit(self._tool_commit(step, message))
        else:
            try:
                if tool.is_local:
                    message = await self._local_call(step, call, tool, arguments, ctx)
                else:
                    message = await self._remote_call(step, call, tool, arguments, ctx)
            except FatalToolError as exc:
                raise _StepFailed(describe_error(exc), phase="tool", step=step) from exc
        self._emit(
            ActionCompleted,
            call_id=call.id,
            name=call.name,
            result=message.result,
            error=message.result.get("error") if message.is_error else None,
        )

    async def _local_call(
        self, step: str, call: ToolCall, tool: Tool, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolMessage:
        def work(handle: Any) -> JsonValue:
            return jsonable_result(
                tool, tool.call(arguments, dataclasses.replace(ctx, handle=handle))
            )

        def record(outcome: JsonValue | Exception) -> Commit:
            if isinstance(outcome, FatalToolError):
                raise outcome
            if isinstance(outcome, Exception):
                return self._tool_commit(step, self._tool_message(call, error=outcome))
            return self._tool_commit(step, self._tool_message(call, result=outcome))

        def fenced(outcome: JsonValue | Exception) -> Commit:
            return dataclasses.replace(record(outcome), holder=self._holder)

        commit = await self._store.commit_with(self._key, work, fenced)
        apply_commit(self._state, commit)
        message = commit.messages[0].message
        assert isinstance(message, ToolMessage)
        return message

    async def _remote_call(
        self, step: str, call: ToolCall, tool: Tool, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolMessage:
        try:
            message = self._tool_message(
                call,
                result=jsonable_result(
                    tool, await _unwrap_input_required(tool.call(arguments, ctx))
                ),
            )
        except FatalToolError:
            raise
        except Exception as exc:
            message = self._tool_message(call, error=exc)
        except asyncio.CancelledError as exc:
            if _is_being_cancelled():
                raise
            # something the tool awaited was cancelled, not this turn: the call failed
            message = self._tool_message(call, error=exc)
        await self._commit(self._tool_commit(step, message))
        return message

    def _tool_message(
        self, call: ToolCall, *, result: JsonValue = None, error: BaseException | None = None
    ) -> ToolMessage:
        if error is not None:
            return ToolMessage(
                turn_id=self.turn_id,
                call_id=call.id,
                name=call.name,
                result={"error": describe_error(error)},
                is_error=True,
            )
        return ToolMessage(turn_id=self.turn_id, call_id=call.id, name=call.name, result=result)

    def _tool_commit(self, step: str, message: ToolMessage) -> Commit:
        index = len(self._transcript)
        memo = {"message": index, "is_error": message.is_error}
        return Commit(
            messages=(StoredMessage(index, message),),
            steps=(StoredStep(step, self.turn_id, memo),),
        )

    # -- ending --------------------------------------------------------------

    async def _complete(
        self,
        text: str,
        final: tuple[tuple[StoredMessage, ...], tuple[StoredStep, ...]] = ((), ()),
    ) -> TurnResult:
        """Mark the turn completed, in the same transaction as its final reply when given."""
        messages, steps = final
        usage = self._usage_so_far(messages)
        result = Completed(turn_id=self.turn_id, text=text, usage=usage)
        record = moved(self._record, "completed", result=result)
        await self._commit(Commit(messages=messages, steps=steps, turns=(record,), status="idle"))
        if messages and text:
            self._emit(MessageCompleted, text=text, index=messages[0].index)
        self._emit(TurnCompleted, text=text, usage=usage)
        return result

    def _usage_so_far(self, pending: tuple[StoredMessage, ...]) -> Usage:
        """The turn's committed model usage, read off the transcript so a replay counts it too."""
        total = Usage()
        start = self._record.opening_index or 0
        replies = [*self._transcript[start:], *(stored.message for stored in pending)]
        for message in replies:
            if isinstance(message, AssistantMessage) and message.turn_id == self.turn_id:
                total += message.usage or Usage()
        return total

    async def _fail(self, error: str, *, phase: str, step: str) -> TurnResult:
        result = Failed(turn_id=self.turn_id, error=error, phase=phase, step=step)  # type: ignore[arg-type]
        await self._commit(ending_commit(self._state, self._record, result, NOT_RUN_AFTER_FAILURE))
        self._emit(TurnFailed, error=error, phase=phase, step=step)
        return result

    async def _cancel(self, reason: str) -> TurnResult:
        result = Cancelled(turn_id=self.turn_id, reason=reason)
        await self._commit(ending_commit(self._state, self._record, result, CANCELLED_CALL))
        self._emit(TurnCancelled, reason=reason)
        return result

    # -- plumbing ------------------------------------------------------------

    async def _commit(self, commit: Commit) -> None:
        # Only the session's own worker awaits here, and cancelling it means the runtime
        # is closing and drops this state, so a write that lands after the cancel is fine.
        commit = dataclasses.replace(commit, holder=self._holder)
        await self._store.commit(self._key, commit)
        apply_commit(self._state, commit)
        self._record = self._state.turns[self.turn_id]

    def _emit(self, event_type: type[Any], **fields: Any) -> None:
        self._seq += 1
        event = event_type(
            agent=self._key.agent,
            session=self._key.session_id,
            turn_id=self.turn_id,
            seq=self._seq,
            **fields,
        )
        self._emit_to(event)


class _Desk:
    """Answers for one async tool call's ``request_input``: a stored one, or a suspend."""

    def __init__(self, run: TurnRun, call: ToolCall) -> None:
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
            # another call of this turn asked with the same id: its answer is not this
            # call's (approving one post must not approve the next); ask under our own
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


def _is_being_cancelled() -> bool:
    """Whether the task running this turn was asked to stop (a shutdown, a deploy)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _checked(reply: ModelReply | None, step: str) -> ModelReply:
    """Refuse a reply that must not commit (rule 6), before anything is written."""
    if reply is None:
        raise _StepFailed("the model stream ended without a reply", phase="model", step=step)
    if not (reply.text.strip() or reply.tool_calls):
        # blank text or thinking alone is nothing the person or the loop can use
        if reply.is_abnormal:
            raise _StepFailed(
                f"the model stopped ({reply.stop_reason}) without any content",
                phase="model",
                step=step,
            )
        # a model sometimes ends a turn saying nothing; another try usually says something
        raise ModelError("the model's reply was empty", retryable=True)
    ids = [c.id for c in reply.tool_calls]
    if len(ids) != len(set(ids)):
        raise _StepFailed("the model repeated a tool call id", phase="model", step=step)
    return reply
