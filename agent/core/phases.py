"""Where a turn stands, beyond its stored status: the phases a status alone does not tell apart.

Derived from a turn's record and its session's stored cancel requests, never
stored: a suspended turn whose cancel is being written is ending, not waiting,
and a queued turn that was answered resumes rather than starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from agent.core.turns import TurnRecord, TurnResult

__all__ = ["TurnPhase", "is_suspend_ending", "outcome_of", "phase_of"]

TurnPhase = Literal[
    "queued",
    "resuming",
    "running",
    "suspended",
    "ending_suspended",
    "completed",
    "failed",
    "cancelled",
    "interrupted",
]
"""Where a turn stands, derived from its record and its session's cancel requests (never stored).

- ``queued``: admitted, and has never run (its opening message is not written yet);
- ``resuming``: stored "queued", but it was suspended and answered: it runs on from
  where it stopped, its opening message long written;
- ``running``: opened, not ended (a cancel request may be waiting for its next boundary);
- ``suspended``: waits for a person's answer;
- ``ending_suspended``: stored "suspended", but a cancel request for it is stored too:
  the cancel came while the suspend was being written, so the turn's run is ending it
  now, and nobody is to answer it;
- ``completed``, ``failed``, ``cancelled``, ``interrupted``: ended.
"""


def phase_of(record: TurnRecord, cancels: Mapping[str, str]) -> TurnPhase:
    """Where ``record``'s turn stands (see `TurnPhase`).

    Args:
        record: The turn.
        cancels: Its session's stored cancel requests, by turn id.
    """
    status = record.status
    if status == "queued":
        return "queued" if record.opening_index is None else "resuming"
    if status == "suspended":
        return "ending_suspended" if record.turn_id in cancels else "suspended"
    return status


def is_suspend_ending(record: TurnRecord, cancels: Mapping[str, str]) -> bool:
    """Whether the turn is suspended but a cancel for it is stored: its run is ending it."""
    return phase_of(record, cancels) == "ending_suspended"


def outcome_of(record: TurnRecord, cancels: Mapping[str, str]) -> TurnResult | None:
    """What someone waiting on the turn is told: how it ended, or the suspend it waits in.

    Returns:
        The turn's result; None while that is still to come: the turn is unfinished,
        or it is a suspend whose cancel is being written (the turn ends cancelled).
    """
    if record.result is None or record.is_unfinished or is_suspend_ending(record, cancels):
        return None
    return record.result
