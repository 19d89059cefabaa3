"""The Messages API's request shapes, built from our transcript.

Plain dicts, no SDK import: the rules here are the API's (alternating roles,
tool results first in the message after their calls, thinking blocks echoed
exactly, at most four cache breakpoints), and tests check them on their own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agent.core.messages import (
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
from agent.core.model import ToolSpec
from agent.models.anthropic.files import (
    file_block,
    file_size,
    left_out_note,
    messages_with_files_sent,
)

__all__ = [
    "ThinkingBinder",
    "api_block",
    "api_messages",
    "api_system",
    "api_tools",
    "bind_thinking",
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
    with_files = messages_with_files_sent(messages)
    for index, message in enumerate(messages):
        role, blocks = _role_and_blocks(message, files_sent=index in with_files)
        if not blocks:
            continue  # an empty reply: the API refuses empty messages
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _role_and_blocks(message: Message, *, files_sent: bool = True) -> tuple[str, list[Json]]:
    if isinstance(message, (UserMessage, TriggerMessage)):
        # a trigger reads to the model as a user message; the transcript keeps who sent it
        files = message.files if isinstance(message, UserMessage) else ()
        # files before the text, as the vision guide advises
        blocks = [file_block(f) if files_sent else left_out_note(f) for f in files]
        if message.text.strip() or not blocks:
            blocks.append(
                {"type": "text", "text": message.text if message.text.strip() else EMPTY_TEXT}
            )
        return "user", blocks
    if isinstance(message, ToolMessage):
        return "user", [_tool_result(message)]
    return "assistant", [api_block(block) for block in message.content if _is_sendable(block)]


def _is_sendable(block: ContentBlock) -> bool:
    # the API refuses a text block that is empty or only whitespace
    return not (isinstance(block, TextBlock) and not block.text.strip())


def bind_thinking(
    messages: Sequence[Message], *, model: str, system: str, tools: Sequence[ToolSpec]
) -> tuple[list[Message], str]:
    """The messages with thinking blocks left only where the API still takes them.

    A thinking block is tied to the model that wrote it and to the conversation
    it was written in: another model cannot read it, and on the newest models a
    block replayed after the system prompt, the tools or an earlier message
    changed (a policy edited mid-thread, a window that left older messages
    out) is refused. So each reply keeps the digest of the request that
    produced it; a reply whose model or digest no longer matches what this
    request sends before it goes without its thinking (the transcript keeps it).

    Returns:
        The messages to send, and the digest of this request's prompt, to keep
        with the reply it produces.
    """
    return ThinkingBinder(remembered=0).bind("", messages, model=model, system=system, tools=tools)


@dataclasses.dataclass(slots=True)
class _Bound:
    head: bytes
    seen: list[Message]
    sent: list[Message]
    running: Any


class ThinkingBinder:
    """`bind_thinking` for transcripts that grow: a message hashed once is not hashed again.

    Per session it remembers the messages of the last request (the very objects)
    and the digest so far; a request whose messages begin with those same
    objects, under the same model, system prompt and tools, hashes only what is
    new. Anything else (a window that cut the thread, a changed prompt) starts over.
    """

    def __init__(self, remembered: int = 1_000) -> None:
        self._remembered = remembered
        self._memory: OrderedDict[str, _Bound] = OrderedDict()

    def bind(
        self,
        key: str,
        messages: Sequence[Message],
        *,
        model: str,
        system: str,
        tools: Sequence[ToolSpec],
    ) -> tuple[list[Message], str]:
        """`bind_thinking` of ``messages`` for session ``key``."""
        head = _canonical([model, system, [_tool_json(t) for t in tools]])
        known = self._memory.pop(key, None)
        if known is not None and known.head == head and _begins_with(messages, known.seen):
            running, sent, start = known.running.copy(), list(known.sent), len(known.seen)
        else:
            running, sent, start = hashlib.sha256(head), [], 0
        for message in messages[start:]:
            if isinstance(message, AssistantMessage) and _is_unbound(message, model, running):
                kept = tuple(b for b in message.content if not _is_thinking(b))
                message = dataclasses.replace(message, content=kept)
            running.update(_canonical(_role_and_blocks(message)))
            sent.append(message)
        if self._remembered:
            self._memory[key] = _Bound(head, list(messages), list(sent), running.copy())
            while len(self._memory) > self._remembered:
                self._memory.popitem(last=False)
        return sent, running.hexdigest()


def _begins_with(messages: Sequence[Message], known: list[Message]) -> bool:
    return len(known) <= len(messages) and all(
        a is b for a, b in zip(known, messages, strict=False)
    )


def _is_unbound(message: AssistantMessage, model: str, running: Any) -> bool:
    """Whether the reply holds thinking its model or its conversation no longer vouches for."""
    if not any(_is_thinking(b) for b in message.content):
        return False
    return message.model != model or message.prompt_digest != running.hexdigest()


def _is_thinking(block: ContentBlock) -> bool:
    return isinstance(block, (ThinkingBlock, RedactedThinkingBlock))


def _canonical(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def _tool_json(tool: ToolSpec) -> Json:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


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
    out: list[Json] = [_tool_json(t) for t in tools]
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
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, UserMessage) and message.steer and i and _is_tool(messages[i - 1]):
            continue  # a steer sent beside tool results goes in their user message
        if isinstance(message, (UserMessage, TriggerMessage)):
            break
        if isinstance(message, AssistantMessage) and message.content:
            first_reply = message
    if first_reply is None:
        return False
    return not isinstance(first_reply.content[0], (ThinkingBlock, RedactedThinkingBlock))


def message_size(message: Message) -> int:
    """A message's size in characters as it is sent: the cheap estimate of its tokens."""
    if isinstance(message, UserMessage) and message.files:
        text = dataclasses.replace(message, files=())
        return message_size(text) + sum(file_size(f) for f in message.files)
    _, blocks = _role_and_blocks(message)
    return sum(len(json.dumps(block, ensure_ascii=False)) for block in blocks)


def _is_tool(message: Message) -> bool:
    return isinstance(message, ToolMessage)
