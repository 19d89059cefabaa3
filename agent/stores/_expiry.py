"""What both SQL stores do to expire archived turns, given their placeholder style."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agent.core.retention import expired_record
from agent.core.turns import STORED_APART, TURN_RECORD_ADAPTER

__all__ = ["scrub_archived"]


def scrub_archived(
    execute: Callable[[str, Sequence[Any]], Any],
    rows: Sequence[Sequence[Any]],
    at: float,
    mark: str,
) -> int:
    """Expire each archived turn of ``rows`` (session, generation, turn id, record); how many.

    ``mark`` is the store's placeholder (``?`` or ``%s``).
    """
    keyed = f"session = {mark} AND generation = {mark} AND turn_id = {mark}"
    for session, generation, turn_id, body in rows:
        record = expired_record(TURN_RECORD_ADAPTER.validate_json(body), at)
        scrubbed = TURN_RECORD_ADAPTER.dump_json(record, exclude=STORED_APART).decode()
        keys = (session, generation, turn_id)
        execute(f"UPDATE archived_turns SET record = {mark} WHERE {keyed}", (scrubbed, *keys))
        for table in ("archived_messages", "archived_steps"):
            execute(f"DELETE FROM {table} WHERE {keyed}", keys)
    return len(rows)
