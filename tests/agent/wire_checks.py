"""What the Messages API checks of a request's messages, checked here too."""

from __future__ import annotations

import itertools
from typing import Any


def assert_valid_api_messages(messages: list[dict[str, Any]]) -> None:
    """Alternating roles, user first, and every tool call answered in the very next message."""
    assert messages, "no messages"
    assert messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"], "two messages of one role in a row"
    for i, message in enumerate(messages):
        assert message["content"], f"message {i} is empty"
        for block in message["content"]:
            if block["type"] == "text":
                assert block["text"].strip(), f"message {i} has an empty text block"
        calls = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if message["role"] == "assistant" and calls and i + 1 < len(messages):
            following = messages[i + 1]["content"]
            results = [b["tool_use_id"] for b in following if b["type"] == "tool_result"]
            assert sorted(results) == sorted(calls), f"calls of message {i} not all answered"
            leading = [b["type"] for b in following[: len(results)]]
            assert set(leading) <= {"tool_result"}, "tool results must come first"
        if message["role"] == "user":
            answered = {b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"}
            if answered:
                previous = messages[i - 1]["content"] if i else []
                asked = {b["id"] for b in previous if b["type"] == "tool_use"}
                assert answered <= asked, f"message {i} answers a call nobody made"
