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
from dataclasses import dataclass, field

from agent.core.messages import Message, ToolMessage, TriggerMessage, UserMessage

__all__ = ["ContextWindow", "omission_notice", "valid_cuts", "windowed"]

log = logging.getLogger(__name__)

REFILL = 0.6
"""A new window holds this share of the budget, leaving room to grow before the next cut."""

MAX_HEAD_SHARE = 0.25
"""A first exchange bigger than this share of the budget shrinks to its opening message."""

REMEMBERED_SESSIONS = 1_000

NOTICE_SIZE = 200
"""About the size of the notice of what was left out, as sent."""

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


@dataclass(slots=True)
class _Memory:
    """What a session's last request was, so the next one rarely needs counting."""

    sizes: list[int] = field(default_factory=list)
    """Each message's size, in transcript order, measured once."""
    last_sized: Message | None = None
    """The message ``sizes[-1]`` measures, by identity: the transcript is append-only."""
    tail: int | None = None
    """Where the window's tail starts; None when the whole transcript was sent."""
    tail_turn: str = ""
    chars: int = 0
    tokens: int = 0
    """Size and token count of what was last counted and sent."""


class ContextWindow:
    """Chooses, per session, the window of a transcript that fits ``budget`` tokens.

    Args:
        budget: The most input tokens a request may hold.
        size: A message's size in characters as sent, the cheap estimate used
            to skip counting and to place cuts.
    """

    def __init__(self, *, budget: int, size: Size) -> None:
        self.budget = budget
        self._size = size
        self._memory: OrderedDict[str, _Memory] = OrderedDict()

    async def fit(
        self, key: str, messages: Sequence[Message], *, overhead: int, count: Count
    ) -> Sequence[Message]:
        """The messages to send for session ``key``.

        Args:
            key: The session (and agent), whose cut is remembered between steps.
            messages: The whole transcript.
            overhead: The size of the system prompt and tools, in characters.
            count: Counts the tokens of a request made of the given messages
                (with the system prompt and tools): the provider's own count.
        """
        memory = self._recall(key)
        sizes = self._sizes(memory, messages)
        whole = overhead + sum(sizes)
        if whole <= self.budget:
            return messages  # a token spans at least one character, so this surely fits
        head = self._head(messages, sizes)
        tail = memory.tail if self._still_cuts(memory, messages, head) else None
        sent = messages if tail is None else windowed(messages, head, tail)
        chars = whole if tail is None else overhead + _window_chars(messages, sizes, head, tail)
        if memory.tokens and memory.chars <= chars <= memory.chars + self.budget - memory.tokens:
            return sent  # grown by less than the room left, even at a token a character
        tokens = await count(sent)
        if tokens <= self.budget:
            self._note(memory, messages, tail, chars, tokens)
            return sent
        per_char = tokens / max(chars, 1)
        target = self.budget * REFILL
        cuts = valid_cuts(messages)  # only a new cut needs them: a whole pass over the thread
        for _ in range(4):
            tail = _tail_start(sizes, cuts, head, target / per_char, overhead)
            sent = windowed(messages, head, tail)
            tokens = await count(sent)
            if tokens <= self.budget:
                chars = overhead + _window_chars(messages, sizes, head, tail)
                self._note(memory, messages, tail, chars, tokens)
                return sent
            target *= 0.7  # the estimate was short; aim lower
        log.warning("session %s: no window of its transcript fits %d tokens", key, self.budget)
        return sent

    def _recall(self, key: str) -> _Memory:
        memory = self._memory.get(key)
        if memory is None:
            memory = self._memory[key] = _Memory()
            while len(self._memory) > REMEMBERED_SESSIONS:
                self._memory.popitem(last=False)
        self._memory.move_to_end(key)
        return memory

    def _sizes(self, memory: _Memory, messages: Sequence[Message]) -> list[int]:
        """Each message's size, measuring only those added since the last request."""
        known = len(memory.sizes)
        if not known or known > len(messages) or messages[known - 1] is not memory.last_sized:
            memory.sizes, known = [], 0  # another transcript (reloaded, reset): measure anew
            memory.tokens = 0
        memory.sizes.extend(self._size(m) for m in messages[known:])
        memory.last_sized = messages[-1] if messages else None
        return memory.sizes

    def _still_cuts(self, memory: _Memory, messages: Sequence[Message], head: int) -> bool:
        tail = memory.tail
        return (
            tail is not None
            and head < tail < len(messages)
            and messages[tail].turn_id == memory.tail_turn
            and not isinstance(messages[tail], ToolMessage)
        )

    @staticmethod
    def _note(
        memory: _Memory, messages: Sequence[Message], tail: int | None, chars: int, tokens: int
    ) -> None:
        memory.tail = tail
        memory.tail_turn = messages[tail].turn_id if tail is not None else ""
        memory.chars, memory.tokens = chars, tokens

    def _head(self, messages: Sequence[Message], sizes: list[int]) -> int:
        end = _first_exchange_end(messages)
        if end and sum(sizes[:end]) > self.budget * MAX_HEAD_SHARE:
            return 1  # only the opening message
        return end


def _window_chars(messages: Sequence[Message], sizes: list[int], head: int, tail: int) -> int:
    """The size of ``windowed(messages, head, tail)``, from sizes already measured."""
    opening = _newest_opening(messages, tail)
    pinned = sizes[opening] if opening is not None and opening >= head else 0
    return sum(sizes[:head]) + NOTICE_SIZE + pinned + sum(sizes[tail:])


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
