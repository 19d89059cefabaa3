"""`Expiries`: the timers that answer a suspended turn's requests as expired when they fall due.

One timer per suspended turn, for its first request to fall due; once that
request is settled, the next is scheduled. A mirror of a child turn's request
(see `agent.engine.delegations`) has no timer here: the child's own request
expires, and the parent follows it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from agent.core.hitl import InputRequest
from agent.core.records import SessionKey
from agent.core.turns import Suspended
from agent.engine.session import AgentSession


class ExpiryHost(Protocol):
    """The runtime, as its expiry timers need it."""

    @property
    def is_closed(self) -> bool:
        """Whether the runtime has begun closing."""
        ...

    def session(self, agent: str, session_id: str) -> AgentSession:
        """The session ``(agent, session_id)``."""
        ...

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Run ``work`` in a task the runtime keeps and cancels as it closes."""
        ...


__all__ = ["EXPIRY_RETRY_SECONDS", "Expiries", "expires_here"]

logger = logging.getLogger("agent")

EXPIRY_RETRY_SECONDS = 5.0
"""How soon an expiry the store failed to write is tried again."""


def expires_here(request: InputRequest) -> bool:
    """Whether this turn's own timer expires ``request`` (a mirror follows its child's)."""
    return request.expires_at is not None and request.child is None


class Expiries:
    """The runtime's expiry timers, by session and turn."""

    def __init__(self, runtime: ExpiryHost, clock: Callable[[], float]) -> None:
        self._runtime = runtime
        self._clock = clock
        self._timers: dict[tuple[SessionKey, str], asyncio.TimerHandle] = {}

    def __bool__(self) -> bool:
        return bool(self._timers)

    def schedule(self, key: SessionKey, suspended: Suspended) -> None:
        """Answer ``suspended``'s first request to fall due as expired when its time comes."""
        due = [r for r in suspended.requests if expires_here(r)]
        if not due or self._runtime.is_closed:
            return
        first = min(due, key=lambda r: r.expires_at or 0.0)
        assert first.expires_at is not None
        self.cancel(key, suspended.turn_id)
        delay = max(0.0, first.expires_at - self._clock())
        self._timers[(key, suspended.turn_id)] = asyncio.get_running_loop().call_later(
            delay, self.expire_soon, key, suspended.turn_id, first.id
        )

    def cancel(self, key: SessionKey, turn_id: str) -> None:
        """Forget the expiry timer of a request that was answered."""
        handle = self._timers.pop((key, turn_id), None)
        if handle is not None:
            handle.cancel()

    def clear(self) -> None:
        """Stop every timer (the runtime closes; the next start schedules them again)."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    def expire_soon(self, key: SessionKey, turn_id: str, input_id: str) -> None:
        """Answer a due request as expired, in a task of its own."""
        self._timers.pop((key, turn_id), None)
        if self._runtime.is_closed:
            return
        session = self._runtime.session(key.agent, key.session_id)
        _ = self._runtime.spawn(
            self.expire_quietly(session, turn_id, input_id), name=f"expire {key}/{turn_id}"
        )

    async def expire_quietly(self, session: AgentSession, turn_id: str, input_id: str) -> None:
        """Expire a request now; one the store could not write is tried again soon."""
        try:
            if await session.expire(turn_id, input_id):
                logger.info("request %s of turn %s in %s expired", input_id, turn_id, session.key)
        except Exception:
            logger.exception(
                "could not expire request %s of turn %s; trying again", input_id, turn_id
            )
            # a locked or failing store now is no reason to hold the thread until a restart
            asyncio.get_running_loop().call_later(
                EXPIRY_RETRY_SECONDS, self.expire_soon, session.key, turn_id, input_id
            )
