"""What steering a running turn leaves: the receipt a caller gets, and the turn's listing."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Steered", "Steering"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Steered:
    """`AgentSession.steer` took the input for the running turn ``turn_id``."""

    turn_id: str
    steer_id: str
    handed_over: bool = False
    """The process writing the session was handed the input; it places it, or refuses it
    (logged there) if the turn finished meanwhile."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Steering:
    """One input that steered a turn after it opened."""

    steer_id: str
    text: str
    by: str | None = None
    index: int | None = None
    """Where the transcript holds it; None while it waits for the turn's next model call."""
