"""Errors raised by the turn engine.

The tree::

    AgentError
    ├── ConfigError            the engine was assembled or called wrongly (our misuse)
    ├── StoreError             the session store could not read or write
    │   ├── StoreConflictError a conditional write found the record changed under it
    │   └── ReplayIntegrityError   a replay found the store disagreeing with the loop
    ├── ConflictError          the session is not in a state that allows this (HTTP 409)
    │   ├── SessionSuspendedError  a new turn while the session waits for a person
    │   ├── ResumeConflictError    a resume of a turn or request that is not waiting
    │   └── SteerRefusedError      steering with no turn at work to take it
    ├── ResumeAuthorizationError   this resumer may not answer this request (HTTP 403)
    ├── InvalidAnswerError     the answer does not match the request's schema (HTTP 400)
    ├── AuthorizeAnswerError   the agent's ``authorize_answer`` hook failed (HTTP 500)
    ├── UnknownTurnError       no turn with that id in the session (also a LookupError)
    ├── RuntimeClosedError     the runtime closed while a caller awaited a turn
    └── TurnError              something about one turn; carries ``turn_id``
        ├── ModelError         the model step failed (retry meaning travels on it)
        ├── ToolError          a tool call could not be made as declared
        │   └── FatalToolError raised by a tool to fail the turn instead of reporting
        ├── TurnFailedError    ``AgentSession.turn()`` on a turn that failed
        ├── TurnCancelledError ``AgentSession.turn()`` on a turn that was cancelled
        ├── TurnInterruptedError ``AgentSession.turn()`` on a turn the engine interrupted
        └── TurnSuspendedError ``AgentSession.turn()`` on a turn that suspended for input

Messages carry ids (agent, session, turn, tool), never tokens or request bodies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent._json import JsonValue

__all__ = [
    "AgentError",
    "AuthorizeAnswerError",
    "ConfigError",
    "ConflictError",
    "FatalToolError",
    "InvalidAnswerError",
    "ModelError",
    "ReplayIntegrityError",
    "ResumeAuthorizationError",
    "ResumeConflictError",
    "RuntimeClosedError",
    "SessionSuspendedError",
    "SteerRefusedError",
    "StoreConflictError",
    "StoreError",
    "ToolError",
    "TurnCancelledError",
    "TurnError",
    "TurnFailedError",
    "TurnInterruptedError",
    "TurnSuspendedError",
    "UnknownTurnError",
    "is_replay_integrity_error",
]


class AgentError(Exception):
    """Root of every error the engine raises."""


class ConfigError(AgentError):
    """The engine was assembled or called in a way that can never work."""


class StoreError(AgentError):
    """The session store failed to read or write."""


class StoreConflictError(StoreError):
    """A conditional write found the turn's record no longer as expected (another writer won)."""


class LeaseLostError(StoreError):
    """Another process took the session on while this one still meant to write to it."""


class ReplayIntegrityError(StoreError):
    """A replay found the store disagreeing with the loop: the turn cannot go on from it.

    A step stored where the loop would write none, or a transcript that does not
    line up with where the loop stands. Nothing more is written for the turn (any
    recovery write would ask the diverged history for a position it cannot give, and
    its own refusal would hide this one); the turn stays as stored for an operator.
    ``expected`` is where the loop stands, ``found`` what the store holds there.
    """

    def __init__(self, message: str, *, turn_id: str, expected: str, found: str) -> None:
        super().__init__(f"{message} (the loop expected {expected}; the store holds {found})")
        self.turn_id, self.expected, self.found = turn_id, expected, found


def is_replay_integrity_error(exc: BaseException) -> bool:
    """Whether ``exc`` is, wraps or groups a `ReplayIntegrityError`.

    For code that wraps the engine and must keep its rule: such an error is raised on
    untouched, never answered with more writes for the turn.
    """
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ReplayIntegrityError):
            return True
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


class ConflictError(AgentError):
    """The session is not in a state that allows this request."""

    http_status = 409


