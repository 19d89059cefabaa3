"""A turn's input, its durable record, how it ended, and the one set of rules for its status.

A turn's status is stored (`TurnStatus`); the moves between statuses are listed
once (`TURN_TRANSITIONS`) and made through one function (`moved`), so a reader
can see every way a turn can go, and a wrong move raises instead of being
written. `agent.core.phases` names the phases that the stored status alone does not
tell apart.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Final, Literal

from pydantic import Field, TypeAdapter

from agent._json import JsonValue
from agent.core.delegation import ParentLink
from agent.core.hitl import InboundEvent, InputRequest
from agent.core.messages import Attachment, Usage
from agent.core.policy import TurnPolicy
from agent.core.steering import Steering
from agent.errors import TurnError

__all__ = [
    "INTERRUPT_REASONS",
    "POISON_RUNS",
    "STORED_APART",
    "TURN_STATUSES_ENDED",
    "TURN_STATUSES_UNFINISHED",
    "TURN_TRANSITIONS",
    "Cancelled",
    "Completed",
    "Failed",
    "Interrupted",
    "SessionReset",
    "Suspended",
    "TurnInput",
    "TurnRecord",
    "TurnResult",
    "TurnStatus",
    "WaitTimedOut",
    "may_move",
    "moved",
    "stop_result",
]

TurnStatus = Literal[
    "queued", "running", "completed", "suspended", "failed", "cancelled", "interrupted"
]
"""A turn's status as the store keeps it. These strings are persisted: never rename one."""

TURN_STATUSES_UNFINISHED: frozenset[str] = frozenset({"queued", "running"})
"""Still to run, or running: the turns a worker picks up and start-up recovery resumes."""

TURN_STATUSES_ENDED: frozenset[str] = frozenset({"completed", "failed", "cancelled", "interrupted"})
"""Terminal: no status follows these."""

TURN_TRANSITIONS: Final[Mapping[TurnStatus, frozenset[TurnStatus]]] = MappingProxyType(
    {
        # A queued turn opens (its first message commits) and runs, or it is cancelled
        # before it ever opens. A suspended turn that was answered is stored as
        # "queued" again while it runs on, so that a crash replays it from its last
        # checkpoint; such a turn ends, or suspends again, straight from "queued".
        # An unfinished turn is interrupted when it is stopped for good rather than
        # answered "no" (`INTERRUPT_REASONS`): an operator's interrupt, its time limit,
        # the poison-turn hold, or a crash when the agent does not resume lost turns.
        "queued": frozenset(
            {"running", "completed", "failed", "cancelled", "suspended", "interrupted"}
        ),
        "running": frozenset({"completed", "failed", "cancelled", "suspended", "interrupted"}),
        # A suspended turn is answered (queued to run on from where it stopped), or it
        # is cancelled or interrupted unanswered: its request is withdrawn and its tool
        # call closed.
        "suspended": frozenset({"queued", "cancelled", "interrupted"}),
        "completed": frozenset(),
        "failed": frozenset(),
        "cancelled": frozenset(),
        "interrupted": frozenset(),
    }
)
"""Which status may follow which: the only moves `moved` makes."""

POISON_RUNS: Final = 3
"""Runs of one turn in a row that the process died during, after which start-up
holds the turn (it ends `Interrupted` with reason ``held``) instead of resuming it."""

