"""The line a reply ends with when its turn ended without its answer, and what it offers then.

A failed turn says why; a cancelled one says who or what stopped it; an
interrupted one says it was stopped for good (`INTERRUPT_REASONS`). The failed
and the interrupted may be asked again (`RETRYABLE_ENDINGS`), so their replies
offer Retry; a cancel was asked for, so its reply does not.
"""

from __future__ import annotations

from agent import TurnEvent, TurnRecord
from bot.texts import CANCELLED, FAILED_PREFIX, interrupted, stopped_by, withdrawn_by

__all__ = ["RETRYABLE_ENDINGS", "closing_line", "file_notes"]

RETRYABLE_ENDINGS = frozenset({"turn.failed", "turn.interrupted"})
"""The endings a reply offers Retry after: the bot could not answer (a cancel was asked for)."""


def file_notes(record: TurnRecord | None) -> str | None:
    """The lines naming the files of the turn's opening message that could not be read.

    The model is told too (in the message it reads), but whether it says so is its
    choice: these lines end the reply whatever it wrote (see `bot.slack.files`).
    """
    files = record.input.files if record is not None else ()
    notes = [f"_{file.note}_" for file in files if file.note]
    return "\n".join(notes) or None


def closing_line(event: TurnEvent, by: str | None = None, notes: str | None = None) -> str | None:
    """The line a reply ends with when its turn ended without its answer, after any ``notes``.

    ``by`` is who ended it from Slack (Stop, Withdraw), when this process knows;
    ``notes`` are the reply's own (`file_notes`), shown whatever the ending.
    """
    ending = _ending(event, by)
    return "\n\n".join(line for line in (notes, ending) if line) or None


def _ending(event: TurnEvent, by: str | None) -> str | None:
    if event.type == "turn.failed":
        return f"{FAILED_PREFIX} {event.error}"
    if event.type == "turn.cancelled":
        if by is not None and event.reason in ("requested", "withdrawn"):
            return stopped_by(by) if event.reason == "requested" else withdrawn_by(by)
        return CANCELLED.get(event.reason, f"_(stopped: {event.reason})_")
    if event.type == "turn.interrupted":
        return interrupted(event.reason, event.detail)
    return None
