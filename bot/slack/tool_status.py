"""What the thread's status line says while a tool runs: "is reading #general…".

Slack shows the status under the thread while the bot works
(``assistant.threads.setStatus``); naming the tool at work tells the person
waiting what the pause is. A tool this module does not know is named as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent import JsonValue

__all__ = ["at_work"]

_PHRASES = {
    "read_channel": "is reading {channel}…",
    "read_thread": "is reading this thread…",
    "post_message": "is posting to {channel}…",
    "remember": "is taking a note…",
    "recall": "is reading its notes…",
}
_FALLBACK_CHANNEL = "the channel you are looking at"


def at_work(name: str, given: Mapping[str, JsonValue]) -> str:
    """The status that names the call of ``name`` with ``given``, the model's input."""
    phrase = _PHRASES.get(name)
    if phrase is None:
        return f"is using {name}…"
    channel = given.get("channel")
    shown = _channel(channel) if isinstance(channel, str) and channel.strip() else _FALLBACK_CHANNEL
    return phrase.format(channel=shown)


def _channel(ref: str) -> str:
    """``#general`` for ``general``, ``#general``, ``<#C0…|general>``.

    A bare id says "a channel": a status line is plain text, where ``<#C0…>`` would
    show as typed, and looking its name up would hold the status back.
    """
    text = ref.strip()
    if text.startswith("<#") and text.endswith(">"):
        text = text[2:-1].partition("|")[2]
    elif text[:1] in ("C", "G") and text.isalnum() and text.isupper():
        text = ""
    if not text:
        return "a channel"
    return text if text.startswith("#") else f"#{text}"
