"""Where a turn stands on its machine result, read off its transcript.

For an agent with an ``output_type`` a turn ends when a batch of calls holds an
accepted ``final_result`` (see `agent.definition.output`), not when a reply asks
for no tool. A reply that gives no result is followed by a prompt, stored as a
`TriggerMessage` from `RETRY_BY`, asking for it; a result that does not validate
gets an error result the model reads. Each counts as a miss, and past the
agent's ``output_retries`` misses the turn fails. All of it is read off the
transcript, so a replay after a crash counts exactly what the first run did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from agent._json import JsonValue
from agent.core.events import MessageCompleted
from agent.core.messages import (
    AssistantMessage,
    Message,
    ToolMessage,
    TriggerMessage,
    UserMessage,
)
from agent.core.records import Commit, StoredMessage, StoredStep
from agent.definition.output import OUTPUT_TOOL
from agent.engine.turn.context import RunContext, StepFailed
from agent.engine.turn.steering import SteerBox

__all__ = [
    "RETRY_BY",
    "RETRY_PROMPT",
    "OutputSoFar",
    "ask_for_output",
    "output_so_far",
    "settle_output",
]

RETRY_BY = "agent:output"
"""Who the prompt asking again for a missing result is attributed to."""


RETRY_PROMPT = (
    f"Your reply did not call {OUTPUT_TOOL}. Call {OUTPUT_TOOL} now with the result "
    "of this request, as its schema says; the person has your answer already, so "
    "there is no need to repeat it."
)
"""What the model reads after a reply that gave no result."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputSoFar:
    """A turn's result as its transcript has it."""

    accepted: bool = False
    """The newest batch of calls holds a valid result, and nothing came after it."""
    value: JsonValue = None
    misses: int = 0
    """Replies with no result, and results that did not validate."""
    problem: str = ""
    """What was wrong the last time, in the model's words as the engine told it."""
    text: str = ""
    """The turn's newest reply text: what the person reads beside the result."""
    reply_index: int | None = None
    """Where the turn's newest reply is in the transcript."""

    def gave_up(self, retries: int) -> str:
        """Why the turn fails once the misses outnumber ``retries``."""
        return f"the model gave no valid result after {retries} retries: {self.problem}"


def output_so_far(messages: Sequence[Message], turn_id: str, start: int) -> OutputSoFar:
    """Read the result of turn ``turn_id``, whose messages begin at index ``start``."""
    accepted, value, misses, problem, text, reply = False, None, 0, "", "", None
    for index in range(max(start, getattr(messages, "base", 0)), len(messages)):
        message = messages[index]
        if message.turn_id != turn_id:
            continue
        if isinstance(message, ToolMessage):
            if message.name != OUTPUT_TOOL:
                continue
            if message.is_error:
                accepted, misses = False, misses + 1
                problem = _error_of(message.result)
            else:
                accepted, value = True, message.result
        elif isinstance(message, TriggerMessage) and message.by == RETRY_BY:
            accepted, misses = False, misses + 1
            problem = f"the reply did not call {OUTPUT_TOOL}"
        elif isinstance(message, AssistantMessage):
            accepted = False  # a new reply: only a result in its own batch ends the turn
            text, reply = message.text or text, index
        elif isinstance(message, UserMessage):
            accepted = False  # a steer after the result: the model answers it first
    return OutputSoFar(
        accepted=accepted, value=value, misses=misses, problem=problem, text=text, reply_index=reply
    )


def _error_of(result: JsonValue) -> str:
    error = result.get("error") if isinstance(result, dict) else None
    return str(error) if error else "the result was refused"


async def settle_output(run: RunContext, steers: SteerBox, last: Message) -> OutputSoFar | None:
    """The accepted result the turn completes with, or None to go on.

    A committed reply that gave no result is followed by the prompt asking for it
    (a replay after a crash between the two). A steer that came as the result did
    is answered first.

    Raises:
        StepFailed: The misses outnumber the agent's ``output_retries``.
    """
    if isinstance(last, AssistantMessage) and not last.tool_calls:
        await ask_for_output(run, steers, last.text)
        return None
    so_far = output_so_far(run.transcript, run.turn_id, run.record.opening_index or 0)
    exhausted = so_far.misses > run.agent.output_retries
    if not (so_far.accepted or exhausted) or not steers.close_unless_steered(run.turn_id):
        return None
    if not so_far.accepted:
        raise StepFailed(
            so_far.gave_up(run.agent.output_retries),
            phase="output",
            step=f"model:{so_far.reply_index}",
        )
    return so_far


async def ask_for_output(
    run: RunContext,
    steers: SteerBox,
    text: str,
    reply: tuple[StoredMessage, ...] = (),
    steps: tuple[StoredStep, ...] = (),
) -> None:
    """Commit a reply that gave no result, with the prompt asking for it.

    Raises:
        StepFailed: That was the last retry (the reply is kept), and no steer came.
    """
    so_far = output_so_far(run.transcript, run.turn_id, run.record.opening_index or 0)
    at = len(run.transcript) + len(reply)
    exhausted = so_far.misses + 1 > run.agent.output_retries
    asking = TriggerMessage(turn_id=run.turn_id, text=RETRY_PROMPT, by=RETRY_BY)
    prompt = () if exhausted else (StoredMessage(at, asking),)
    if reply or prompt:
        await run.commit(Commit(messages=(*reply, *prompt), steps=steps))
    if reply and text:
        run.emit(MessageCompleted, text=text, index=reply[0].index)
    if exhausted and steers.close_unless_steered(run.turn_id):
        missed = dataclasses.replace(so_far, problem=f"the reply did not call {OUTPUT_TOOL}")
        raise StepFailed(
            missed.gave_up(run.agent.output_retries), phase="output", step=f"model:{at - 1}"
        )
