"""Typed events every turn emits, as a pydantic union discriminated on ``type``.

Live deltas (``message.delta``, ``reasoning.delta``) and a tool's progress
(``action.progress``) are never stored and never replayed. A stream of one turn
ends on its terminal event: ``turn.completed``, ``turn.failed``,
``turn.cancelled``, ``turn.interrupted`` or ``input.requested``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agent._json import JsonValue
from agent.core.messages import Usage

__all__ = [
    "TERMINAL_EVENT_TYPES",
    "ActionCompleted",
    "ActionProgress",
    "ActionRequested",
    "InputRequested",
    "MessageCompleted",
    "MessageDelta",
    "ReasoningDelta",
    "TurnCancelled",
    "TurnCompleted",
    "TurnEvent",
    "TurnFailed",
    "TurnInterrupted",
    "TurnStarted",
    "TurnSteered",
    "is_terminal",
]

TriggerKind = Literal["inbound", "proactive", "resume"]


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)

    agent: str
    session: str
    turn_id: str
    seq: int
    """Position of the event within its turn's run, from 1."""
    via: str | None = None
    """Set on an event of a delegated (child) turn as it is forwarded into the stream of
    the turn that delegated it: that turn's id. ``agent``, ``session`` and ``turn_id``
    stay the child's, so a request it carries is answered there."""


class TurnStarted(_Event):
    """The turn opened."""

    type: Literal["turn.started"] = "turn.started"
    trigger: TriggerKind
    parent: str | None = None
    """The turn that delegated this one, for a child turn (see `agent.core.delegation`)."""


class ReasoningDelta(_Event):
    """A live piece of the model's thinking."""

    type: Literal["reasoning.delta"] = "reasoning.delta"
    text: str
    attempt: int = 1
    """Which try of the model step this piece belongs to; see `MessageDelta.attempt`."""


class MessageDelta(_Event):
    """A live piece of the reply's text."""

    type: Literal["message.delta"] = "message.delta"
    text: str
    attempt: int = 1
    """Which try of the model step this piece belongs to, from 1.

    A step whose stream broke is asked again; when ``attempt`` grows, whatever
    earlier attempts streamed is void and a renderer should start over.
    """


class MessageCompleted(_Event):
    """An assistant message with text was committed at transcript ``index``."""

    type: Literal["message.completed"] = "message.completed"
    text: str
    index: int


class ActionRequested(_Event):
    """The model asked for a tool call, which is about to run."""

    type: Literal["action.requested"] = "action.requested"
    call_id: str
    name: str
    input: dict[str, Any]
    note: str = ""
    """What the model wrote just before asking for the call (a progress note), if anything."""


class ActionCompleted(_Event):
    """A tool call's result was committed; ``error`` is set when the tool raised."""

    type: Literal["action.completed"] = "action.completed"
    call_id: str
    name: str
    result: Any
    error: str | None = None


class ActionProgress(_Event):
    """A running tool said how far it got (``ctx.progress``): shown live, never stored.

    Like the deltas it is not in the transcript or the session's event log, the
    model never sees it, and a replay does not repeat it; the process's own log
    (``agent`` logger, INFO) keeps each line.
    """

    type: Literal["action.progress"] = "action.progress"
    call_id: str
    name: str
    text: str


class TurnSteered(_Event):
    """Input sent to the running turn (`AgentSession.steer`) was placed at transcript ``index``.

    The model reads it in its next call, after the results of the calls it made.
    """

    type: Literal["turn.steered"] = "turn.steered"
    steer_id: str
    text: str
    by: str | None = None
    index: int


class InputRequested(_Event):
    """The turn is suspended, waiting for a person."""

    type: Literal["input.requested"] = "input.requested"
    request: dict[str, Any]
    others: list[dict[str, Any]] = []
    """The other requests of the batch, in call order: each is shown and answered alone."""


class TurnCompleted(_Event):
    """The turn finished with its final text."""

    type: Literal["turn.completed"] = "turn.completed"
    text: str
    usage: Usage = Usage()
    """Tokens the turn's committed model steps used, summed."""
    output: JsonValue = None
    """The turn's machine result, when its agent declares ``output_type``."""


class TurnFailed(_Event):
    """The turn failed; ``phase`` and ``step`` say where when a step was in flight."""

    type: Literal["turn.failed"] = "turn.failed"
    error: str
    phase: Literal["model", "tool", "output"] | None = None
    step: str | None = None


class TurnCancelled(_Event):
    """The turn was cancelled."""

    type: Literal["turn.cancelled"] = "turn.cancelled"
    reason: str


class TurnInterrupted(_Event):
    """The turn was stopped for good, not answered by a cancel (see `Interrupted`).

    ``reason`` is a word a program can test (one of `INTERRUPT_REASONS`:
    ``interrupted``, ``timeout``, ``held``, ``lost``); ``detail`` says it for a person.
    """

    type: Literal["turn.interrupted"] = "turn.interrupted"
    reason: str
    detail: str = ""


TurnEvent = Annotated[
    TurnStarted
    | ReasoningDelta
    | MessageDelta
    | MessageCompleted
    | ActionRequested
    | ActionCompleted
    | ActionProgress
    | TurnSteered
    | InputRequested
    | TurnCompleted
    | TurnFailed
    | TurnCancelled
    | TurnInterrupted,
    Field(discriminator="type"),
]

TURN_EVENT_ADAPTER: TypeAdapter[TurnEvent] = TypeAdapter(TurnEvent)

TERMINAL_EVENT_TYPES = frozenset(
    {"turn.completed", "turn.failed", "turn.cancelled", "turn.interrupted", "input.requested"}
)


def is_terminal(event: TurnEvent) -> bool:
    """Whether ``event`` ends a turn's stream (it finished, or it waits for a person).

    A child turn's ending, forwarded into its parent's stream, ends nothing there.
    """
    return event.type in TERMINAL_EVENT_TYPES and event.via is None
