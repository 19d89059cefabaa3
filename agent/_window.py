"""What part of a long transcript the model is sent, once it outgrows a token budget.

The stored transcript is never cut; each request gets a window of it: the
thread's first exchange (what it is about), a one-line notice of what was left
out, and the newest messages. A cut only ever falls before a person's message
or before a reply, never between a tool call and its result. Once chosen, a
cut is kept for as long as the window fits, so the cached prefix stays the
same step after step instead of sliding with every message.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from agent.messages import Message, ToolMessage, TriggerMessage, UserMessage

__all__ = ["ContextWindow", "omission_notice", "valid_cuts", "windowed"]

log = logging.getLogger(__name__)

REFILL = 0.6
"""A new window holds this share of the budget, leaving room to grow before the next cut."""

MAX_HEAD_SHARE = 0.25
"""A first exchange bigger than this share of the budget shrinks to its opening message."""

REMEMBERED_SESSIONS = 1_000

Count = Callable[[Sequence[Message]], Awaitable[int]]
Size = Callable[[Message], int]


def omission_notice(count: int) -> str:
    """What the model reads where messages were left out."""
    return (
        f"[{count} earlier messages of this conversation are left out here "
        "to fit the model's context window.]"
    )


def valid_cuts(messages: Sequence[Message]) -> list[int]:
    """Indices a window may start its tail at: anywhere but before a tool result."""
    return [i for i, m in enumerate(messages) if not isinstance(m, ToolMessage)]


def windowed(messages: Sequence[Message], head: int, tail: int) -> list[Message]:
    """``messages[:head]``, a notice of what is left out, then ``messages[tail:]``.

    The person's message that opened the newest turn is kept too, right after
    the notice, when the cut fell inside that turn: it is the question being
    answered.
    """
    if tail <= head:
        return list(messages)
    opening = _newest_opening(messages, tail)
    pinned = [messages[opening]] if opening is not None and opening >= head else []
    notice = UserMessage(turn_id="", text=omission_notice(tail - head - len(pinned)))
    return [*messages[:head], notice, *pinned, *messages[tail:]]


def _newest_opening(messages: Sequence[Message], tail: int) -> int | None:
    """The newest person's (or trigger's) message before ``tail``, if its turn reaches past it."""
    if tail < len(messages) and isinstance(messages[tail], (UserMessage, TriggerMessage)):
        return None  # the tail opens with a turn of its own
    for i in range(tail - 1, -1, -1):
        if isinstance(messages[i], (UserMessage, TriggerMessage)):
            return i
    return None


def _first_exchange_end(messages: Sequence[Message]) -> int:
    """Where the thread's first turn ends; its opening message alone when it is the only turn."""
    first = messages[0].turn_id
    for i, message in enumerate(messages):
        if message.turn_id != first:
            return i
    return 1


class ContextWindow:
    """Chooses, per session, the window of a transcript that fits ``budget`` tokens.

    Args:
        budget: The most input tokens a request may hold.
        size: A message's size in characters as sent, the cheap estimate used
            to skip counting for small threads and to place cuts.
    """

    def __init__(self, *, budget: int, size: Size) -> None:
        self.budget = budget
        self._size = size
        self._cuts: OrderedDict[str, int] = OrderedDict()

    async def fit(
        self, key: str, messages: Sequence[Message], *, overhead: int, count: Count
    ) -> Sequence[Message]:
        """The messages to send for session ``key``.

        Args:
            key: The session, whose cut is remembered between its steps.
            messages: The whole transcript.
            overhead: The size of the system prompt and tools, in characters.
            count: Counts the tokens of a request made of the given messages
                (with the system prompt and tools): the provider's own count.
        """
        sizes = [self._size(m) for m in messages]
        if overhead + sum(sizes) <= self.budget:
            return messages  # a token spans at least one character, so this surely fits
        cuts = valid_cuts(messages)
        head = self._head(messages, sizes)
        remembered = self._cuts.get(key)
        if remembered is not None and remembered in cuts and remembered > head:
            candidate = windowed(messages, head, remembered)
            tokens = await count(candidate)
            if tokens <= self.budget:
                self._cuts.move_to_end(key)
                return candidate
            chars = overhead + sum(sizes[:head]) + sum(sizes[remembered:])
        else:
            tokens = await count(messages)
            if tokens <= self.budget:
                self._cuts.pop(key, None)
                return messages
            chars = overhead + sum(sizes)
        per_char = tokens / max(chars, 1)
        target = self.budget * REFILL
        for _ in range(4):
            tail = _tail_start(sizes, cuts, head, target / per_char, overhead)
            candidate = windowed(messages, head, tail)
            tokens = await count(candidate)
            if tokens <= self.budget:
                self._remember(key, tail)
                return candidate
            target *= 0.7  # the estimate was short; aim lower
        log.warning("session %s: no window of its transcript fits %d tokens", key, self.budget)
        return candidate

    def _head(self, messages: Sequence[Message], sizes: list[int]) -> int:
        end = _first_exchange_end(messages)
        if end and sum(sizes[:end]) > self.budget * MAX_HEAD_SHARE:
            return 1  # only the opening message
        return end

    def _remember(self, key: str, tail: int) -> None:
        self._cuts[key] = tail
        self._cuts.move_to_end(key)
        while len(self._cuts) > REMEMBERED_SESSIONS:
            self._cuts.popitem(last=False)


def _tail_start(sizes: list[int], cuts: list[int], head: int, room: float, overhead: int) -> int:
    """The earliest cut after the head whose window is estimated to fit ``room`` characters."""
    room -= overhead + sum(sizes[:head])
    candidates = [c for c in cuts if c > head]
    kept = 0
    end = len(sizes)
    for i in range(len(candidates) - 1, -1, -1):
        kept += sum(sizes[candidates[i] : end])
        end = candidates[i]
        if kept > room:
            # this unit no longer fits: start at the next one, or at the newest if it alone is over
            return candidates[i + 1] if i + 1 < len(candidates) else candidates[i]
    return head  # everything after the head fits: no cut
