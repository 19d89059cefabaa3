"""A reply's text as Slack takes it: cut over messages, and told apart from what was shown."""

from __future__ import annotations

__all__ = ["cut", "markdown_chunk", "squashed"]


def cut(text: str, room: int) -> tuple[str, str]:
    """``text`` cut in two, the first part at most ``room`` long, at a paragraph if it can."""
    for boundary in ("\n\n", "\n", " "):
        at = text.rfind(boundary, 0, room)
        if at > room // 2:
            return text[:at], text[at + len(boundary) :]
    return text[:room], text[room:]


def squashed(text: str) -> str:
    """``text`` without its blanks: a split eats the paragraph break it cuts at."""
    return "".join(text.split())


def markdown_chunk(text: str) -> dict[str, str]:
    """A stream chunk of markdown (a stream, once fed chunks, takes nothing else)."""
    return {"type": "markdown_text", "text": text}
