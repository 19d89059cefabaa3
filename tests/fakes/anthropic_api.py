"""A fake of Anthropic's Messages API, served over real HTTP to the real SDK.

Point the real client at it::

    async with FakeAnthropic() as api:
        api.queue(Fault.overloaded(), Reply.text("hello"))
        async with AsyncAnthropic(base_url=api.base_url, api_key="test-key") as client:
            ...

It answers from a queue of responses, then from a script, then with "ok"; it
refuses requests the real API would refuse (so adapter bugs show as 400s) and
simulates prompt caching so usage shows cache reads and writes.

Each model has its own rules (``anthropic_models``, applied by
``anthropic_rules``): its thinking types, display values, effort levels,
sampling, forced tool choice, prefill and max_tokens; an unknown model is a
404. Thinking blocks are signed as the API signs them, in effect: the fake
remembers each one it sent and refuses one it never sent, one that was
changed, or one bound to another conversation, and drops one the model cannot
read (``anthropic_thinking``; ``FakeAnthropic.dropped_thinking`` lists the
drops). A reply's thinking comes back as the request's display asks: under
"omitted", each thinking block is sent with an empty text and no
thinking_delta. ``GET /v1/models`` and ``/v1/models/{id}`` answer from the
same table.

What the SDK (anthropic 2.14 on httpx2) raises, seen through
``client.messages.stream(...)``:

* ``Cut(clean=False)``: ``httpx2.RemoteProtocolError`` ("peer closed connection
  without sending complete message body (incomplete chunked read)"), raised
  while iterating and never retried, since the request itself had succeeded.
  Before 2.17 the SDK raised it raw; since 2.17 it wraps it in
  ``anthropic.APIConnectionError`` (the cause kept). (Without streaming,
  the body is read inside the SDK's retry loop: ``anthropic.APIConnectionError``,
  retried like any connection error.)
* ``Cut(clean=True)``: nothing; the stream just ends, ``get_final_message()``
  returns the partial snapshot and no ``message_stop`` event is ever seen.
* ``StreamError``: ``anthropic.APIStatusError`` itself (not a subclass such as
  ``OverloadedError``): the SDK picks the class by HTTP status, which was
  already 200. ``err.status_code == 200``; ``err.type`` is the error type sent
  (e.g. ``"overloaded_error"``); ``err.body`` is the event's JSON. Not retried.
* A ``Fault`` is an ordinary HTTP error: ``OverloadedError`` (529),
  ``RateLimitError`` (429), ``InternalServerError`` (500), ``AuthenticationError``
  (401), ``BadRequestError`` (400); the SDK retries 408/409/429/5xx itself.

SDK 2.x sends the API key as ``Authorization: Bearer <key>``, not ``x-api-key``;
the fake accepts either.

The fake's own simplifications are documented where they are made: the token
measure and cache lookback in ``_PromptCache``, the thinking rule in
``_check_thinking``, the non-streaming meaning of the stream-only responses in
``FakeAnthropic._answer_whole``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeAlias

from aiohttp import web

from tests.fakes.anthropic_files import (
    check_file_block,
    check_request_files,
    check_request_size,
)
from tests.fakes.anthropic_models import MODELS, ModelRules, find_model, model_info
from tests.fakes.anthropic_models_api import models_page
from tests.fakes.anthropic_rules import (
    BETA_BLOCK_BINDING,
    Refused,
    check_model_rules,
    reply_display,
)
from tests.fakes.anthropic_thinking import Screening, ThinkingLedger, displayed
from tests.fakes.local_server import serve_locally

__all__ = [
    "Cut",
    "FakeAnthropic",
    "Fault",
    "Hang",
    "Reply",
    "Response",
    "Script",
    "StreamError",
]

Json: TypeAlias = dict[str, Any]

MAX_CACHE_BREAKPOINTS = 4
CACHE_LOOKBACK = 20
"""How many element positions before a breakpoint the real API also checks for a hit."""

_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})

_STATUS_OF_ERROR = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


# --- what to answer ------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A complete answer: streamed as SSE events, or sent whole when not streaming."""

    content: list[Json]
    stop_reason: str = "end_turn"
    text_chunk: int = 4
    json_chunk: int = 5
    delay: float = 0.0

    @classmethod
    def text(cls, text: str, stop_reason: str = "end_turn") -> Reply:
        return cls([{"type": "text", "text": text}], stop_reason=stop_reason)

    @classmethod
    def tool(cls, name: str, input: Json, id: str | None = None, text: str = "") -> Reply:
        call = {"type": "tool_use", "id": id or _new_id("toolu"), "name": name, "input": input}
        content: list[Json] = [{"type": "text", "text": text}, call] if text else [call]
        return cls(content, stop_reason="tool_use")


