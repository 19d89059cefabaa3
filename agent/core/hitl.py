"""Human in the loop: a tool suspends its turn until a person allowed to answer does.

An async tool calls ``await ctx.request_input(...)``. With no stored answer the
tool raises `InputRequired`, a `BaseException` (so a tool's ``except
Exception`` cannot swallow it); the engine writes one checkpoint and the turn
waits, holding nothing in memory. ``session.resume(...)`` checks who answers
and what, stores the answer under ``input:<turn>:<id>`` and replays the turn:
the tool runs again from the top and this time ``request_input`` returns the
answer. So a tool's side effects belong after the call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import Field, TypeAdapter

from agent._json import JsonValue
from agent.errors import (
    InvalidAnswerError,
    ResumeAuthorizationError,
    ToolError,
)

__all__ = [
    "EXPIRED",
    "REQUEST_ADAPTER",
    "AnswerCheck",
    "Answerer",
    "AuthorizeAnswer",
    "ChildRequest",
    "Grant",
    "InboundEvent",
    "InputRequest",
    "InputRequired",
    "PolicyAnswerer",
    "StoredAnswer",
    "UserAnswerer",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundEvent:
    """The event a channel turned into a turn, without its raw payload."""

    source: str
    """The channel that received it, for example ``slack``. Never taken from message text."""
    user: str | None = None
    attested: bool = False
    """Whether the channel verified ``user`` (a signed Slack event) rather than trusting a claim."""
    data: dict[str, JsonValue] = field(default_factory=dict)
    """Where it came from (team, channel, thread): what a renderer needs to answer there."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UserAnswerer:
    """Exactly this person may answer, compared with the resumer's verified ``by``."""

    kind: Literal["user"] = "user"
    user: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyAnswerer:
    """Whoever the agent's ``authorize_answer`` hook grants, decided at resume time."""

    kind: Literal["policy"] = "policy"
    policy: str
    scope: str | None = None


Answerer = Annotated[UserAnswerer | PolicyAnswerer, Field(discriminator="kind")]


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """Proof, from `grant_answer`, that one resumer may answer one policy request."""

    policy: str
    scope: str | None = None
    turn_id: str
    input_id: str
    by: str | None
    """The resumer the hook approved: the grant answers for nobody else."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildRequest:
    """The request of a delegated (child) turn that a parent's request stands for."""

    agent: str
    session_id: str
    turn_id: str
    input_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRequest:
    """What a suspended turn waits for."""

    id: str
    """Stable within the turn: it keys the answer."""
    prompt: str
    call_id: str
    tool: str
    schema: dict[str, JsonValue] | None = None
    answerers: Answerer | None = None
    """Who may answer; None means anyone the host lets resume."""
    expires_at: float | None = None
    """When the engine answers it as expired (seconds since the epoch)."""
    child: ChildRequest | None = None
    """Set on a parent's mirror of a child turn's request (see `agent.core.delegation`):
    an answer to it answers the child's, and the child's expiry is the one that counts."""

    def as_dict(self) -> dict[str, JsonValue]:
        """The request as plain JSON, as events and APIs carry it."""
        return REQUEST_ADAPTER.dump_python(self, mode="json")  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, data: JsonValue) -> InputRequest:
        """Read back what `as_dict` wrote.

        Raises:
            pydantic.ValidationError: ``data`` is not a request.
        """
        return REQUEST_ADAPTER.validate_python(data)


