"""Claude through the official ``anthropic`` SDK: the engine's real `Model`.

The only module that imports the SDK. It streams a reply, turning the SDK's
events into our deltas and its final message into a `ModelReply`, and it
translates the SDK's errors into `ModelError` once, here. Request-level faults
(429, 529, 5xx, a refused connection) are retried by the SDK itself; what the
SDK cannot retry (a stream that breaks mid-reply, an error sent inside the
stream, a deadline) comes out as a retryable `ModelError`, and the engine asks
the step again without having committed anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anthropic
import httpx2

from agent.core.messages import (
    ContentBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from agent.core.model import ModelReply, ModelRequest, ModelStreamEvent, TextDelta, ThinkingDelta
from agent.errors import ConfigError, ModelError
from agent.models.anthropic.rules import refused_by_capabilities, rules_for
from agent.models.anthropic.settings import DEFAULT_MODEL, AnthropicSettings
from agent.models.anthropic.wire import (
    ThinkingBinder,
    api_block,
    api_messages,
    api_system,
    api_tools,
    bind_thinking,
    mark_cache_points,
    message_size,
    turn_began_without_thinking,
)
from agent.models.window import ContextWindow

__all__ = ["AnthropicModel"]

log = logging.getLogger(__name__)

MAX_CONTINUATIONS = 4
"""How many times one step follows a ``pause_turn`` before it takes the reply as it is."""

_RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)
_DETAIL_LIMIT = 500

Json = dict[str, Any]


class AnthropicModel:
    """A `Model` that streams Claude's replies through ``anthropic.AsyncAnthropic``.

    Example:
        >>> model = AnthropicModel(AnthropicSettings(api_key="sk-ant-..."))
        >>> agent = Agent(name="bot", model=model, instructions="Be brief.")
    """

    def __init__(self, settings: AnthropicSettings | None = None) -> None:
        self.settings = settings or AnthropicSettings()
        self.settings.check()
        self._rules = rules_for(self.settings.model)
        self._shape = self.settings.shape()
        self._secret = self.settings.api_key
        try:
            self._client = self._new_client()
        except anthropic.AnthropicError as exc:
            # a profile or identity file the SDK found but could not use
            raise ConfigError(
                f"no usable Anthropic credentials ({exc}); set ANTHROPIC_API_KEY"
            ) from exc
        client = self._client
        if not (client.api_key or client.auth_token or client.credentials):
            raise ConfigError("no Anthropic API key: set ANTHROPIC_API_KEY")
        self._cache: Json = {"type": "ephemeral"}
        if self.settings.cache_ttl != "5m":
            self._cache["ttl"] = self.settings.cache_ttl
        self._binder = ThinkingBinder()
        self._window = (
            ContextWindow(budget=self.settings.context_budget, size=message_size)
            if self.settings.context_budget is not None
            else None
        )

    def _new_client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=self.settings.api_key,
            base_url=self.settings.base_url,
            max_retries=self.settings.max_retries,
            timeout=anthropic.Timeout(
                self.settings.read_timeout, connect=min(10.0, self.settings.read_timeout)
            ),
            middleware=[_RetryAfterCap(self.settings.max_retry_wait)],
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    async def check_access(self) -> None:
        """Ask the Models API whether this key may use the model, before any turn runs.

        A typo in the model id, a key the API refuses, a key without access to
        the model, a retired model, or a model whose live capabilities refuse the
        request this adapter would send each stop here, with a sentence naming the
        setting. Not reaching the API (or the API failing) only warns: turns may
        still work once it answers.

        Raises:
            ConfigError: The API said no.
        """
        model = self.settings.model
        try:
            client = self._client.with_options(
                max_retries=1, timeout=anthropic.Timeout(10.0, connect=5.0)
            )
            info = await client.models.retrieve(model)
        except anthropic.NotFoundError as exc:
            if not _is_api_error(exc, "not_found_error"):
                # a gateway in front of the Messages API may serve no Models API at all
                log.warning(
                    "the Models API at %s answered 404 without the API's error: cannot "
                    "check ANTHROPIC_MODEL=%s there; going on",
                    self._client.base_url,
                    model,
                )
                return
            known = "" if model == DEFAULT_MODEL else f", such as {DEFAULT_MODEL}"
            raise ConfigError(
                f"ANTHROPIC_MODEL={model} is not a model this API key can use (the Models "
                f"API does not know it): check its spelling{known}"
            ) from None
        except anthropic.AuthenticationError:
            raise ConfigError(
                "the Anthropic API refused ANTHROPIC_API_KEY (401): check the key"
            ) from None
        except anthropic.PermissionDeniedError:
            raise ConfigError(
                f"ANTHROPIC_API_KEY may not use ANTHROPIC_MODEL={model} (403): pick a model "
                "the key's organization has access to"
            ) from None
        except anthropic.APIError as exc:
            log.warning(
                "could not ask the Models API about %s (%s); going on, turns will say if "
                "the model cannot be used",
                model,
                self._error(exc),
            )
            return
        if info.lifecycle == "retired":
            raise ConfigError(f"ANTHROPIC_MODEL={model} is retired: pick a current model")
        if info.lifecycle == "deprecated":
            when = f" on {info.retires_at:%Y-%m-%d}" if info.retires_at else ""
            log.warning("ANTHROPIC_MODEL=%s is deprecated and retires%s", model, when)
        problems = refused_by_capabilities(self._shape, info.capabilities, model)
        if problems:
            raise ConfigError("; ".join(problems))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream Claude's reply to ``request``: deltas, then one `ModelReply`.

        Raises:
            ModelError: The call failed; ``retryable`` says whether asking again may help.
        """
        deadline = asyncio.get_running_loop().time() + self.settings.step_timeout
        try:
            async with asyncio.timeout_at(deadline):
                messages = await self._fitted(request)
        except TimeoutError as exc:
            raise self._late() from exc
        params, digest = self._params(request, messages)
        content: list[ContentBlock] = []
        usage = Usage()
        continuation: list[Json] = []
        # carrying on a paused reply sends it back as the last message: a prefill, which
        # the 4.6 and later models refuse, and the others only with thinking off; there
        # the reply is taken as it is
        prefill = self._rules.prefill and params["thinking"]["type"] == "disabled"
        continuations = MAX_CONTINUATIONS if prefill else 0
        for _ in range(continuations + 1):
            part = _Reply()
            async for delta in self._stream_once(params, continuation, part, deadline):
                yield delta
            content += part.blocks
            usage += part.usage
            continuation += part.raw_blocks
            if part.stop_reason != "pause_turn":
                break
        yield ModelReply(
            content=tuple(content),
            stop_reason=part.stop_reason,
            usage=usage,
            model=self.settings.model,
            prompt_digest=digest,
        )

    # -- one call ------------------------------------------------------------

    async def _stream_once(
        self, params: Json, continuation: list[Json], part: _Reply, deadline: float
    ) -> AsyncIterator[ModelStreamEvent]:
        if continuation:
            # a paused reply is sent back as the last message and the model carries on
            params = {
                **params,
                "messages": [
                    *params["messages"],
                    {"role": "assistant", "content": _as_prefill(continuation)},
                ],
            }
        try:
            async with contextlib.AsyncExitStack() as stack:
                # the deadline covers sending the request and the SDK's retries too,
                # not only the stream once it flows
                async with asyncio.timeout_at(deadline):
                    events = await stack.enter_async_context(self._client.messages.stream(**params))
                iterator = aiter(events)
                while True:
                    async with asyncio.timeout_at(deadline):
                        event = await anext(iterator, None)
                    if event is None:
                        break
                    delta = part.take(event)
                    if delta is not None:
                        yield delta
                final = events.current_message_snapshot if part.stopped else None
        except anthropic.APIError as exc:
            raise self._error(exc) from exc
        except httpx2.HTTPError as exc:
            raise ModelError(
                f"the reply stream broke: {type(exc).__name__}", retryable=True
            ) from exc
        except TimeoutError as exc:
            raise self._late() from exc
        except ValueError as exc:
            # the SDK could not parse a tool call's streamed input
            raise ModelError("the reply held malformed tool input", retryable=True) from exc
        if final is None:
            raise ModelError("the reply stream ended before the reply was complete", retryable=True)
        part.finish(final)

    def _params(self, request: ModelRequest, messages: Sequence[Message]) -> tuple[Json, str]:
        """The request's fields, and the digest of its prompt to keep with the reply."""
        bound, digest = self._bound(request, messages)
        wire = api_messages(bound)
        mark_cache_points(wire, self._cache)
        system = api_system(request.system, self._cache)
        params: Json = {
            "model": self.settings.model,
            "max_tokens": self.settings.max_tokens,
            "messages": wire,
            **self._model_fields(bound),
        }
        if system is not None:
            params["system"] = system
        if request.tools:
            params["tools"] = api_tools(request.tools, None if system else self._cache)
        return params, digest

    def _bound(
        self, request: ModelRequest, messages: Sequence[Message]
    ) -> tuple[list[Message], str]:
        return self._binder.bind(
            f"{request.agent}\x1f{request.session_id}",
            messages,
            model=self.settings.model,
            system=request.system,
            tools=request.tools,
        )

    def _model_fields(self, messages: Sequence[Message]) -> Json:
        """``thinking`` and ``output_config``, as the model takes them (`_anthropic_rules`)."""
        shape = self._shape
        thinking = shape.thinking
        if shape.manual and shape.off is not None and turn_began_without_thinking(messages):
            # manual thinking thinks on every reply: a loop begun without it began with
            # thinking off (before a restart that turned it on) and must end that way
            thinking = shape.off
        fields: Json = {"thinking": thinking}
        if shape.output_config is not None:
            fields["output_config"] = shape.output_config
        return fields

    # -- the context window --------------------------------------------------

    async def _fitted(self, request: ModelRequest) -> Sequence[Message]:
        if self._window is None:
            return request.messages
        overhead = len(request.system) + sum(
            len(t.description) + len(json.dumps(t.input_schema)) for t in request.tools
        )
        return await self._window.fit(
            f"{request.agent}\x1f{request.session_id}",
            request.messages,
            overhead=overhead,
            count=functools.partial(self._count, request),
        )

    async def _count(self, request: ModelRequest, messages: Sequence[Message]) -> int:
        # the window counts candidate cuts: worked out afresh, not remembered, so the
        # session's remembered binding stays the one its requests reuse
        bound, _ = bind_thinking(
            messages, model=self.settings.model, system=request.system, tools=request.tools
        )
        params: Json = {
            "model": self.settings.model,
            "messages": api_messages(bound),
            **self._model_fields(bound),
        }
        if request.system.strip():
            params["system"] = request.system
        if request.tools:
            params["tools"] = api_tools(request.tools, None)
        try:
            counted = await self._client.messages.count_tokens(**params)
        except anthropic.APIError as exc:
            # an estimate is better than failing the step over a count
            log.warning("token counting failed (%s); estimating instead", self._error(exc))
            return sum(message_size(m) for m in messages) // 3
        return counted.input_tokens

    # -- errors --------------------------------------------------------------

    def _error(self, exc: anthropic.APIError) -> ModelError:
        """The SDK's error as ours: a clear sentence, never the key or the request."""
        if isinstance(exc, anthropic.APITimeoutError):
            return ModelError("the model provider did not answer in time", retryable=True)
        if isinstance(exc, anthropic.APIConnectionError):
            return ModelError("could not reach the model provider", retryable=True)
        if not isinstance(exc, anthropic.APIStatusError):
            return ModelError(self._redacted(f"the model provider's answer was unreadable: {exc}"))
        kind = exc.type or "error"
        # an error sent inside a stream arrives on a 200 response
        status = exc.status_code if exc.status_code >= 400 else None
        text = f"the model provider refused the request ({status or 'stream'} {kind})"
        if exc.api_message:
            text += f": {exc.api_message[:_DETAIL_LIMIT]}"
        if isinstance(exc, anthropic.AuthenticationError):
            text += "; check ANTHROPIC_API_KEY"
        elif isinstance(exc, anthropic.PermissionDeniedError):
            text += "; the API key may not use this model"
        retryable = kind in _RETRYABLE_ERROR_TYPES or (
            status is not None and (status in (408, 409, 429) or status >= 500)
        )
        return ModelError(
            self._redacted(text), retryable=retryable, retry_after=_retry_after(exc.response)
        )

    def _late(self) -> ModelError:
        return ModelError(
            f"no complete reply within {self.settings.step_timeout:g} s", retryable=True
        )

    def _redacted(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "[redacted]")
        return text