@dataclass(frozen=True)
class Fault:
    """An HTTP error response, as the API sends before any event."""

    status: int
    error_type: str
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def overloaded(cls) -> Fault:
        return cls(529, "overloaded_error", "Overloaded")

    @classmethod
    def rate_limited(cls, retry_after: float) -> Fault:
        return cls(429, "rate_limit_error", "Rate limited", {"retry-after": str(retry_after)})

    @classmethod
    def server_error(cls) -> Fault:
        return cls(500, "api_error", "Internal server error")

    @classmethod
    def unauthorized(cls) -> Fault:
        return cls(401, "authentication_error", "invalid x-api-key")

    @classmethod
    def invalid(cls, message: str) -> Fault:
        return cls(400, "invalid_request_error", message)


@dataclass(frozen=True)
class Cut:
    """The reply's first events, then the connection drops (or, clean, the body just ends).

    Events count as streamed: message_start, ping, then for each block its
    content_block_start, deltas and content_block_stop, then message_delta and
    message_stop. So ``Cut(Reply.text("Hello"), 4)`` sends "Hell" and breaks.
    """

    reply: Reply
    after_events: int
    clean: bool = False


@dataclass(frozen=True)
class StreamError:
    """The reply's first events, then an ``error`` event, as when the API overloads mid-stream."""

    reply: Reply
    after_events: int
    error_type: str = "overloaded_error"


@dataclass(frozen=True)
class Hang:
    """The reply's first events, then nothing until ``release`` is set or the server stops."""

    reply: Reply
    after_events: int
    release: asyncio.Event | None = None


Response: TypeAlias = Reply | Fault | Cut | StreamError | Hang
_Answer: TypeAlias = Reply | Cut | StreamError | Hang
"""A response that gets past the status line: one with a body to send."""
Script: TypeAlias = Callable[[Json], Response | Awaitable[Response]]


_Rejected = Refused
"""The request is one the real API would refuse (shared with the rules modules)."""


def _fault_of(rejected: Refused) -> Fault:
    return Fault(rejected.status, rejected.error_type, rejected.message)


class _ServerClosing(Exception):
    """The fake is shutting down while a response is still being streamed."""


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


# --- request checks ------------------------------------------------------------------


