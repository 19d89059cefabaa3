"""A turn's input, its durable record, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from agent._json import JsonValue
from agent.core.hitl import InboundEvent, InputRequest
from agent.core.messages import Usage
from agent.core.policy import TurnPolicy

__all__ = [
    "TURN_STATUSES_UNFINISHED",
    "Cancelled",
    "Completed",
    "Failed",
    "SessionReset",
    "Suspended",
    "TurnInput",
    "TurnRecord",
    "TurnResult",
    "TurnStatus",
]

TurnStatus = Literal["queued", "running", "completed", "suspended", "failed", "cancelled"]
TURN_STATUSES_UNFINISHED: frozenset[str] = frozenset({"queued", "running"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnInput:
    """What opens a turn.

    An ``inbound`` turn is opened by a person's message (``user`` is who, when
    the channel knows it). A ``proactive`` turn is opened by a seed nobody typed;
    ``by`` names what started it and the seed is stored as a ``trigger`` message.
    """

    text: str
    trigger: Literal["inbound", "proactive"] = "inbound"
    user: str | None = None
    by: str | None = None
    event: InboundEvent | None = None
    """The channel's event, when a channel (not a program) opened the turn."""
    policy: TurnPolicy | None = None
    """The surface policy the turn runs under (see `resolve_policy`); kept with it through
    a park and across restarts. None: its event's source's policy as the agent has it
    when the turn runs (the base instructions and every tool, for a turn with no event)."""
    target: JsonValue = None
    """Where a proactive turn is shown (the channel's own address), kept with the turn so
    a restart can still show it there."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """The turn finished; ``text`` is its final reply."""

    status: Literal["completed"] = "completed"
    turn_id: str
    text: str
    usage: Usage | None = field(default=None, compare=False)
    """Tokens the turn's committed model steps used, summed (not part of equality)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed:
    """The turn failed; ``phase`` / ``step`` say where when a step was in flight."""

    status: Literal["failed"] = "failed"
    turn_id: str
    error: str
    phase: Literal["model", "tool"] | None = None
    step: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancelled:
    """The turn was cancelled for ``reason``."""

    status: Literal["cancelled"] = "cancelled"
    turn_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Suspended:
    """The turn parked, waiting for a person to answer ``request``."""

    status: Literal["suspended"] = "suspended"
    turn_id: str
    request: InputRequest
    opening_text: str = ""
    event: InboundEvent | None = None
    policy: TurnPolicy | None = None


TurnResult = Annotated[Completed | Failed | Cancelled | Suspended, Field(discriminator="status")]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    """A turn as the store keeps it."""

    turn_id: str
    seq: int
    """Admission order within the session, from 1; turns run in this order."""
    status: TurnStatus
    input: TurnInput
    opening_index: int | None = None
    """Transcript index of the opening message, once it is committed."""
    result: TurnResult | None = None
    """Set once the turn reached a terminal status (or parked)."""
    resumes: int = 0
    """How many answers resumed it."""

    @property
    def is_unfinished(self) -> bool:
        """Whether the turn is still to run or running (parked and ended turns are not)."""
        return self.status in TURN_STATUSES_UNFINISHED


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionReset:
    """What a reset did: where the old history went, and the generation now live."""

    previous_session: str
    """The archived generation's address, ``<session id>#g<n>``."""
    generation: int
    """The new generation's number (one more than the archived one)."""


TURN_RECORD_ADAPTER: TypeAdapter[TurnRecord] = TypeAdapter(TurnRecord)
