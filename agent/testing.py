"""Doubles that ship with the seams: a scripted model and a recording sink.

They are real implementations of `Model` and `EventSink`, for tests and for
running the engine offline; the engine itself is never mocked.
"""

from __future__ import annotations

import inspect
import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agent.core.events import TurnEvent
from agent.core.messages import TextBlock, ThinkingBlock, ToolCall, Usage
from agent.core.model import ModelReply, ModelRequest, ModelStreamEvent, TextDelta, ThinkingDelta
from agent.stores._memory import MemoryStore

__all__ = ["MemoryStore", "RecordingSink", "ScriptedModel", "call", "reply"]

Script = Callable[[ModelRequest], ModelReply | Awaitable[ModelReply]]

_call_ids = itertools.count(1)


def call(name: str, input: dict[str, Any] | None = None, *, id: str | None = None) -> ToolCall:
    """A tool call for a scripted reply."""
    return ToolCall(id=id or f"call_{next(_call_ids)}", name=name, input=input or {})


def reply(
    text: str = "",
    *calls: ToolCall,
    thinking: str = "",
    stop_reason: str | None = None,
    usage: Usage | None = None,
) -> ModelReply:
    """A scripted reply: optional thinking, text, then tool calls."""
    content: list[Any] = []
    if thinking:
        content.append(ThinkingBlock(thinking=thinking, signature="scripted"))
    if text:
        content.append(TextBlock(text=text))
    content.extend(calls)
    return ModelReply(
        content=tuple(content),
        stop_reason=stop_reason or ("tool_use" if calls else "end_turn"),
        usage=usage or Usage(input_tokens=10, output_tokens=len(text) // 4 + 1),
    )


class ScriptedModel:
    """A model whose next reply is a function of the request (the transcript so far).

    Text and thinking stream in deltas of ``chunk`` characters before the reply.

    Example:
        >>> model = ScriptedModel(lambda req: reply(f"you said {req.messages[-1].text}"))
    """

    def __init__(self, script: Script, *, chunk: int = 16) -> None:
        self._script = script
        self._chunk = chunk
        self.requests: deque[ModelRequest] = deque(maxlen=10_000)
        """The requests this model was asked, oldest first (the last 10,000)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream the scripted reply for ``request``."""
        self.requests.append(request)
        made = self._script(request)
        answer = await made if inspect.isawaitable(made) else made
        for block in answer.content:
            if isinstance(block, ThinkingBlock):
                for piece in _pieces(block.thinking, self._chunk):
                    yield ThinkingDelta(text=piece)
            elif isinstance(block, TextBlock):
                for piece in _pieces(block.text, self._chunk):
                    yield TextDelta(text=piece)
        yield answer


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class RecordingSink:
    """Keeps every event it is given, in order."""

    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    def emit(self, event: TurnEvent) -> None:
        """Record ``event``."""
        self.events.append(event)

    def types(self, turn_id: str | None = None) -> list[str]:
        """The event types seen (for one turn, when given)."""
        return [e.type for e in self.events if turn_id is None or e.turn_id == turn_id]