def _blocks(content: Any) -> list[Any]:
    """Content as a list of blocks: the API takes a bare string as one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return content
    raise _Rejected(f"content must be a string or a list of blocks, got {type(content).__name__}")


def _block_type(block: Any) -> str:
    return str(block.get("type")) if isinstance(block, dict) else ""


def _check_request(
    body: Json,
    *,
    counting: bool = False,
    betas: frozenset[str] = frozenset(),
    hidden: frozenset[str] = frozenset(),
) -> ModelRules:
    """Refuse what the real API refuses, and return the model the request names.

    ``counting`` is count_tokens, which has no max_tokens; ``betas`` the
    ``anthropic-beta`` header's values; ``hidden`` models that are a 404 to this
    key. The shape is checked first, then the model's own rules.
    """
    required = ("model", "messages") if counting else ("model", "max_tokens", "messages")
    for name in required:
        if name not in body:
            raise _Rejected(f"{name}: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise _Rejected("model: must be a non-empty string")
    if not counting and (not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1):
        raise _Rejected("max_tokens: must be an integer of at least 1")
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise _Rejected("messages: at least one message is required")
    _check_system(body.get("system"))
    _check_tools(body.get("tools"))
    _check_roles(messages)
    for index, message in enumerate(messages):
        _check_content(index, message, is_last=index == len(messages) - 1)
    check_request_files(messages)
    _check_tool_pairs(messages)
    _check_cache_controls(body)
    model = find_model(body["model"])
    if model is None or model.id in hidden:
        # not documented; what the API is seen to answer for an unknown or retired id
        raise _Rejected(f"model: {body['model']}", 404, "not_found_error")
    check_model_rules(body, model, counting=counting, betas=betas)
    _check_thinking(body)
    return model


_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_PROPERTY_KEY = re.compile(r"[a-zA-Z0-9_.-]{1,64}")


def _check_tools(tools: Any) -> None:
    """A custom tool's name and input schema, as the API's own validation words them."""
    names: set[str] = set()
    for index, definition in enumerate(tools or []):
        if not isinstance(definition, dict) or definition.get("type") not in (None, "custom"):
            continue  # the server tools have shapes of their own
        where = f"tools.{index}.custom"
        name = definition.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise _Rejected(f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        schema = definition.get("input_schema")
        if not isinstance(schema, dict):
            raise _Rejected(f"{where}.input_schema: Field required")
        if schema.get("type") != "object":
            raise _Rejected(f"{where}.input_schema.type: Input should be 'object'")
        if not all(_PROPERTY_KEY.fullmatch(key) for key in schema.get("properties") or {}):
            raise _Rejected(
                f"{where}.input_schema.properties: Property keys should match pattern "
                "'^[a-zA-Z0-9_.-]{1,64}$'"
            )
        if name in names:
            raise _Rejected("tools: Tool names must be unique.")
        names.add(name)


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    for index, block in enumerate(_blocks(system)):
        if _block_type(block) != "text":
            raise _Rejected(f"system.{index}.type: system blocks must be text blocks")
        _check_text(f"system.{index}", block)


def _check_roles(messages: list[Any]) -> None:
    previous = None
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise _Rejected(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        if index == 0 and role != "user":
            raise _Rejected('messages: first message must use the "user" role')
        if role == previous:
            raise _Rejected(
                f'messages.{index}: roles must alternate between "user" and "assistant", '
                f'but found multiple "{role}" roles in a row'
            )
        previous = role


def _check_content(index: int, message: Json, *, is_last: bool) -> None:
    content = message.get("content")
    if not isinstance(content, str | list):
        raise _Rejected(f"messages.{index}.content: must be a string or a list of content blocks")
    blocks = _blocks(content)
    # Only an assistant prefill may be empty: the model continues from nothing.
    prefill = is_last and message["role"] == "assistant"
    if not blocks or content == "":
        if prefill:
            return
        raise _Rejected(
            f"messages.{index}: all messages must have non-empty content "
            "except for the optional final assistant message"
        )
    for position, block in enumerate(blocks):
        where = f"messages.{index}.content.{position}"
        if not _block_type(block):
            raise _Rejected(f"{where}: each content block must be an object with a type")
        if _block_type(block) == "text":
            _check_text(where, block)
        if _block_type(block) == "tool_result":
            _check_tool_result_content(where, block)
        if _block_type(block) in ("image", "document"):
            check_file_block(where, block)
        if _block_type(block) == "thinking" and not block.get("signature"):
            raise _Rejected(f"{where}.signature: thinking blocks must carry a non-empty signature")
    last = blocks[-1]
    if prefill and _block_type(last) == "text" and last["text"] != last["text"].rstrip():
        raise _Rejected(
            f"messages.{index}: final assistant content cannot end with trailing whitespace"
        )


def _check_text(where: str, block: Json) -> None:
    text = block.get("text")
    if not isinstance(text, str) or not text:
        raise _Rejected(f"{where}.text: text content blocks must be non-empty")
    if not text.strip():
        raise _Rejected(f"{where}.text: text content blocks must contain non-whitespace text")


def _check_tool_result_content(where: str, block: Json) -> None:
    inner = block.get("content")
    if isinstance(inner, list):
        for position, part in enumerate(inner):
            if _block_type(part) == "text":
                _check_text(f"{where}.content.{position}", part)


def _ids(message: Json, block_type: str, key: str) -> list[str]:
    return [b.get(key) for b in _blocks(message["content"]) if _block_type(b) == block_type]


def _check_tool_pairs(messages: list[Json]) -> None:
    """Each tool call is answered in the very next message, results first, and nothing else."""
    for index, message in enumerate(messages):
        wrong = "tool_result" if message["role"] == "assistant" else "tool_use"
        for position, block in enumerate(_blocks(message["content"])):
            if _block_type(block) == wrong:
                raise _Rejected(
                    f"messages.{index}.content.{position}: {wrong} blocks are not allowed "
                    f"in {message['role']} messages"
                )
        if message["role"] == "assistant":
            _check_calls_answered(index, messages)
        else:
            _check_results_answer(index, messages)


def _check_calls_answered(index: int, messages: list[Json]) -> None:
    calls = _ids(messages[index], "tool_use", "id")
    if not calls:
        return
    # A prefill may end the request, but not with calls: nothing could answer them.
    following = messages[index + 1] if index + 1 < len(messages) else None
    answered = set(_ids(following, "tool_result", "tool_use_id")) if following else set()
    missing = [call for call in calls if call not in answered]
    if missing:
        raise _Rejected(
            f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(map(str, missing))}. Each `tool_use` block must "
            "have a corresponding `tool_result` block in the next message."
        )


def _check_results_answer(index: int, messages: list[Json]) -> None:
    calls = set(_ids(messages[index - 1], "tool_use", "id")) if index else set()
    seen_other = False
    for position, block in enumerate(_blocks(messages[index]["content"])):
        where = f"messages.{index}.content.{position}"
        if _block_type(block) != "tool_result":
            seen_other = True
            continue
        if seen_other:
            raise _Rejected(f"{where}: tool_result blocks must come before any other content")
        if block.get("tool_use_id") not in calls:
            raise _Rejected(
                f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{block.get('tool_use_id')}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )


def _cacheable_elements(body: Json) -> list[tuple[str, Any]]:
    """Where cache_control may sit, named as the API's error messages name them."""
    elements: list[tuple[str, Any]] = [
        (f"tools.{i}", tool) for i, tool in enumerate(body.get("tools") or [])
    ]
    system = body.get("system")
    if isinstance(system, list):
        elements += [(f"system.{i}", block) for i, block in enumerate(system)]
    for index, message in enumerate(body["messages"]):
        blocks = _blocks(message["content"])
        elements += [(f"messages.{index}.content.{j}", block) for j, block in enumerate(blocks)]
    return elements