class SessionSuspendedError(ConflictError):
    """A new turn was started while the session waits for a person's answer."""


class SteerRefusedError(ConflictError):
    """`AgentSession.steer` found no turn at work that may take the input.

    ``reason`` is a word a caller can test: ``no_turn`` (nothing runs), ``suspended``
    (the turn waits for a person), ``stopping`` (a cancel or interrupt is asked for)
    or ``finishing`` (its final reply is being written). For each, starting a turn
    of its own is what the input needs.
    """

    def __init__(self, message: str, *, reason: str, turn_id: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.turn_id = turn_id


class ResumeConflictError(ConflictError):
    """A resume named a turn or request that is not waiting for an answer.

    When the request was settled already, and the resumer is one who may answer
    it, the error says how, so a surface can tell them in its own words.
    """

    def __init__(
        self,
        message: str,
        *,
        answered_by: str | None = None,
        answer: JsonValue = None,
        expired: bool = False,
    ) -> None:
        super().__init__(message)
        self.answered_by = answered_by
        """Who answered the request first."""
        self.answer = answer
        """What they answered."""
        self.expired = expired
        """Nobody answered in time; the request was settled as expired."""


class ResumeAuthorizationError(AgentError, PermissionError):
    """The resumer may not answer this request; nothing was stored."""

    http_status = 403


class InvalidAnswerError(AgentError, ValueError):
    """The answer does not match the request's schema; nothing was stored."""

    http_status = 400


class AuthorizeAnswerError(AgentError):
    """The agent's ``authorize_answer`` hook raised; the answer was not applied, retry it."""

    http_status = 500


class UnknownTurnError(AgentError, LookupError):
    """The session holds no turn with this id."""


class RuntimeClosedError(AgentError):
    """The runtime closed before the awaited turn ended; the next start resumes it."""


class TurnError(AgentError):
    """A failure that belongs to one turn."""

    def __init__(self, message: str, *, turn_id: str | None = None) -> None:
        super().__init__(message)
        self.turn_id = turn_id


class ModelError(TurnError):
    """The model step failed before anything was committed.

    Attributes:
        retryable: Whether trying the same step again may succeed.
        retry_after: Seconds the provider asked us to wait, when it said.
    """

    def __init__(
        self,
        message: str,
        *,
        turn_id: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, turn_id=turn_id)
        self.retryable = retryable
        self.retry_after = retry_after


class ToolError(TurnError):
    """A tool call could not be made as the tool was declared.

    Raised inside a call (the model reads it as an error result), except for
    its subclass `FatalToolError`.
    """


class FatalToolError(ToolError):
    """Raised by a tool for a mistake the model cannot fix: it fails the turn.

    Use it for a misconfigured deployment or a broken invariant. Any other
    exception a tool raises becomes the call's error result instead.
    """


class TurnFailedError(TurnError):
    """`AgentSession.turn()` was awaiting a turn that failed."""

    def __init__(
        self, message: str, *, turn_id: str, phase: str | None = None, step: str | None = None
    ) -> None:
        super().__init__(message, turn_id=turn_id)
        self.phase = phase
        self.step = step


class TurnCancelledError(TurnError):
    """`AgentSession.turn()` was awaiting a turn that was cancelled."""

    def __init__(self, reason: str, *, turn_id: str) -> None:
        super().__init__(f"turn {turn_id} was cancelled ({reason})", turn_id=turn_id)
        self.reason = reason


class TurnInterruptedError(TurnError):
    """`AgentSession.turn()` was awaiting a turn that the engine interrupted (see `Interrupted`)."""

    def __init__(self, reason: str, detail: str = "", *, turn_id: str) -> None:
        said = f": {detail}" if detail else ""
        super().__init__(f"turn {turn_id} was interrupted ({reason}){said}", turn_id=turn_id)
        self.reason = reason
        self.detail = detail


class TurnSuspendedError(TurnError):
    """`AgentSession.turn()` refuses a turn that suspended: it is non-interactive."""
