"""What crosses the `Model` seam: a request, streamed deltas, and one final reply."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.core.messages import ContentBlock, Message, TextBlock, ToolCall, Usage

__all__ = [
    "NORMAL_STOP_REASONS",
    "ModelReply",
    "ModelRequest",
    "ModelStreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolSpec",
]

NORMAL_STOP_REASONS = frozenset({"end_turn", "tool_use", "stop_sequence"})
"""Any other stop reason (``max_tokens``, ``refusal``, ...) is abnormal."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """How a tool is described to the model."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One model call: the system prompt, the transcript so far, the tools offered."""

    system: str
    messages: Sequence[Message]
    """A view on the live transcript; valid for the duration of the call."""
    tools: tuple[ToolSpec, ...] = ()
    agent: str = ""
    session_id: str = ""
    turn_id: str = ""
    step: str = ""
    """The step id this call fills, ``model:<n>``."""
    attempt: int = 1
    """Which try of this step the call is, from 1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A live piece of reply text. Never stored."""

    kind: Literal["text_delta"] = "text_delta"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDelta:
    """A live piece of thinking. Never stored."""

    kind: Literal["thinking_delta"] = "thinking_delta"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelReply:
    """The complete reply; the last item of every model stream."""

    kind: Literal["reply"] = "reply"
    content: tuple[ContentBlock, ...] = ()
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    """The model that wrote the reply, kept with the assistant message."""
    prompt_digest: str | None = None
    """The adapter's digest of the request, kept with the assistant message."""

    @property
    def is_abnormal(self) -> bool:
        """Whether the provider stopped for a reason other than finishing."""
        return self.stop_reason not in NORMAL_STOP_REASONS

    @property
    def text(self) -> str:
        """The reply's text blocks, joined."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the reply asks for."""
        return tuple(b for b in self.content if isinstance(b, ToolCall))


ModelStreamEvent = TextDelta | ThinkingDelta | ModelReply