def _check_cache_controls(body: Json) -> None:
    """At most four breakpoints; the request-level cache_control takes one of them too."""
    marked = [
        (where, block)
        for where, block in _cacheable_elements(body)
        if isinstance(block, dict) and block.get("cache_control")
    ]
    for where, block in marked:
        if _block_type(block) in _THINKING_TYPES:
            raise _Rejected(
                f"{where}.cache_control: cache_control cannot be set on thinking blocks"
            )
    found = len(marked) + (1 if body.get("cache_control") else 0)
    if found > MAX_CACHE_BREAKPOINTS:
        raise _Rejected(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )


def _check_thinking(body: Json) -> None:
    """With manual thinking on, a tool loop must begin with the thinking that led to it.

    Only reached where the model takes ``enabled`` at all: the model's rules
    refuse it everywhere else first.

    Simplified from the real rule: the trailing tool loop is every message after
    the last user message that is not only tool results. Under
    ``{"type": "enabled"}`` (which thinks on every reply) its first assistant
    message must begin with a thinking or redacted_thinking block when the loop
    is still waiting on tool results: a client that dropped the block, or began
    the loop with thinking off, is refused. Adaptive thinking may skip thinking,
    so it is not checked.
    """
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return
    messages = body["messages"]
    loop = messages[_last_human_turn(messages) + 1 :]
    replies = [(i, m) for i, m in enumerate(loop) if m["role"] == "assistant"]
    if not replies or messages[-1]["role"] != "user":
        return
    offset, first = replies[0]
    blocks = _blocks(first["content"])
    if not blocks or _block_type(blocks[0]) not in _THINKING_TYPES:
        index = len(messages) - len(loop) + offset
        found = _block_type(blocks[0]) if blocks else "nothing"
        raise _Rejected(
            f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, "
            f"but found `{found}`. When `thinking` is enabled, a final `assistant` message "
            "must start with a thinking block."
        )


def _last_human_turn(messages: list[Json]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] == "user" and any(
            _block_type(b) != "tool_result" for b in _blocks(message["content"])
        ):
            return index
    return -1


# --- token measure and prompt cache --------------------------------------------------


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _tokens(value: Any) -> int:
    """A deterministic stand-in for the tokenizer: four characters of canonical JSON a token."""
    return math.ceil(len(_canonical(_without_cache_control(value))) / 4)


@dataclass(frozen=True)
class _Prefix:
    """The request's prompt as a chain of elements: cumulative hash and size at each one."""

    hashes: list[str]
    tokens: list[int]
    breakpoints: list[int]

    @property
    def total(self) -> int:
        return self.tokens[-1] if self.tokens else 0


def _prompt_elements(body: Json) -> list[tuple[str, Any]]:
    """Tools, then system blocks, then message blocks, each tagged with where it sits.

    The tag (``tool``, ``system`` or the role) is hashed along with the block so
    the same text as a user's and as the assistant's makes different prefixes.
    """
    elements: list[tuple[str, Any]] = [("tool", tool) for tool in body.get("tools") or []]
    system = body.get("system")
    if system:
        elements += [("system", block) for block in _blocks(system)]
    for message in body["messages"]:
        elements += [(message["role"], block) for block in _blocks(message["content"])]
    return elements


def _measure(body: Json, model: str = "") -> _Prefix:
    """The prompt's size and prefix hashes; ``model`` keys the hashes (each model's cache)."""
    elements = _prompt_elements(body)
    running = hashlib.sha256(model.encode())
    hashes: list[str] = []
    tokens: list[int] = []
    breakpoints: list[int] = []
    size = 0
    for position, (tag, block) in enumerate(elements):
        running.update(_canonical([tag, _without_cache_control(block)]).encode() + b"\n")
        size += _tokens(block)
        hashes.append(running.hexdigest())
        tokens.append(size)
        if isinstance(block, dict) and block.get("cache_control"):
            breakpoints.append(position)
    # The request-level cache_control caches the whole prompt, as a mark on its last block would.
    last = len(elements) - 1
    if body.get("cache_control") and elements and last not in breakpoints:
        breakpoints.append(last)
    return _Prefix(hashes, tokens, breakpoints)


