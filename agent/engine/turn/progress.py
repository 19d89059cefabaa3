"""`ProgressLine`: how a tool's ``ctx.progress`` reaches the person waiting.

Each line becomes a live ``action.progress`` event of the turn and a line of the
process's log; nothing of it is stored. A local tool runs on the store's
connection thread, so a line said there is handed to the event loop rather than
emitted from a thread the turn's subscribers do not run on. Lines said after the
call's result is committed (a tool that ignores its stop) are dropped: the
turn's stream has moved on.
"""

from __future__ import annotations

import asyncio
import logging

from agent.core.events import ActionProgress
from agent.core.messages import ToolCall
from agent.engine.turn.context import RunContext

__all__ = ["MAX_PROGRESS_CHARS", "ProgressLine"]

logger = logging.getLogger("agent")

MAX_PROGRESS_CHARS = 300
"""A progress line longer than this is cut: it is a status, not a report."""


class ProgressLine:
    """The ``ctx.progress`` of one tool call."""

    def __init__(self, run: RunContext, call: ToolCall) -> None:
        self._run = run
        self._call = call
        self._loop = asyncio.get_running_loop()
        self._open = True

    def close(self) -> None:
        """The call's result is committed: later lines are dropped."""
        self._open = False

    def __call__(self, text: str) -> None:
        """Say ``text`` (one line, cut to `MAX_PROGRESS_CHARS`) from any thread."""
        line = " ".join(str(text).split())
        if len(line) > MAX_PROGRESS_CHARS:
            line = line[: MAX_PROGRESS_CHARS - 1] + "…"
        if not line or not self._open:
            return
        logger.info(
            "%s turn %s, %s: %s", self._run.key.session_id, self._run.turn_id, self._call.name, line
        )
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self._loop:
            self._emit(line)
        else:
            self._loop.call_soon_threadsafe(self._emit, line)

    def _emit(self, line: str) -> None:
        if self._open:
            self._run.emit(ActionProgress, call_id=self._call.id, name=self._call.name, text=line)
