"""The replies being shown in one thread at once, and what each may take for its own.

Two turns of a thread can stream at once: a newer message supersedes a reply
that is still writing its closing line. A reply whose stream opening was lost
(or that a restart takes up) looks for an untagged message of the bot's in the
thread, and must never take the other turn's for its own. So the replies of a
thread open streams, and look for lost ones, one at a time (a lock they share),
and each knows the messages the others hold: those open in this process, and
those the other turns' kept states name (what a stopped process left).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bot.slack.channel.delivery import Deliveries, Thread

__all__ = ["Neighbours", "ThreadsShowing"]

Messages = Callable[[], Iterable[str | None]]


@dataclass
class _Place:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    replies: dict[Neighbours, Messages] = field(default_factory=dict)


class ThreadsShowing:
    """Every thread with a reply being shown here, with its lock and its replies."""

    def __init__(self, deliveries: Deliveries) -> None:
        self.deliveries = deliveries
        self._places: dict[tuple[str, str | None], _Place] = {}

    def join(self, thread: Thread, turn_id: str) -> Neighbours:
        """Take a place among the thread's replies (`Neighbours.leave` gives it back)."""
        key = (thread.channel, thread.thread_ts)
        return Neighbours(self, self._places.setdefault(key, _Place()), key, thread, turn_id)

    def forget_if_empty(self, key: tuple[str, str | None]) -> None:
        """Let go of a thread no reply is shown in any more."""
        place = self._places.get(key)
        if place is not None and not place.replies:
            del self._places[key]


class Neighbours:
    """One reply's view of the others in its thread."""

    def __init__(
        self,
        threads: ThreadsShowing,
        place: _Place,
        key: tuple[str, str | None],
        thread: Thread,
        turn_id: str,
    ) -> None:
        self._threads = threads
        self._place = place
        self._key = key
        self._session_id = thread.session_id
        self._turn_id = turn_id
        self.lock = place.lock
        """Held while a stream is opened or a lost one looked for."""

    def hold(self, messages: Messages) -> None:
        """Say which messages this reply holds (read each time another asks)."""
        self._place.replies[self] = messages

    def leave(self) -> None:
        """The reply is done: its messages are nobody's business here any more."""
        self._place.replies.pop(self, None)
        self._threads.forget_if_empty(self._key)

    async def taken(self) -> set[str]:
        """The messages the thread's other replies hold, here and as kept in the store."""
        here = {
            ts
            for other, messages in self._place.replies.items()
            if other is not self
            for ts in messages()
            if ts
        }
        deliveries = self._threads.deliveries
        return here | await deliveries.held_by_others(self._session_id, self._turn_id)