class _PromptCache:
    """Prefixes cached by earlier requests, read and written as the real API would.

    Each breakpoint (an element carrying cache_control) looks for a cached prefix
    ending at itself or at any of the ``CACHE_LOOKBACK`` positions before it; the
    longest hit is read. Only the prefix up to the last breakpoint is written, and
    only when it is at least ``min_tokens`` long ("model": the model's own
    minimum). Each model has its own cache. Unlike the real API, the cache never
    expires and ignores tool_choice and thinking settings.
    """

    def __init__(self, min_tokens: int | Literal["model"]) -> None:
        self._min_tokens = min_tokens
        self._cached: dict[str, int] = {}

    def usage(self, body: Json, model: ModelRules) -> dict[str, int]:
        prefix = _measure(body, model.id)
        least = model.min_cache_tokens if self._min_tokens == "model" else self._min_tokens
        read = self._longest_hit(prefix)
        created = 0
        if prefix.breakpoints:
            last = prefix.breakpoints[-1]
            fresh = prefix.hashes[last] not in self._cached
            if fresh and prefix.tokens[last] >= least:
                created = prefix.tokens[last] - read
        for position in prefix.breakpoints:
            if prefix.tokens[position] >= least:
                self._cached[prefix.hashes[position]] = prefix.tokens[position]
        return {
            "input_tokens": prefix.total - read - created,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }

    def _longest_hit(self, prefix: _Prefix) -> int:
        hits = [
            prefix.tokens[position]
            for breakpoint in prefix.breakpoints
            for position in range(max(0, breakpoint - CACHE_LOOKBACK), breakpoint + 1)
            if prefix.hashes[position] in self._cached
        ]
        return max(hits, default=0)


# --- the wire format of an answer ----------------------------------------------------


Event: TypeAlias = tuple[str, Json]


def _output_tokens(reply: Reply) -> int:
    return max(1, sum(_tokens(block) for block in reply.content))


def _message(
    reply: Reply, model: str, usage: dict[str, int], *, whole: bool, extra: Json | None = None
) -> Json:
    """The Message object: complete, or as message_start opens it (empty, not yet stopped).

    ``extra`` holds top-level fields only some requests get (``input_transformations``).
    """
    return {
        **(extra or {}),
        "id": _new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": reply.content if whole else [],
        "stop_reason": reply.stop_reason if whole else None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": _output_tokens(reply) if whole else 1},
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))]


def _delta(index: int, delta: Json) -> Event:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}


def _block_events(index: int, block: Json, reply: Reply) -> list[Event]:
    kind = _block_type(block)
    deltas: list[Event] = []
    opening = block
    if kind == "text":
        opening = {"type": "text", "text": ""}
        deltas = [
            _delta(index, {"type": "text_delta", "text": piece})
            for piece in _pieces(block["text"], reply.text_chunk)
        ]
    elif kind == "tool_use":
        opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [
            _delta(index, {"type": "input_json_delta", "partial_json": piece})
            for piece in _pieces(json.dumps(block["input"]), reply.json_chunk)
        ]
    elif kind == "thinking":
        opening = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            _delta(index, {"type": "thinking_delta", "thinking": piece})
            for piece in _pieces(block["thinking"], reply.text_chunk)
        ]
        deltas.append(_delta(index, {"type": "signature_delta", "signature": block["signature"]}))
    start = {"type": "content_block_start", "index": index, "content_block": opening}
    stop = {"type": "content_block_stop", "index": index}
    return [("content_block_start", start), *deltas, ("content_block_stop", stop)]


def _stream_events(
    reply: Reply, model: str, usage: dict[str, int], extra: Json | None = None
) -> list[Event]:
    """Every SSE event of a streamed reply, in the order the API sends them."""
    opened = _message(reply, model, usage, whole=False, extra=extra)
    start = {"type": "message_start", "message": opened}
    events: list[Event] = [("message_start", start), ("ping", {"type": "ping"})]
    for index, block in enumerate(reply.content):
        events += _block_events(index, block, reply)
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": _output_tokens(reply)},
    }
    return [*events, ("message_delta", end), ("message_stop", {"type": "message_stop"})]


def _sse(event: Event) -> bytes:
    name, data = event
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _error_body(error_type: str, message: str, request_id: str) -> Json:
    """The errors page's shape; the same id goes in the ``request-id`` header."""
    error = {"type": error_type, "message": message}
    return {"type": "error", "error": error, "request_id": request_id}


