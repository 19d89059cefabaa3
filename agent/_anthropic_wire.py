"""The Messages API's request shapes, built from our transcript.

Plain dicts, no SDK import: the rules here are the API's (alternating roles,
tool results first in the message after their calls, thinking blocks echoed
exactly, at most four cache breakpoints), and tests check them on their own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent.messages import (
    AssistantMessage,
    ContentBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolMessage,
    TriggerMessage,
    UserMessage,
)
from agent.model import ToolSpec

__all__ = [
    "api_block",
    "api_messages",
    "api_system",
    "api_tools",
    "mark_cache_points",
    "message_size",
    "turn_began_without_thinking",
]

Json = dict[str, Any]

EMPTY_TEXT = "(no text)"
"""Sent where a person's message had no text: the API refuses empty text blocks."""

EMPTY_RESULT = "(no output)"

_NOT_CACHEABLE = frozenset({"thinking", "redacted_thinking"})


def api_messages(messages: Sequence[Message]) -> list[Json]:
    """The transcript as API messages: one per role change, empty replies left out.

    Runs of one role are merged into one message (tool results of a failed turn
    followed by the next person's message, say); tool results stay first
    because they come first in the transcript.
    """
    out: list[Json] = []
    for message in messages:
        role, blocks = _role_and_blocks(message)
        if not blocks:
            continue  # an empty reply: the API refuses empty messages
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _role_and_blocks(message: Message) -> tuple[str, list[Json]]:
    if isinstance(message, (UserMessage, TriggerMessage)):
        # a trigger reads to the model as a user message; the transcript keeps who sent it
        return "user", [
            {"type": "text", "text": message.text if message.text.strip() else EMPTY_TEXT}
        ]
    if isinstance(message, ToolMessage):
        return "user", [_tool_result(message)]
    return "assistant", [api_block(block) for block in message.content if _is_sendable(block)]


def _is_sendable(block: ContentBlock) -> bool:
    # the API refuses a text block that is empty or only whitespace
    return not (isinstance(block, TextBlock) and not block.text.strip())


def api_block(block: ContentBlock) -> Json:
    """One content block of a committed reply, as the API sent it."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    assert isinstance(block, ToolCall)
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}


def _tool_result(message: ToolMessage) -> Json:
    block: Json = {
        "type": "tool_result",
        "tool_use_id": message.call_id,
        "content": _result_text(message),
    }
    if message.is_error:
        block["is_error"] = True
    return block


def _result_text(message: ToolMessage) -> str:
    result = message.result
    if message.is_error and isinstance(result, dict) and isinstance(result.get("error"), str):
        return result["error"] or EMPTY_RESULT  # the model reads the error, not its wrapping
    if isinstance(result, str):
        return result or EMPTY_RESULT
    return json.dumps(result, ensure_ascii=False)


def api_system(system: str, cache: Json | None) -> list[Json] | None:
    """The system prompt as one text block, a cache breakpoint on it when given.

    Tools come before the system prompt in the cached prefix, so this one
    breakpoint covers both.
    """
    if not system.strip():
        return None
    block: Json = {"type": "text", "text": system}
    if cache is not None:
        block["cache_control"] = cache
    return [block]


def api_tools(tools: Sequence[ToolSpec], cache: Json | None) -> list[Json]:
    """The tools offered; a breakpoint on the last when no system prompt holds one."""
    out: list[Json] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools
    ]
    if out and cache is not None:
        out[-1] = {**out[-1], "cache_control": cache}
    return out


def mark_cache_points(messages: list[Json], cache: Json) -> None:
    """Put cache breakpoints on the newest message and on the previous request's newest.

    The newest one lets the next step read all before it. The other sits
    exactly where the previous request wrote the cache: the API looks back
    only about 20 blocks from a breakpoint for an earlier entry, and a reply
    with many tool calls adds more than that.
    """
    if not messages:
        return
    _mark_last_block(messages[-1], cache)
    for i in range(len(messages) - 2, 0, -1):
        if messages[i]["role"] == "assistant":
            _mark_last_block(messages[i - 1], cache)  # what was newest before this reply
            return


def _mark_last_block(message: Json, cache: Json) -> None:
    blocks = message["content"]
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i]["type"] not in _NOT_CACHEABLE:
            blocks[i] = {**blocks[i], "cache_control": cache}
            return


def turn_began_without_thinking(messages: Sequence[Message]) -> bool:
    """Whether the replies since the person last spoke started without thinking.

    The API wants one thinking setting per assistant turn (a whole tool loop),
    so a loop begun with thinking off (before a restart that turned it on)
    must finish with it off.
    """
    first_reply: AssistantMessage | None = None
    for message in reversed(messages):
        if isinstance(message, (UserMessage, TriggerMessage)):
            break
        if isinstance(message, AssistantMessage) and message.content:
            first_reply = message
    if first_reply is None:
        return False
    return not isinstance(first_reply.content[0], (ThinkingBlock, RedactedThinkingBlock))


def message_size(message: Message) -> int:
    """A message's size in characters as it is sent: the cheap estimate of its tokens."""
    _, blocks = _role_and_blocks(message)
    return sum(len(json.dumps(block, ensure_ascii=False)) for block in blocks)