class _RetryAfterCap(anthropic.Middleware):
    """Caps how long a ``retry-after`` makes the SDK wait before its retry.

    The SDK obeys the header however large; a provider asking for an hour
    would hold the turn that long.
    """

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    async def handle_async(self, request: Any, call_next: Any) -> Any:
        response = await call_next(request)
        headers = response.http_response.headers
        asked = "retry-after" in headers or "retry-after-ms" in headers
        wait = _retry_after(response.http_response)
        if asked:
            for name in ("retry-after-ms", "retry-after"):
                headers.pop(name, None)
            # a date we cannot read is as good as "long"
            headers["retry-after"] = (
                f"{min(wait if wait is not None else self._seconds, self._seconds):g}"
            )
        return response


class _Reply:
    """One streamed API message, accumulated into our blocks."""

    def __init__(self) -> None:
        self.stopped = False
        self.blocks: list[ContentBlock] = []
        self.raw_blocks: list[Json] = []
        self.stop_reason = "end_turn"
        self.usage = Usage()
        self._tool_json: dict[int, str] = {}
        self._closed: set[int] = set()

    def take(self, event: Any) -> ModelStreamEvent | None:
        """Note one SDK stream event; the delta to pass on, if it is one."""
        if event.type == "message_stop":
            self.stopped = True
        elif event.type == "content_block_stop":
            self._closed.add(event.index)
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                return TextDelta(text=delta.text)
            if delta.type == "thinking_delta":
                return ThinkingDelta(text=delta.thinking)
            if delta.type == "input_json_delta":
                self._tool_json[event.index] = self._tool_json.get(event.index, "") + (
                    delta.partial_json
                )
        return None

    def finish(self, message: Any) -> None:
        """Take the complete message: its blocks, stop reason and usage."""
        self.stop_reason = message.stop_reason or "end_turn"
        used = message.usage
        self.usage = Usage(
            input_tokens=used.input_tokens or 0,
            output_tokens=used.output_tokens or 0,
            cache_read_input_tokens=used.cache_read_input_tokens or 0,
            cache_creation_input_tokens=used.cache_creation_input_tokens or 0,
        )
        last = len(message.content) - 1
        for index, block in enumerate(message.content):
            if block.type == "tool_use" and not self._is_whole(index, last):
                # cut off mid-input: running it would run a guess
                log.warning("dropped tool call %s: its input was cut off", block.id)
                continue
            ours = self._block(index, block)
            if ours is not None:
                self.blocks.append(ours)
                self.raw_blocks.append(api_block(ours))

    def _is_whole(self, index: int, last: int) -> bool:
        """Whether a tool call's block was finished, not cut off by the token limit."""
        if index not in self._closed:
            return False
        # the block the limit fell in may still be closed by the API: never trust it
        return not (self.stop_reason == "max_tokens" and index == last)

    def _block(self, index: int, block: Any) -> ContentBlock | None:
        if block.type == "text":
            return TextBlock(text=block.text) if block.text else None
        if block.type == "thinking":
            return ThinkingBlock(thinking=block.thinking, signature=block.signature)
        if block.type == "redacted_thinking":
            return RedactedThinkingBlock(data=block.data)
        if block.type == "tool_use":
            arguments = _complete_input(self._tool_json.get(index), block.input)
            if arguments is None:
                log.warning("dropped tool call %s: its input is not a JSON object", block.id)
                return None
            return ToolCall(id=block.id, name=block.name, input=arguments)
        log.warning("dropped a %s block: no tool of ours produces it", block.type)
        return None


def _is_api_error(exc: anthropic.APIStatusError, error_type: str) -> bool:
    """Whether the error's body is the API's own, ``{"type": "error", "error": {"type": ...}}``."""
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("type") == error_type


def _as_prefill(blocks: list[Json]) -> list[Json]:
    """Blocks to send back as the last message: the API refuses trailing whitespace there."""
    if not blocks or blocks[-1]["type"] != "text":
        return blocks
    text = blocks[-1]["text"].rstrip()
    return [*blocks[:-1], {"type": "text", "text": text}] if text else blocks[:-1]


def _complete_input(streamed: str | None, parsed: Any) -> dict[str, Any] | None:
    """A tool call's input if it arrived whole, else None."""
    if streamed is None:
        return parsed if isinstance(parsed, dict) else None
    try:
        value = json.loads(streamed) if streamed.strip() else {}
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _retry_after(response: Any) -> float | None:
    """Seconds the provider asked us to wait, from ``retry-after-ms`` or ``retry-after``."""
    if response is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(response.headers[name]) / scale
        except (KeyError, ValueError):
            continue
    return None