def _signed_blocks(events: Sequence[Event], reply: Reply) -> list[Json]:
    """The thinking blocks whose signature (or redacted data) these events deliver."""
    if not any(_block_type(b) in _THINKING_TYPES for b in reply.content):
        return []
    indexes = [
        data["index"]
        for name, data in events
        if (name == "content_block_delta" and data["delta"]["type"] == "signature_delta")
        or (name == "content_block_start" and data["content_block"]["type"] == "redacted_thinking")
    ]
    return [reply.content[i] for i in indexes]


def _shown(response: _Answer, display: str) -> _Answer:
    """The response with its reply's thinking as ``display`` sends it."""
    reply = response if isinstance(response, Reply) else response.reply
    content = displayed(reply.content, display)
    if content is reply.content:
        return response
    shown = dataclasses.replace(reply, content=content)
    return shown if isinstance(response, Reply) else dataclasses.replace(response, reply=shown)


@dataclass(frozen=True)
class _Exchange:
    """What answering one request needs to know besides the response."""

    model: str
    """The model as the request named it, echoed in the reply."""
    usage: dict[str, int]
    issue: Callable[[list[Json]], None]
    """Record thinking blocks as sent, before the events that carry them go out."""
    extra: Json | None = None


# --- the server ----------------------------------------------------------------------


