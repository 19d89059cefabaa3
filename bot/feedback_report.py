"""``python -m bot feedback``: what people said of the bot's replies, newest first.

It reads the database ``DATABASE_URL`` names, as the bot does, and works beside a
running bot (it only reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from agent import Feedback
from bot.engine import open_database
from bot.settings import Settings

__all__ = ["DAY", "feedback_lines", "report_feedback"]

DAY = 24 * 3600.0
MAX_SHOWN_COMMENT = 500


async def report_feedback(settings: Settings, *, since_days: float | None, now: float) -> list[str]:
    """The lines ``python -m bot feedback [--since DAYS]`` prints.

    Raises:
        ConfigError: The database cannot be opened.
    """
    store = await open_database(settings)
    try:
        since = 0.0 if since_days is None else now - since_days * DAY
        found = await store.feedback_since(since)
    finally:
        await store.close()
    return feedback_lines(found, since_days=since_days)


def feedback_lines(found: Sequence[Feedback], *, since_days: float | None) -> list[str]:
    """One line per feedback (when, who, good/bad, which turn), its comment under it."""
    if not found:
        if since_days is None:
            return ["No feedback yet."]
        return [f"No feedback in the last {since_days:g} day(s)."]
    good = sum(1 for f in found if f.rating == "good")
    period = "" if since_days is None else f" in the last {since_days:g} day(s)"
    lines = [f"{len(found)} feedback{period}: {good} good, {len(found) - good} bad (newest first)"]
    for f in found:
        when = f"{datetime.fromtimestamp(f.at, UTC):%Y-%m-%d %H:%M} UTC"
        lines.append(f"{when}  {f.by}  {f.rating:<4}  {f.key.agent} {f.key.session_id} {f.turn_id}")
        if f.comment:
            said = " ".join(f.comment.split())
            if len(said) > MAX_SHOWN_COMMENT:
                said = said[: MAX_SHOWN_COMMENT - 1] + "…"
            lines.append(f"    “{said}”")
    return lines
