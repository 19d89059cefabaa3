"""History retention: what of a turn is deleted once the agent's retention period is over.

A turn's payloads, its input, its messages and steps and its result's text,
are deleted; its identity (id, sequence number, who or what started it),
status, timestamps and usage stay, and ``expired_at`` says when the rest went.
Only ended turns expire, and only once they left the live transcript (see
`Compaction.expire_at`): the model never sees half a turn.
"""

from __future__ import annotations

import dataclasses

from agent.core.turns import (
    Cancelled,
    Completed,
    Failed,
    Interrupted,
    TurnInput,
    TurnRecord,
    TurnResult,
)

__all__ = ["EXPIRED_NOTICE", "expired_record"]

EXPIRED_NOTICE = (
    "[The earlier part of this conversation is no longer kept: it expired under "
    "the history retention period.]"
)
"""What stands for expired turns before the live messages, in place of a summary."""


def expired_record(record: TurnRecord, at: float) -> TurnRecord:
    """``record`` with its payloads deleted at ``at``; its identity, status and usage kept."""
    given = record.input
    kept_input = TurnInput(text="", trigger=given.trigger, by=given.by)
    return dataclasses.replace(
        record, input=kept_input, result=_without_payload(record.result), expired_at=at
    )


def _without_payload(result: TurnResult | None) -> TurnResult | None:
    if isinstance(result, Completed):
        return dataclasses.replace(result, text="", output=None)
    if isinstance(result, Failed):
        return dataclasses.replace(result, error="")
    if isinstance(result, Interrupted):
        return dataclasses.replace(result, detail="")
    if isinstance(result, Cancelled):
        return result  # its reason is the engine's word, not the person's
    return result
