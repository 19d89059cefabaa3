"""Feedback on a turn's reply, checked against the session before it is kept.

Only a turn the session holds can be rated: one that completed, or one a reset,
a compaction or retention archived since (its reply is still on screen). A turn
that failed, was cancelled or waits for a person gave no answer to rate; an id
the session never had is refused, so nothing is kept about it.
"""

from __future__ import annotations

from agent.core.feedback import MAX_COMMENT_CHARS, RATINGS, Feedback, Rating
from agent.engine.session import AgentSession
from agent.errors import ConflictError, UnknownTurnError

__all__ = ["rate_turn"]


async def rate_turn(
    session: AgentSession,
    turn_id: str,
    *,
    by: str,
    rating: Rating,
    comment: str | None = None,
) -> Feedback:
    """Keep what ``by`` thinks of the reply of ``turn_id``, replacing what they said before.

    Idempotent: the same call again keeps the same row (with a newer time).

    Args:
        session: The session the turn belongs to.
        turn_id: The rated turn.
        by: Who rates it: a verified identity (a signed Slack click's user id).
        rating: ``good`` or ``bad``.
        comment: Why, in their words; blank is none. At most `MAX_COMMENT_CHARS`.

    Returns:
        What was kept; its time is the runtime's clock.

    Raises:
        UnknownTurnError: The session holds no such turn, live or archived.
        ConflictError: The turn did not complete (it failed, was cancelled, or is
            not over): it gave no answer to rate.
        ValueError: ``rating`` is not one of `RATINGS`, ``by`` is empty, or the
            comment is too long.
    """
    if rating not in RATINGS:
        raise ValueError(f"a rating is one of {', '.join(RATINGS)}, not {rating!r}")
    if not by:
        raise ValueError("feedback needs who gave it")
    said = comment.strip() if comment is not None else ""
    if len(said) > MAX_COMMENT_CHARS:
        raise ValueError(f"a comment holds at most {MAX_COMMENT_CHARS} characters")
    await _check_turn(session, turn_id)
    host = session.runtime
    feedback = Feedback(
        key=session.key,
        turn_id=turn_id,
        by=by,
        rating=rating,
        comment=said or None,
        at=host.clock(),
    )
    await host.store.save_feedback(feedback)
    return feedback


async def _check_turn(session: AgentSession, turn_id: str) -> None:
    record = next((t for t in await session.turns() if t.turn_id == turn_id), None)
    if record is None:
        if not await session.runtime.store.is_archived(session.key, turn_id):
            raise UnknownTurnError(f"{session.key}: no turn {turn_id}")
    elif record.status != "completed":
        raise ConflictError(f"{session.key}: turn {turn_id} is {record.status}, not completed")