class FakeAnthropic:
    """The Messages API on 127.0.0.1, for as long as the ``async with`` lasts.

    ``requests`` and ``request_headers`` hold every POST /v1/messages (refused
    ones too), ``count_requests`` every count_tokens body, ``usages`` the usage of
    each answered request. ``hung`` is set when a Hang starts waiting; it stays
    set, so clear it before waiting for a second one. ``abandoned`` counts the
    hung streams whose client closed the connection (an aborted request).

    ``dropped_thinking`` lists the thinking blocks answered requests sent back
    that the model could not read, each as ``{"path": "messages.i.content.j",
    "reason": "model_binding_mismatch"}`` (or ``"prefix_binding_mismatch"`` under
    ``block_binding``'s "drop_block"). ``models_requests`` holds every Models API
    request as ``{"path", "query"}`` (a repeated query key keeps its first value).

    ``min_cache_tokens`` is the shortest prefix the cache writes: 0 by default,
    so short test prompts cache; ``"model"`` takes each model's real minimum.
    ``unavailable_models`` are ids (or aliases) this key may not use: a 404 on
    the Messages and Models APIs alike, and left out of the list.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        api_key: str = "test-key",
        min_cache_tokens: int | Literal["model"] = 0,
        unavailable_models: Iterable[str] = (),
    ) -> None:
        self.requests: list[Json] = []
        self.request_headers: list[dict[str, str]] = []
        self.count_requests: list[Json] = []
        self.usages: list[dict[str, int]] = []
        self.dropped_thinking: list[dict[str, str]] = []
        self.models_requests: list[Json] = []
        self.hung = asyncio.Event()
        self.abandoned = 0
        self._script = script
        self._api_key = api_key
        self._queue: collections.deque[Response] = collections.deque()
        self._cache = _PromptCache(min_cache_tokens)
        self._ledger = ThinkingLedger()
        self._hidden = frozenset(_canonical_id(name) for name in unavailable_models)
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("FakeAnthropic is not running; use it as `async with`")
        return self._base_url

    def queue(self, *responses: Response) -> None:
        """Answer the next requests with these, in order; refused requests take none."""
        self._queue.extend(responses)

    async def __aenter__(self) -> FakeAnthropic:
        # room for a body over the API's 32 MB, so that the fake refuses it as the API does
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._on_messages)
        app.router.add_post("/v1/messages/count_tokens", self._on_count_tokens)
        app.router.add_get("/v1/models", self._on_models)
        app.router.add_get("/v1/models/{model_id}", self._on_model)
        # by shutdown every Hang has been let go, so streams end at once
        self._runner, self._base_url = await serve_locally(app)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- handlers

    async def _on_messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request, self.requests)
        self.request_headers.append({k.lower(): v for k, v in request.headers.items()})
        betas = _betas(request)
        try:
            check_request_size(request.content_length)
            self._check_headers(request)
            model = _check_request(body, betas=betas, hidden=self._hidden)
            screening = self._screen(body, model, betas)
        except _Rejected as rejected:
            return _fault_response(_fault_of(rejected))
        response = await self._next_response(body)
        if isinstance(response, Fault):
            return _fault_response(response)
        self.dropped_thinking += screening.dropped
        usage = self._cache.usage(screening.body, model)
        self.usages.append(usage)
        # the binding beta reports drops in the reply; without it they are silent
        reported = BETA_BLOCK_BINDING in betas
        extra = {"input_transformations": _transformations(screening)} if reported else None
        issue = functools.partial(self._issue, model=model, screening=screening)
        exchange = _Exchange(body["model"], usage, issue, extra)
        response = _shown(response, reply_display(body, model))
        if body.get("stream") is True:
            return await self._answer_stream(request, response, exchange)
        return await self._answer_whole(request, response, exchange)

    async def _on_count_tokens(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request, self.count_requests)
        betas = _betas(request)
        try:
            self._check_headers(request)
            model = _check_request(body, counting=True, betas=betas, hidden=self._hidden)
            # "The token counting endpoint runs the same check and returns the same 400"
            screening = self._screen(body, model, betas)
        except _Rejected as rejected:
            return _fault_response(_fault_of(rejected))
        return _json_response({"input_tokens": _measure(screening.body).total})

    async def _on_model(self, request: web.Request) -> web.StreamResponse:
        self._record_models(request)
        try:
            self._check_headers(request, has_body=False)
            model = self._available(request.match_info["model_id"])
        except _Rejected as rejected:
            return _fault_response(_fault_of(rejected))
        return _json_response(model_info(model))

    async def _on_models(self, request: web.Request) -> web.StreamResponse:
        self._record_models(request)
        try:
            self._check_headers(request, has_body=False)
            page = models_page([m for m in MODELS if m.id not in self._hidden], request.query)
        except _Rejected as rejected:
            return _fault_response(_fault_of(rejected))
        return _json_response(page)

    async def _record(self, request: web.Request, into: list[Json]) -> Json:
        """The body, appended to ``into`` before any check so refused requests show too."""
        text = await request.text()
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            body = {"_unparsed": text}
        into.append(body)
        return body

    def _record_models(self, request: web.Request) -> None:
        self.models_requests.append({"path": request.path, "query": dict(request.query)})

    def _check_headers(self, request: web.Request, *, has_body: bool = True) -> None:
        # Never echo the key that was sent: error messages end up in logs.
        if _sent_key(request) != self._api_key:
            raise _Rejected("invalid x-api-key", 401, "authentication_error")
        if not request.headers.get("anthropic-version"):
            raise _Rejected("anthropic-version: header is required")
        if has_body and request.content_type != "application/json":
            raise _Rejected("the request body must be JSON")

    def _available(self, model_id: str) -> ModelRules:
        model = find_model(model_id)
        if model is None or model.id in self._hidden:
            # not documented for the Models API; the Messages API's 404 text
            raise _Rejected(f"model: {model_id}", 404, "not_found_error")
        return model

    def _screen(self, body: Json, model: ModelRules, betas: frozenset[str]) -> Screening:
        thinking = body.get("thinking")
        binding = thinking.get("block_binding") if isinstance(thinking, dict) else None
        drop = (
            BETA_BLOCK_BINDING in betas
            and isinstance(binding, dict)
            and binding.get("prefix_mismatch_behavior") == "drop_block"
        )
        return self._ledger.screen(body, model, drop_prefix_mismatch=drop)

    def _issue(self, blocks: list[Json], model: ModelRules, screening: Screening) -> None:
        if blocks:
            self._ledger.issue(blocks, model, screening.prefix())

    async def _next_response(self, body: Json) -> Response:
        if self._queue:
            return self._queue.popleft()
        if self._script is None:
            return Reply.text("ok")
        answer = self._script(body)
        return await answer if inspect.isawaitable(answer) else answer

    # --- answers

    async def _answer_whole(
        self, request: web.Request, response: _Answer, exchange: _Exchange
    ) -> web.StreamResponse:
        """A non-streaming answer; the stream-only responses get their nearest meaning.

        A Cut sends half the JSON and drops the connection (``clean`` is moot
        without events); a StreamError becomes the HTTP error of its type; a Hang
        waits for its release, then answers in full.
        """
        if isinstance(response, StreamError):
            status = _STATUS_OF_ERROR.get(response.error_type, 500)
            return _fault_response(Fault(status, response.error_type, "Mid-request failure"))
        reply = response if isinstance(response, Reply) else response.reply
        message = _message(reply, exchange.model, exchange.usage, whole=True, extra=exchange.extra)
        payload = json.dumps(message).encode()
        if not isinstance(response, Cut):
            # half a JSON body delivers no block: only a whole answer signs its blocks
            exchange.issue([b for b in reply.content if _block_type(b) in _THINKING_TYPES])
        if isinstance(response, Hang):
            with contextlib.suppress(_ServerClosing, ConnectionResetError):
                await self._hang(response, request)
        if not isinstance(response, Cut):
            answer = web.Response(body=payload, content_type="application/json")
            answer.headers["request-id"] = _new_id("req")
            return answer
        out = web.StreamResponse(headers={"content-type": "application/json"})
        out.content_length = len(payload)
        with contextlib.suppress(ConnectionError):
            await out.prepare(request)
            await out.write(payload[: len(payload) // 2])
        _drop_connection(request)
        return out

    async def _answer_stream(
        self, request: web.Request, response: _Answer, exchange: _Exchange
    ) -> web.StreamResponse:
        reply = response if isinstance(response, Reply) else response.reply
        events = _stream_events(reply, exchange.model, exchange.usage, exchange.extra)
        split = len(events) if isinstance(response, Reply) else response.after_events
        out = web.StreamResponse(
            headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        out.headers["request-id"] = _new_id("req")
        try:
            await out.prepare(request)
            exchange.issue(_signed_blocks(events[:split], reply))
            await self._send(out, events[:split], reply.delay)
            await self._finish_stream(request, out, response, events[split:], exchange)
        except ConnectionError:
            pass  # the client went away (closed, or killed mid-stream): nobody left to tell
        except _ServerClosing:
            _drop_connection(request)
        return out

    async def _finish_stream(
        self,
        request: web.Request,
        out: web.StreamResponse,
        response: _Answer,
        rest: list[Event],
        exchange: _Exchange,
    ) -> None:
        if isinstance(response, Cut) and not response.clean:
            _drop_connection(request)
        elif isinstance(response, StreamError):
            message = f"{response.error_type} (fake, mid-stream)"
            request_id = out.headers["request-id"]
            await out.write(_sse(("error", _error_body(response.error_type, message, request_id))))
        elif isinstance(response, Hang):
            await self._hang(response, request)
            exchange.issue(_signed_blocks(rest, response.reply))
            await self._send(out, rest, response.reply.delay, pause_first=True)

    async def _send(
        self,
        out: web.StreamResponse,
        events: Sequence[Event],
        delay: float,
        pause_first: bool = False,
    ) -> None:
        for number, event in enumerate(events):
            if delay and (number or pause_first):
                await self._pause(delay)
            await out.write(_sse(event))

    async def _pause(self, seconds: float) -> None:
        """Sleep, but give up at once when the server stops, so shutdown stays quick."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)
        if self._closing.is_set():
            raise _ServerClosing

    async def _hang(self, hang: Hang, request: web.Request) -> None:
        self.hung.set()
        gone = asyncio.ensure_future(_client_gone(request))
        waits = [asyncio.ensure_future(self._closing.wait()), gone]
        if hang.release is not None:
            waits.append(asyncio.ensure_future(hang.release.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        if self._closing.is_set():
            raise _ServerClosing
        if gone.done() and not gone.cancelled():
            self.abandoned += 1
            raise ConnectionResetError("the client closed the connection mid-stream")


async def _client_gone(request: web.Request) -> None:
    """Return once the client has closed its connection (aiohttp drops the transport)."""
    # aiohttp offers no event for a peer that went away; its transport is all there is
    while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
        await asyncio.sleep(0.01)


def _fault_response(fault: Fault) -> web.Response:
    request_id = _new_id("req")
    body = _error_body(fault.error_type, fault.message, request_id)
    response = web.json_response(body, status=fault.status, headers=fault.headers)
    response.headers["request-id"] = request_id
    return response


def _json_response(body: Json) -> web.Response:
    response = web.json_response(body)
    response.headers["request-id"] = _new_id("req")
    return response


def _betas(request: web.Request) -> frozenset[str]:
    """The ``anthropic-beta`` values, which the SDK sends comma-separated in one header."""
    values = ",".join(request.headers.getall("anthropic-beta", []))
    return frozenset(v.strip() for v in values.split(",") if v.strip())


def _canonical_id(name: str) -> str:
    model = find_model(name)
    if model is None:
        raise ValueError(f"unavailable_models: {name!r} is not a model the fake knows")
    return model.id


def _transformations(screening: Screening) -> list[Json]:
    """The drops as the binding beta reports them in ``input_transformations``."""
    return [{"type": "thinking_dropped", **drop} for drop in screening.dropped]


def _sent_key(request: web.Request) -> str | None:
    """The API key, from ``x-api-key`` or, as SDK 2.x sends it, ``Authorization: Bearer``."""
    if "x-api-key" in request.headers:
        return request.headers["x-api-key"]
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    return credential if scheme.lower() == "bearer" else None


def _drop_connection(request: web.Request) -> None:
    """Close the socket mid-body: what was written is flushed, the chunked end never comes."""
    if request.transport is not None:
        request.transport.close()
