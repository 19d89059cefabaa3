"""Declaring tools, and the context a tool call runs with.

How ``run`` is declared decides the guarantee: a plain ``def`` is **local** and
exactly-once (it runs inside the step's transaction, on the store's connection
thread), an ``async def`` is **remote** and at-least-once (side effects must
carry ``ctx.idempotency_key``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, overload

from pydantic import BaseModel, ValidationError, create_model
from pydantic_core import PydanticSerializationError, from_json, to_json

from agent._json import JsonValue
from agent.core.hitl import InboundEvent
from agent.core.model import ToolSpec
from agent.errors import ConfigError, FatalToolError, ToolError
from agent.ports import StoreHandle

__all__ = ["Tool", "ToolContext", "tool"]

ERROR_TEXT_LIMIT = 2000


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """What a tool call knows about where it runs."""

    agent: str
    session_id: str
    turn_id: str
    call_id: str
    idempotency_key: str
    """Stable across replays of this call: give it to remote side effects to dedupe on."""
    handle: StoreHandle | None = None
    inputs: AnswerLookup | None = None
    """Where ``request_input`` finds answers; only async tools have one."""
    reporter: Callable[[str], None] | None = None
    """Where ``progress`` sends a line; the engine gives every call one."""
    delegation: Delegation | None = None
    """Where ``delegate`` starts child turns; only async tools have one."""
    event: InboundEvent | None = None
    """The channel's event that opened the turn (who asked, and where), when a channel did."""

    def delegate(self, agent: str, task: str) -> Awaitable[JsonValue]:
        """Hand ``task`` to the mounted agent ``agent``, as a turn of its own; its reply.

        The child turn is durable like any turn: a turn of the session
        ``<this session>/<call id>``, its id made from this turn's and this call's, so a
        replay of this call joins it rather than starting another, and its committed
        steps never run again. Its events reach this turn's watchers tagged with
        ``via``. When it waits for a person, this turn waits too, on the same requests
        (answered as the child's requests say); a cancel, a replace, a reset or the
        time limit of this turn cancels it. Each call of ``delegate`` in one tool call
        starts the next child, in order.

        Returns:
            The child's final reply, or its validated ``output`` when its agent has an
            ``output_type``.

        Raises:
            FatalToolError: Called from a local (``def``) tool.
            ToolError: No such agent, delegation past the agent's
                ``max_delegation_depth``, or the child turn failed or was cancelled
                (the model reads why).
        """
        if self.delegation is None:
            raise FatalToolError(
                "delegate needs an async tool: a local (def) tool runs inside a "
                "transaction that cannot stay open while another agent works",
                turn_id=self.turn_id,
            )
        return self.delegation.delegate(agent, task)

    def progress(self, text: str) -> None:
        """Tell the person waiting how far the call got (``"Read 40 of 120 messages"``).

        Shown live (the Slack task line, the console) as an ``action.progress`` event
        and written to the process's log; never stored, never sent to the model, not
        repeated by a replay. Cheap enough to call often; safe from a local tool too.
        """
        if self.reporter is not None:
            self.reporter(text)

    def request_input(
        self,
        *,
        id: str,
        prompt: str,
        schema: dict[str, JsonValue] | None = None,
        answerers: Any = None,
        ttl: float | None = None,
    ) -> Awaitable[JsonValue]:
        """Ask a person, suspending the turn until they answer; returns their answer.

        The first call finds no answer and suspends the turn (it raises
        `InputRequired`, which is not an `Exception`: let it through). The
        resumed turn runs this tool again from the top, and this time the call
        returns the answer, so put side effects after it.

        Args:
            id: Stable within the turn: it keys the answer.
            prompt: What the person is asked.
            schema: JSON Schema the answer must match (``{"type": "boolean"}``).
            answerers: ``{"user": id}`` or ``{"policy": name, "scope": ...}``;
                by default the turn's speaker when its channel attested them.
            ttl: Seconds until the engine answers `EXPIRED` on everyone's behalf.

        Raises:
            FatalToolError: Called from a local (``def``) tool: its transaction
                cannot stay open while a person decides.
            ToolError: No answerer was named and the speaker is not attested, or
                the schema is invalid.
        """
        if self.inputs is None:
            raise FatalToolError(
                "request_input needs an async tool: a local (def) tool runs inside a "
                "transaction that cannot stay open while a person decides",
                turn_id=self.turn_id,
            )
        return self.inputs.ask(id=id, prompt=prompt, schema=schema, answerers=answerers, ttl=ttl)

    @property
    def store(self) -> StoreHandle:
        """The store's own connection, inside this step's transaction (local tools only).

        Raises:
            FatalToolError: The store has no transactional handle (the memory store),
                or the tool is remote and so runs outside any transaction.
        """
        if self.handle is None:
            raise FatalToolError(
                "ctx.store needs a local (def) tool on a store with a transactional "
                "handle; the memory store and async tools have none",
                turn_id=self.turn_id,
            )
        return self.handle


class Delegation(Protocol):
    """What the engine lends an async tool call to delegate to other agents."""

    async def delegate(self, agent: str, task: str) -> JsonValue:
        """Run ``task`` as a child turn of ``agent``; see `ToolContext.delegate`."""
        ...


class AnswerLookup(Protocol):
    """What the engine lends an async tool call to look up and ask for answers."""

    async def ask(
        self,
        *,
        id: str,
        prompt: str,
        schema: dict[str, JsonValue] | None,
        answerers: Any,
        ttl: float | None,
    ) -> JsonValue:
        """The stored answer to ``id``, or suspend the turn to get one."""
        ...