INTERRUPT_REASONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "interrupted": "an operator interrupted it",
        "held": "the process died each time it ran it",
        "timeout": "it ran longer than a turn may",
        "lost": "the process running it was lost, and this agent does not resume lost turns",
    }
)
"""The reasons a turn ends `Interrupted` rather than `Cancelled`, each said for a person.

A stored request to stop a turn carries its reason; one of these ends the turn
interrupted (the engine or an operator stopped it), any other ends it cancelled
(someone asked: a cancel, a replace, a reset). They are reserved: `cancel` refuses them."""


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
    a suspend and across restarts. None: its event's source's policy as the agent has it
    when the turn runs (the base instructions and every tool, for a turn with no event)."""
    target: JsonValue = None
    """Where a proactive turn is shown (the channel's own address), kept with the turn so
    a restart can still show it there."""
    parent: ParentLink | None = None
    """The turn and call that delegated this turn to its agent (see
    `agent.core.delegation`); None for a turn nobody delegated."""
    files: tuple[Attachment, ...] = ()
    """The files attached to the opening message, already read by the channel (content
    and all, within its limits): they open the turn with its text, and are stored with
    it, so no replay reads them again. Unreadable ones are notes of why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """The turn finished; ``text`` is its final reply."""

    status: Literal["completed"] = "completed"
    turn_id: str
    text: str
    usage: Usage | None = field(default=None, compare=False)
    """Tokens the turn's committed model steps used, summed (not part of equality)."""
    output: JsonValue = None
    """The machine result, validated against the agent's ``output_type`` (None without one):
    ``agent.output_type.model_validate(result.output)`` gives it back typed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed:
    """The turn failed; ``phase`` / ``step`` say where when a step was in flight."""

    status: Literal["failed"] = "failed"
    turn_id: str
    error: str
    phase: Literal["model", "tool", "output"] | None = None
    """``output``: the model's result was missing or invalid after the agent's retries."""
    step: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancelled:
    """The turn was cancelled for ``reason``."""

    status: Literal["cancelled"] = "cancelled"
    turn_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted:
    """The turn was stopped for good before it completed, for ``reason`` (see `INTERRUPT_REASONS`).

    ``interrupted``: an exact-turn or session interrupt; ``timeout``: the agent's
    ``max_turn_seconds``; ``held``: the process died while running it `POISON_RUNS`
    times in a row, so start-up held it (and its session) instead of resuming it;
    ``lost``: the process running it was lost and the agent says ``on_lost="interrupt"``.
    Unlike `Cancelled`, it is no answer to a cancel, a replace or a reset; like it, it
    may be retried (`AgentSession.retry`). ``detail`` says it for a person.
    """

    status: Literal["interrupted"] = "interrupted"
    turn_id: str
    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Suspended:
    """The turn is suspended: it waits for a person to answer ``request`` (and ``others``)."""

    status: Literal["suspended"] = "suspended"
    turn_id: str
    request: InputRequest
    others: tuple[InputRequest, ...] = ()
    """The batch's other open requests, in call order: each is answered on its own, and
    the turn runs on once none is left open."""
    opening_text: str = ""
    event: InboundEvent | None = None
    policy: TurnPolicy | None = None
    settled: dict[str, JsonValue] = field(default_factory=dict)
    """Results committed behind the asking call, unplaced, by id; a cancel places them."""

    @property
    def requests(self) -> tuple[InputRequest, ...]:
        """Every request still open, in call order."""
        return (self.request, *self.others)

    def request_for(self, input_id: str) -> InputRequest | None:
        """The open request ``input_id``, if the turn waits on it."""
        return next((r for r in self.requests if r.id == input_id), None)


TurnResult = Annotated[
    Completed | Failed | Cancelled | Interrupted | Suspended, Field(discriminator="status")
]


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
    """Set once the turn reached a terminal status (or was suspended); None while it runs."""
    resumes: int = 0
    """How many answers resumed it."""
    runs: int = 0
    """Runs of the turn begun since it was admitted or last suspended, and not ended by
    the process: a run that ends (or suspends) the turn writes its ending, and a run
    that a clean close of the runtime stopped (a SIGTERM, a deploy) is taken back from
    the count as the runtime closes. So an unfinished turn found at start-up with
    ``runs`` at `POISON_RUNS` had the process die under each of them."""
    retry_of: str | None = None
    """The turn this one answers again (an operator's retry of a held turn)."""
    admitted_at: float | None = None
    """When it was admitted (seconds since the epoch)."""
    ended_at: float | None = None
    """When it ended; a history retention period counts from here."""
    expired_at: float | None = None
    """When its content was deleted under history retention (`agent.core.retention`)."""
    patches: tuple[str, ...] = ()
    """The loop shape changes its opening knew (`agent.engine.turn.patches`)."""
    steering: tuple[Steering, ...] = ()
    """The input that steered the turn, as `AgentSession.turns` lists it. Not stored with
    the record: the transcript holds steering, and the steps what waits to be placed."""

    @property
    def is_unfinished(self) -> bool:
        """Whether the turn is still to run or running (suspended and ended turns are not)."""
        return self.status in TURN_STATUSES_UNFINISHED

    @property
    def is_ended(self) -> bool:
        """Whether the turn completed, failed, was cancelled or interrupted: it is over."""
        return self.status in TURN_STATUSES_ENDED


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionReset:
    """What a reset did: where the old history went, and the generation now live."""

    previous_session: str
    """The archived generation's address, ``<session id>#g<n>``."""
    generation: int
    """The new generation's number (one more than the archived one)."""


TURN_RECORD_ADAPTER: TypeAdapter[TurnRecord] = TypeAdapter(TurnRecord)

STORED_APART: Final[set[str]] = {"steering"}
"""Fields of `TurnRecord` a store leaves out of the record's JSON: they are kept elsewhere."""


def stop_result(turn_id: str, reason: str, detail: str = "") -> Cancelled | Interrupted:
    """How a turn asked to stop for ``reason`` ends: interrupted for a reserved reason."""
    if reason in INTERRUPT_REASONS:
        return Interrupted(
            turn_id=turn_id, reason=reason, detail=detail or INTERRUPT_REASONS[reason]
        )
    return Cancelled(turn_id=turn_id, reason=reason)


def may_move(status: TurnStatus, to: TurnStatus) -> bool:
    """Whether a turn in ``status`` may move to ``to`` (see `TURN_TRANSITIONS`)."""
    return to in TURN_TRANSITIONS[status]


def moved(
    record: TurnRecord,
    to: TurnStatus,
    *,
    result: TurnResult | None = None,
    opening_index: int | None = None,
    resumes: int | None = None,
    runs: int | None = None,
) -> TurnRecord:
    """``record`` moved to status ``to``: the one way the engine changes a turn's status.

    Args:
        record: The turn as it stands.
        to: The status it moves to; `TURN_TRANSITIONS` lists which may follow which.
        result: How the turn ended, or the suspend it waits in. Required when ``to``
            is an ending or "suspended", with the same status; None for "queued" and
            "running", which clears any earlier result (a resumed turn's suspend).
        opening_index: Where the turn's opening message goes, when this move opens it;
            None keeps the record's.
        resumes: The turn's new count of answers, when this move resumes it; None
            keeps the record's.
        runs: The turn's new count of runs begun (see `TurnRecord.runs`); None keeps
            the record's, except that a suspend starts the count again at 0.

    Returns:
        The moved record, to be written (``record`` itself is left as it was).

    Raises:
        TurnError: ``to`` may not follow the record's status, or ``result`` does not
            say ``to``: nothing is to be written.
    """
    if not may_move(record.status, to):
        raise TurnError(
            f"turn {record.turn_id} may not move from {record.status!r} to {to!r}",
            turn_id=record.turn_id,
        )
    if (result.status if result is not None else None) != (
        None if to in TURN_STATUSES_UNFINISHED else to
    ):
        raise TurnError(
            f"turn {record.turn_id} moving to {to!r} was given a result that says "
            f"{result.status if result is not None else None!r}",
            turn_id=record.turn_id,
        )
    return dataclasses.replace(
        record,
        status=to,
        result=result,
        opening_index=record.opening_index if opening_index is None else opening_index,
        resumes=record.resumes if resumes is None else resumes,
        runs=(0 if to == "suspended" else record.runs) if runs is None else runs,
        ended_at=time.time() if to in TURN_STATUSES_ENDED else None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitTimedOut:
    """`AgentSession.wait` gave up waiting; the turn itself goes on untouched."""

    status: Literal["timeout"] = "timeout"
    turn_id: str
    waited: float
    """Seconds waited."""
