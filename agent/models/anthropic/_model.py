"""Claude through the official ``anthropic`` SDK: the engine's real `Model`.

It streams a reply, turning the SDK's events into our deltas (`_stream`) and its
final message into a `ModelReply`; the SDK's errors become `ModelError` once, in
`_errors`. Request-level faults
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

from agent.core.messages import (
    ContentBlock,
    Message,
    Usage,
)
from agent.core.model import ModelReply, ModelRequest, ModelStreamEvent
from agent.errors import ConfigError, ModelError
from agent.models.anthropic._errors import (
    RetryAfterCap,
    is_api_error,
    late_error,
    model_error,
    translated_errors,
)
from agent.models.anthropic._stream import StreamedReply, as_prefill
from agent.models.anthropic.rules import refused_by_capabilities, rules_for
from agent.models.anthropic.settings import DEFAULT_MODEL, AnthropicSettings
from agent.models.anthropic.wire import (
    ThinkingBinder,
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
            middleware=[RetryAfterCap(self.settings.max_retry_wait)],
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
            if not is_api_error(exc, "not_found_error"):
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
                model_error(exc, secret=self._secret),
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
            raise late_error(self.settings.step_timeout) from exc
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
            part = StreamedReply()
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
        self, params: Json, continuation: list[Json], part: StreamedReply, deadline: float
    ) -> AsyncIterator[ModelStreamEvent]:
        if continuation:
            # a paused reply is sent back as the last message and the model carries on
            params = {
                **params,
                "messages": [
                    *params["messages"],
                    {"role": "assistant", "content": as_prefill(continuation)},
                ],
            }
        with translated_errors(secret=self._secret, step_timeout=self.settings.step_timeout):
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
            log.warning(
                "token counting failed (%s); estimating instead",
                model_error(exc, secret=self._secret),
            )
            return sum(message_size(m) for m in messages) // 3
        return counted.input_tokens
