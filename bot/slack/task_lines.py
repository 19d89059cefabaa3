"""The tool calls a reply shows: task chunks while it streams, plain lines where it cannot.

A stream shows each call as a ``task_update`` chunk that Slack keeps up to date by
its id. A message that is updated rather than streamed (Slack ended the stream, or
never offered one) takes no chunks, so what the calls were is written as text.
"""

from __future__ import annotations

__all__ = ["MAX_TASK_DETAILS", "MAX_TASK_TITLE", "WAITING", "TaskLines", "shortened"]

MAX_TASK_TITLE = MAX_TASK_DETAILS = 256
"""Slack's limit on one task chunk's text (its agent progress guidance)."""
WAITING = "waiting for an answer"
_MARKS = {"complete": " ✓", "error": " ✗"}


class TaskLines:
    """The task line of each call a reply has shown, by call id, in the order they came."""

    def __init__(self) -> None:
        self._titles: dict[str, str] = {}
        """Each call's first title: what it is called whatever its state."""
        self._latest: dict[str, tuple[str, str]] = {}
        """Each call's title and status as last shown."""
        self._details: dict[str, int] = {}
        """How many characters of details each call's card holds (Slack appends them)."""

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._titles

    def line(self, call_id: str, title: str, status: str, *, note: str = "") -> dict[str, str]:
        """The chunk that shows ``call_id`` at ``status``; a first line carries ``note``."""
        first = call_id not in self._titles
        self._titles.setdefault(call_id, title)
        self._latest[call_id] = (title, status)
        line = {"type": "task_update", "id": call_id, "title": title[:MAX_TASK_TITLE]}
        line["status"] = status
        if note and first:
            line["details"] = shortened(note, MAX_TASK_DETAILS)
            self._details[call_id] = len(line["details"])
        return line

    def progress_line(self, call_id: str, text: str) -> dict[str, str] | None:
        """The chunk that adds ``text`` to a running call's details; None once they are full.

        Slack appends a chunk's details to the card's, so each line is one more row
        under the call, until the card holds `MAX_TASK_DETAILS` characters.
        """
        if call_id not in self._latest:
            return None
        held = self._details.get(call_id, 0)
        added = f"\n{text}" if held else text
        if held + len(added) > MAX_TASK_DETAILS:
            return None
        self._details[call_id] = held + len(added)
        title, status = self._latest[call_id]
        return {
            "type": "task_update",
            "id": call_id,
            "title": title,
            "status": status,
            "details": added,
        }

    def waiting_title(self, call_id: str) -> str:
        """The title of a call that waits for a person's answer."""
        return f"{self._titles[call_id]}: {WAITING}"

    def as_text(self) -> str:
        """The lines as markdown, for a message that takes no chunks ("" with none)."""
        return "\n".join(
            f"_{title}_{_MARKS.get(status, '')}" for title, status in self._latest.values()
        )


def shortened(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
