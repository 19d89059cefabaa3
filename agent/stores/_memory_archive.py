"""The memory store's archive: what a compaction or a reset files away, and its expiry."""

from __future__ import annotations

from collections.abc import Mapping

from agent._json import JsonValue
from agent.core.messages import Message
from agent.core.records import Archive
from agent.core.retention import expired_record
from agent.core.turns import TurnRecord

__all__ = ["expire_archive", "file_away", "take_steps"]


def file_away(
    archive: dict[int, Archive],
    generation: int,
    messages: list[Message],
    turns: dict[str, TurnRecord],
    steps: dict[str, dict[str, JsonValue]],
) -> None:
    """Add what a compaction or a reset moved out to the archive of ``generation``."""
    kept = archive.get(generation)
    if kept is not None:
        messages = [*kept.transcript, *messages]
        turns, steps = {**kept.turns, **turns}, {**kept.steps, **steps}
    archive[generation] = Archive(
        generation=generation, transcript=messages, turns=turns, steps=steps
    )


def expire_archive(
    archive: dict[int, Archive],
    generation: int,
    at: float,
    before: float | None,
    only: Mapping[str, TurnRecord] | None = None,
) -> int:
    """Expire archived turns of ``generation``; how many.

    They are those in ``only`` when given, else those that ended before ``before``.
    """
    kept = archive[generation]
    due = {
        turn_id
        for turn_id, t in kept.turns.items()
        if t.expired_at is None
        and (
            turn_id in only
            if only is not None
            else t.ended_at is not None and before is not None and t.ended_at < before
        )
    }
    if due:
        archive[generation] = Archive(
            generation=generation,
            transcript=[m for m in kept.transcript if m.turn_id not in due],
            turns={
                turn_id: expired_record(t, at) if turn_id in due else t
                for turn_id, t in kept.turns.items()
            },
            steps={turn_id: st for turn_id, st in kept.steps.items() if turn_id not in due},
        )
    return len(due)


def take_steps(
    steps: dict[tuple[str, str], JsonValue], turns: dict[str, TurnRecord]
) -> dict[str, dict[str, JsonValue]]:
    """Remove the step memos of ``turns`` from ``steps``; return them by turn, then step."""
    taken: dict[str, dict[str, JsonValue]] = {}
    for turn_id, step_id in [k for k in steps if k[0] in turns]:
        taken.setdefault(turn_id, {})[step_id] = steps.pop((turn_id, step_id))
    return taken