def idempotency_key(turn_id: str, call_id: str) -> str:
    """Derive the key a remote side effect dedupes on; the same on every replay."""
    return hashlib.sha256(f"{turn_id}\x00{call_id}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """A function the model may call, with the schema of its input."""

    name: str
    description: str
    fn: Callable[..., Any]
    is_local: bool
    """A plain ``def``: runs inside the step's transaction, exactly once."""
    input_model: type[BaseModel]
    context_param: str | None = None
    timeout: float | None = None
    """Seconds one call may run (remote tools only); past it the call's task is
    cancelled and its result is a `TimeoutError` the model sees, as if the tool raised."""
    delegates_to: str | None = None
    """The agent every call hands its task to (a tool made by `delegate_tool`)."""
    requires_approval: bool = False
    """A person approves each call before it runs (the engine asks, on the call's
    behalf, the turn's speaker by default); a call declined or left to expire does not
    run and the model is told so. Recorded with the call, so a replay keeps asking even
    in a process that declares the tool without it."""

    @property
    def spec(self) -> ToolSpec:
        """How the model sees this tool."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=self.input_model.model_json_schema(),
        )

    def parse_input(self, raw: dict[str, JsonValue]) -> dict[str, Any]:
        """Validate the model's input into keyword arguments.

        Raises:
            ToolError: The input does not match the schema; the message names the fields.
        """
        try:
            parsed = self.input_model.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ToolError(f"invalid input for {self.name}: {problems}") from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    def call(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        """Call ``fn`` with the parsed arguments (and the context, when it takes one)."""
        if self.context_param is not None:
            arguments = {**arguments, self.context_param: ctx}
        return self.fn(**arguments)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    requires_approval: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    requires_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool from a function; its input schema comes from the type hints.

    A parameter annotated `ToolContext` receives the call's context and is not
    part of the schema. The description defaults to the docstring. ``timeout``
    (seconds, async tools only) bounds one call: past it the call is cancelled and
    the model gets a `TimeoutError` result, like a tool that raised.
    ``requires_approval`` makes each call wait for a person's yes before it runs
    (see `Tool.requires_approval`); it works for a plain ``def`` too, since the engine
    asks before the call's transaction opens.

    Example:
        >>> @tool
        ... def create_order(item: str, ctx: ToolContext) -> dict[str, str]:
        ...     '''Place an order for an item.'''
        ...     ctx.store.execute("insert into orders (item) values (?)", [item])
        ...     return {"item": item}

    Raises:
        ConfigError: The function cannot be a tool (an async generator, a
            parameter without a type hint, no description), or ``timeout`` is not
            above 0 or is given to a plain ``def`` (it runs inside a transaction on
            the store's thread, which cannot be stopped).
    """

    def declare(fn: Callable[..., Any]) -> Tool:
        declared = _declare(fn, name=name, description=description, timeout=timeout)
        return dataclasses.replace(declared, requires_approval=requires_approval)

    return declare(fn) if fn is not None else declare


def _declare(
    fn: Callable[..., Any], *, name: str | None, description: str | None, timeout: float | None
) -> Tool:
    tool_name = name or fn.__name__
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise ConfigError(f"tool {tool_name}: a generator cannot be a tool")
    is_local = not inspect.iscoroutinefunction(fn)
    if timeout is not None and not timeout > 0:
        raise ConfigError(f"tool {tool_name}: timeout must be above 0")
    if timeout is not None and is_local:
        raise ConfigError(
            f"tool {tool_name}: a timeout needs an async tool; a plain def runs inside a "
            "transaction on the store's thread, which cannot be stopped"
        )
    text = description or inspect.getdoc(fn)
    if not text:
        raise ConfigError(f"tool {tool_name}: give it a description or a docstring")
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context_param = None
    for param in inspect.signature(fn).parameters.values():
        hint = hints.get(param.name)
        if _is_context(hint):
            context_param = param.name
            continue
        if hint is None:
            raise ConfigError(f"tool {tool_name}: parameter {param.name!r} needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hint, default)
    input_model = create_model(f"{tool_name}_input", **fields)
    return Tool(
        name=tool_name,
        description=text,
        fn=fn,
        is_local=is_local,
        input_model=input_model,
        context_param=context_param,
        timeout=timeout,
    )


def _is_context(hint: Any) -> bool:
    """``ToolContext``, or an optional one: the context, not a field of the input."""
    return hint is ToolContext or ToolContext in typing.get_args(hint)


def describe_error(exc: BaseException) -> str:
    """Turn what a tool raised into what the model reads: class and message, no traceback."""
    try:
        message = str(exc)
    except Exception:
        message = ""  # a broken __str__ must not turn a tool error into a turn failure
    if type(exc) is Exception and message:
        text = message
    elif message:
        text = f"{type(exc).__name__}: {message}"
    else:
        text = type(exc).__name__
    return text[:ERROR_TEXT_LIMIT]


def jsonable_result(tool: Tool, value: Any) -> JsonValue:
    """Make a tool's return value storable, or fail the call naming the tool.

    Raises:
        ToolError: The value is an awaitable (a ``def`` that should be
            ``async def``) or cannot be turned into JSON.
    """
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited by design; closing keeps Python from warning
        raise ToolError(
            f"tool {tool.name} is a plain def that returned an awaitable; declare it async def"
        )
    try:
        # through JSON and back, so the live copy equals what the store keeps (NaN -> null)
        return from_json(to_json(value, inf_nan_mode="null"))
    except (PydanticSerializationError, ValueError) as exc:
        raise ToolError(f"tool {tool.name} returned a value that is not JSON: {exc}") from None