REQUEST_ADAPTER: TypeAdapter[InputRequest] = TypeAdapter(InputRequest)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredAnswer:
    """How a request was settled, as the engine stored it: answered by someone, or expired."""

    request: InputRequest
    value: JsonValue = None
    by: str | None = None
    expired: bool = False

    @classmethod
    def from_memo(cls, memo: JsonValue) -> StoredAnswer | None:
        """The answer in a stored answer memo; None for anything else."""
        if not isinstance(memo, dict) or "request" not in memo:
            return None
        by = memo.get("by")
        return cls(
            request=InputRequest.from_dict(memo["request"]),
            value=memo.get("value"),
            by=by if isinstance(by, str) else None,
            expired=memo.get("expired") is True,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerCheck:
    """What the agent's ``authorize_answer`` hook decides on."""

    turn_id: str
    request: InputRequest
    policy: str
    scope: str | None
    by: str | None
    principal: Any = None


AuthorizeAnswer = Callable[[AnswerCheck], bool | Awaitable[bool]]


class InputRequired(BaseException):
    """Raised by ``request_input`` to suspend the turn. Not an `Exception`: do not catch it."""

    def __init__(self, request: InputRequest, others: tuple[InputRequest, ...] = ()) -> None:
        super().__init__(request.id)
        self.request = request
        self.others = others
        """The other requests of the same batch (its calls ask at once), in call order."""


class _Expired:
    """The answer to a request nobody answered in time. Falsy, so it never approves."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "EXPIRED"


EXPIRED = _Expired()


def own_request_id(input_id: str, call_id: str) -> str:
    """The id a call asks under when another call of its turn asks under ``input_id`` too."""
    return f"{input_id}@{call_id}"


def answer_step(turn_id: str, input_id: str) -> str:
    """The step id an answer is stored under: answers belong to their turn."""
    return f"input:{turn_id}:{input_id}"


def answerers_from(
    given: UserAnswerer | PolicyAnswerer | Mapping[str, Any] | None,
    event: InboundEvent | None,
) -> UserAnswerer | PolicyAnswerer | None:
    """Who may answer: as given, else the turn's attested speaker, else anyone.

    Raises:
        ToolError: No answerer was named and the turn's speaker is not attested,
            so nobody could be trusted to answer.
    """
    if isinstance(given, (UserAnswerer, PolicyAnswerer)):
        return given
    if given is not None:
        user, policy, scope = given.get("user"), given.get("policy"), given.get("scope")
        if isinstance(user, str) and user and policy is None:
            return UserAnswerer(user=user)
        if isinstance(policy, str) and policy and user is None and isinstance(scope, str | None):
            return PolicyAnswerer(policy=policy, scope=scope)
        raise ToolError(
            "request_input: answerers must be {'user': id} or {'policy': name, 'scope': str}"
        )
    if event is None:
        return None  # nobody spoke (a schedule, a program): the host drives its own resume
    if event.attested and event.user:
        return UserAnswerer(user=event.user)
    raise ToolError(
        f"request_input: this turn's speaker is not attested by its channel ({event.source}); "
        "name who may answer with answerers={'user': ...} or {'policy': ...}"
    )


def check_schema(schema: dict[str, JsonValue] | None) -> None:
    """Refuse a schema no answer could be checked against.

    Raises:
        ToolError: The schema is not valid JSON Schema.
    """
    if schema is None:
        return
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolError(f"request_input: the schema is not valid: {exc.message}") from None


def is_answerer(
    turn_id: str, request: InputRequest, *, by: str | None, granted: Grant | None
) -> bool:
    """Whether this resumer may answer ``request``: a user by ``by``, a policy by a grant."""
    who = request.answerers
    if isinstance(who, UserAnswerer):
        return by is not None and by == who.user
    if isinstance(who, PolicyAnswerer):
        return granted is not None and (
            granted.policy,
            granted.scope,
            granted.turn_id,
            granted.input_id,
            granted.by,
        ) == (who.policy, who.scope, turn_id, request.id, by)
    return True


def check_answerer(
    turn_id: str, request: InputRequest, *, by: str | None, granted: Grant | None
) -> None:
    """Let the resume through only for someone the request allows.

    Raises:
        ResumeAuthorizationError: Naming why, never who else could answer.
    """
    if is_answerer(turn_id, request, by=by, granted=granted):
        return
    if isinstance(request.answerers, PolicyAnswerer):
        raise ResumeAuthorizationError(
            f"turn {turn_id}: request {request.id} needs a grant for policy "
            f"{request.answerers.policy!r}, made for this resumer"
        )
    raise ResumeAuthorizationError(
        f"turn {turn_id}: request {request.id} is for another person to answer"
    )


def check_value(request: InputRequest, value: JsonValue) -> None:
    """Refuse an answer the request's schema does not allow.

    Raises:
        InvalidAnswerError: Naming where the value is wrong.
    """
    if request.schema is None:
        return
    validator = jsonschema.validators.validator_for(request.schema)(request.schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "answer"
        raise InvalidAnswerError(f"request {request.id}: {where}: {error.message}")


def with_expiry(request: InputRequest, ttl: float | None, now: float) -> InputRequest:
    """The request with its deadline set from a time-to-live in seconds."""
    if ttl is None:
        return request
    return dataclasses.replace(request, expires_at=now + ttl)
