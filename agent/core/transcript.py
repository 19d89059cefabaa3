"""`Transcript`: a session's live messages, addressed by their index in the whole transcript.

Compaction moves a session's oldest turns out of the live transcript (see
`Compaction`), so the live messages start at ``base``, not 0. Every index the
engine and its stores use stays absolute: a step id ``model:<n>``, a turn's
opening index, the length that is the next message's index. `Transcript` keeps
those meanings: ``len()`` is ``base`` plus the live messages, an index or a
slice start counts from the start of the whole transcript, and iterating yields
the live messages only. Nothing below ``base`` is held in memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import SupportsIndex, overload

from agent.core.messages import Message, UserMessage

__all__ = ["Compaction", "Transcript", "summary_message"]


class Transcript(list[Message]):
    """The live messages of a session, from index ``base`` on."""

    __slots__ = ("base",)

    def __init__(self, messages: Iterable[Message] = (), *, base: int = 0) -> None:
        super().__init__(messages)
        self.base = base
        """The index of the first live message: what compaction moved out lies below it."""

    def __len__(self) -> int:
        return self.base + super().__len__()

    def __bool__(self) -> bool:
        return super().__len__() > 0

    @overload
    def __getitem__(self, index: SupportsIndex) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            at = slice(self._at(index.start), self._at(index.stop), index.step)
            return super().__getitem__(at)
        position = index.__index__()
        if position >= 0:
            if position < self.base:
                raise IndexError(
                    f"message {position} was compacted (the live ones start at {self.base})"
                )
            position -= self.base
        return super().__getitem__(position)

    def _at(self, index: int | None) -> int | None:
        if index is None or index < 0:
            return index
        return max(index - self.base, 0)

    def drop_below(self, base: int) -> None:
        """Let the messages below ``base`` go: compaction moved them out."""
        if base > self.base:
            super().__delitem__(slice(0, base - self.base))
            self.base = base

    def restart(self) -> None:
        """Empty it for a new generation, whose messages start again at 0."""
        self.clear()
        self.base = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction:
    """A `Commit`'s move of a session's oldest turns out of its live state.

    The turns up to sequence number ``through`` (all ended) and the messages below
    index ``base`` go to the archive under the current generation; ``summary``,
    written by the model, stands for them in every later request.
    """

    through: int
    base: int
    summary: str
    generation: int
    """The generation it was planned in: a store refuses it once a reset moved on."""
    since: float | None = None
    """When the oldest turn the summary speaks of ended: it expires with that turn."""
    expire_at: float | None = None
    """Set when the turns expired under the history retention: their messages and steps
    are deleted rather than archived, and their records kept without their payloads
    (`agent.core.retention`), all in the same transaction."""


def summary_message(summary: str) -> UserMessage:
    """How a compacted session's summary reads to the model, before its live messages."""
    return UserMessage(
        turn_id="", text=f"[A summary of the earlier part of this conversation]\n{summary}"
    )
