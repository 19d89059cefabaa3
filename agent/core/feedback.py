"""What people said of a turn's reply: good or bad, and, if they wrote one, why.

One person has one opinion of one turn: giving another replaces theirs (a change
of mind, or the comment that follows a click). The engine never reads it; a
channel writes it (`agent.engine.feedback.rate_turn`) and an operator reads it
back (``SessionStore.feedback_since``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from agent.core.records import SessionKey

__all__ = ["MAX_COMMENT_CHARS", "RATINGS", "Feedback", "Rating"]

Rating = Literal["good", "bad"]
RATINGS: Final[tuple[Rating, ...]] = ("good", "bad")
MAX_COMMENT_CHARS: Final = 2_000
"""The longest comment kept (what a Slack modal's input is held to as well)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Feedback:
    """One person's word on one turn's reply."""

    key: SessionKey
    """The session the turn belongs to."""
    turn_id: str
    by: str
    """Who gave it: a verified id (a signed Slack click's user)."""
    rating: Rating
    comment: str | None = None
    """Why, in their words (at most `MAX_COMMENT_CHARS`); None when they gave none."""
    at: float
    """When it was given (or last changed), in seconds since the epoch."""
