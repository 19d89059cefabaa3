"""One streamed API message, read into our blocks and deltas."""

from __future__ import annotations

import json
import logging
from typing import Any

from agent.core.messages import (
    ContentBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from agent.core.model import ModelStreamEvent, TextDelta, ThinkingDelta
from agent.models.anthropic.wire import api_block

__all__ = ["StreamedReply", "as_prefill"]

log = logging.getLogger(__name__)

Json = dict[str, Any]


class StreamedReply:
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
            arguments = complete_input(self._tool_json.get(index), block.input)
            if arguments is None:
                log.warning("dropped tool call %s: its input is not a JSON object", block.id)
                return None
            return ToolCall(id=block.id, name=block.name, input=arguments)
        log.warning("dropped a %s block: no tool of ours produces it", block.type)
        return None


def as_prefill(blocks: list[Json]) -> list[Json]:
    """Blocks to send back as the last message: the API refuses trailing whitespace there."""
    if not blocks or blocks[-1]["type"] != "text":
        return blocks
    text = blocks[-1]["text"].rstrip()
    return [*blocks[:-1], {"type": "text", "text": text}] if text else blocks[:-1]


def complete_input(streamed: str | None, parsed: Any) -> dict[str, Any] | None:
    """A tool call's input if it arrived whole, else None."""
    if streamed is None:
        return parsed if isinstance(parsed, dict) else None
    try:
        value = json.loads(streamed) if streamed.strip() else {}
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
