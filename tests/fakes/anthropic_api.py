"""A fake of Anthropic's Messages API, served over real HTTP to the real SDK.

Point the real client at it::

    async with FakeAnthropic() as api:
        api.queue(Fault.overloaded(), Reply.text("hello"))
        async with AsyncAnthropic(base_url=api.base_url, api_key="test-key") as client:
            ...

It answers from a queue of responses, then from a script, then with "ok"; it
refuses requests the real API would refuse (so adapter bugs show as 400s) and
simulates prompt caching so usage shows cache reads and writes.

What the SDK (anthropic 2.14 on httpx2) raises, seen through
``client.messages.stream(...)``:

* ``Cut(clean=False)``: ``httpx2.RemoteProtocolError`` ("peer closed connection
  without sending complete message body (incomplete chunked read)"), raised raw
  while iterating: the SDK neither wraps it in ``anthropic.APIConnectionError``
  nor retries it, since the request itself had succeeded. (Without streaming,
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
import hashlib
import inspect
import json
import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeAlias

from aiohttp import web

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


class _Rejected(Exception):
    """The request is one the real API would refuse."""

    def __init__(self, message: str, status: int = 400, error_type: str = "invalid_request_error"):
        super().__init__(message)
        self.fault = Fault(status, error_type, message)


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


def _check_request(body: Json, *, counting: bool = False) -> None:
    """Refuse what the real API refuses; ``counting`` is count_tokens, which has no max_tokens."""
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
    _check_roles(messages)
    for index, message in enumerate(messages):
        _check_content(index, message, is_last=index == len(messages) - 1)
    _check_tool_pairs(messages)
    _check_cache_controls(body)
    _check_thinking(body)


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


def _measure(body: Json) -> _Prefix:
    elements = _prompt_elements(body)
    running = hashlib.sha256()
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
    only when it is at least ``min_tokens`` long. Unlike the real API, the cache
    never expires and ignores tool_choice and thinking settings.
    """

    def __init__(self, min_tokens: int) -> None:
        self._min_tokens = min_tokens
        self._cached: dict[str, int] = {}

    def usage(self, body: Json) -> dict[str, int]:
        prefix = _measure(body)
        read = self._longest_hit(prefix)
        created = 0
        if prefix.breakpoints:
            last = prefix.breakpoints[-1]
            fresh = prefix.hashes[last] not in self._cached
            if fresh and prefix.tokens[last] >= self._min_tokens:
                created = prefix.tokens[last] - read
        for position in prefix.breakpoints:
            if prefix.tokens[position] >= self._min_tokens:
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


def _message(reply: Reply, model: str, usage: dict[str, int], *, whole: bool) -> Json:
    """The Message object: complete, or as message_start opens it (empty, not yet stopped)."""
    return {
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


def _stream_events(reply: Reply, model: str, usage: dict[str, int]) -> list[Event]:
    """Every SSE event of a streamed reply, in the order the API sends them."""
    start = {"type": "message_start", "message": _message(reply, model, usage, whole=False)}
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


def _error_body(error_type: str, message: str) -> Json:
    return {"type": "error", "error": {"type": error_type, "message": message}}


# --- the server ----------------------------------------------------------------------


class FakeAnthropic:
    """The Messages API on 127.0.0.1, for as long as the ``async with`` lasts.

    ``requests`` and ``request_headers`` hold every POST /v1/messages (refused
    ones too), ``count_requests`` every count_tokens body, ``usages`` the usage of
    each answered request. ``hung`` is set when a Hang starts waiting; it stays
    set, so clear it before waiting for a second one. ``abandoned`` counts the
    hung streams whose client closed the connection (an aborted request).
    """

    def __init__(
        self, script: Script | None = None, *, api_key: str = "test-key", min_cache_tokens: int = 0
    ) -> None:
        self.requests: list[Json] = []
        self.request_headers: list[dict[str, str]] = []
        self.count_requests: list[Json] = []
        self.usages: list[dict[str, int]] = []
        self.hung = asyncio.Event()
        self.abandoned = 0
        self._script = script
        self._api_key = api_key
        self._queue: collections.deque[Response] = collections.deque()
        self._cache = _PromptCache(min_cache_tokens)
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
        app = web.Application()
        app.router.add_post("/v1/messages", self._on_messages)
        app.router.add_post("/v1/messages/count_tokens", self._on_count_tokens)
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
        try:
            self._check_headers(request)
            _check_request(body)
        except _Rejected as rejected:
            return _fault_response(rejected.fault)
        response = await self._next_response(body)
        if isinstance(response, Fault):
            return _fault_response(response)
        usage = self._cache.usage(body)
        self.usages.append(usage)
        if body.get("stream") is True:
            return await self._answer_stream(request, response, body["model"], usage)
        return await self._answer_whole(request, response, body["model"], usage)

    async def _on_count_tokens(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request, self.count_requests)
        try:
            self._check_headers(request)
            _check_request(body, counting=True)
        except _Rejected as rejected:
            return _fault_response(rejected.fault)
        return web.json_response({"input_tokens": _measure(body).total})

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

    def _check_headers(self, request: web.Request) -> None:
        # Never echo the key that was sent: error messages end up in logs.
        if _sent_key(request) != self._api_key:
            raise _Rejected("invalid x-api-key", 401, "authentication_error")
        if not request.headers.get("anthropic-version"):
            raise _Rejected("anthropic-version: header is required")
        if request.content_type != "application/json":
            raise _Rejected("the request body must be JSON")

    async def _next_response(self, body: Json) -> Response:
        if self._queue:
            return self._queue.popleft()
        if self._script is None:
            return Reply.text("ok")
        answer = self._script(body)
        return await answer if inspect.isawaitable(answer) else answer

    # --- answers

    async def _answer_whole(
        self, request: web.Request, response: _Answer, model: str, usage: dict[str, int]
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
        payload = json.dumps(_message(reply, model, usage, whole=True)).encode()
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
        self, request: web.Request, response: _Answer, model: str, usage: dict[str, int]
    ) -> web.StreamResponse:
        reply = response if isinstance(response, Reply) else response.reply
        events = _stream_events(reply, model, usage)
        split = len(events) if isinstance(response, Reply) else response.after_events
        out = web.StreamResponse(
            headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        out.headers["request-id"] = _new_id("req")
        try:
            await out.prepare(request)
            await self._send(out, events[:split], reply.delay)
            await self._finish_stream(request, out, response, events[split:])
        except ConnectionError:
            pass  # the client went away (closed, or killed mid-stream): nobody left to tell
        except _ServerClosing:
            _drop_connection(request)
        return out

    async def _finish_stream(
        self, request: web.Request, out: web.StreamResponse, response: _Answer, rest: list[Event]
    ) -> None:
        if isinstance(response, Cut) and not response.clean:
            _drop_connection(request)
        elif isinstance(response, StreamError):
            error = _error_body(response.error_type, f"{response.error_type} (fake, mid-stream)")
            await out.write(_sse(("error", error)))
        elif isinstance(response, Hang):
            await self._hang(response, request)
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
    response = web.json_response(
        _error_body(fault.error_type, fault.message), status=fault.status, headers=fault.headers
    )
    response.headers["request-id"] = _new_id("req")
    return response


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
