"""`SessionHost`: what a session needs from the runtime that hosts it.

A session is written against this protocol rather than `AgentRuntime` itself,
so the runtime may import the session without the two depending on each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from agent._json import JsonValue
from agent.core.events import TurnEvent
from agent.core.hitl import AuthorizeAnswer, ChildRequest, Grant, StoredAnswer
from agent.core.records import SessionKey
from agent.core.turns import Suspended, TurnRecord
from agent.definition.agent import Agent
from agent.engine.turn.context import Delegator
from agent.ports import SessionStore


class ChildTurns(Delegator, Protocol):
    """The host's child turns, as a session sees them (see `agent.engine.delegations`)."""

    async def answer(
        self,
        key: SessionKey,
        turn_id: str,
        child: ChildRequest,
        value: JsonValue,
        *,
        by: str | None,
        granted: Grant | None,
    ) -> None:
        """Answer the child request a mirror of ``turn_id`` stands for."""
        ...

    async def grant(
        self, child: ChildRequest, *, by: str | None, principal: Any, hook: AuthorizeAnswer | None
    ) -> Grant | None:
        """`grant_answer` for the child request a mirror stands for."""
        ...

    async def answer_of(self, child: ChildRequest) -> StoredAnswer | None:
        """How the child request a mirror stands for was settled, if it was."""
        ...

    def turn_changed(self, key: SessionKey, record: TurnRecord) -> None:
        """A turn was answered, suspended or ended: its parent or children may move."""
        ...


__all__ = ["SessionHost"]


class SessionHost(Protocol):
    """The runtime, as one of its sessions sees it."""

    store: SessionStore
    holder: str
    """The name this process writes under in every session lease it takes."""
    lease_seconds: float
    clock: Callable[[], float]
    hands_over: bool
    """Whether a start, cancel, answer or reset of a session another live process writes
    is handed to that process (replicas), rather than waiting for it to let go."""

    @property
    def is_closed(self) -> bool:
        """Whether the host has begun closing: no new turn may start."""
        ...

    def agent(self, name: str) -> Agent:
        """The mounted agent called ``name``."""
        ...

    def check_open(self) -> None:
        """Raise `RuntimeClosedError` if the host is closing."""
        ...

    def note_loaded(self, key: SessionKey) -> None:
        """Mark the session at ``key`` as just used, so idle ones beyond the limit unload."""
        ...

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Run ``work`` as a task the host keeps and cancels when it closes."""
        ...

    def emit(self, event: TurnEvent) -> None:
        """Hand an event to the host's sinks."""
        ...

    @property
    def delegations(self) -> ChildTurns:
        """The child turns of the host's turns (see `agent.engine.delegations`)."""
        ...

    def turn_changed(self, key: SessionKey, record: TurnRecord) -> None:
        """A turn was answered, suspended or ended (its parent or children may move)."""
        ...

    def schedule_expiry(self, key: SessionKey, suspended: Suspended) -> None:
        """Answer ``suspended``'s request as expired when its deadline comes."""
        ...

    def cancel_expiry(self, key: SessionKey, turn_id: str) -> None:
        """Forget the expiry timer of a request that was answered or withdrawn."""
        ...
