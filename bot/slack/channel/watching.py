"""The tasks that show turns, and who has claimed the showing of each turn.

Bolt keeps no reference to a listener's work, so every admission, reply and
click runs in a task kept here, logged if it fails and drained at shutdown.
A turn is shown by whoever claims it: a click, an admission or a start-up each
hold a claim while they may show the turn, and the runtime's own events show
only a turn that nobody claims (one resumed because its request expired).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Coroutine
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.slack.channel.delivery import Thread
from bot.slack.channel.render import ReplyRenderer, slack_error

__all__ = ["Watching"]

logger = logging.getLogger("bot.slack")


class Watching:
    """The channel's tasks and its claims on showing turns."""

    def __init__(self, renderer: ReplyRenderer) -> None:
        self._renderer = renderer
        self._tasks: set[asyncio.Task[None]] = set()
        self._claims: collections.Counter[str] = collections.Counter()
        """Claims on showing a turn, by turn id."""

    @property
    def in_flight(self) -> int:
        """How many tasks (turns being admitted or shown) are still running."""
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run ``work`` in a task kept here, and log it if it fails."""
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s failed", task.get_name(), exc_info=task.exception())

    async def drain(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for the tasks in flight, then cancel the rest.

        Tasks started meanwhile (a turn resumed while draining) are waited for too.
        """
        deadline = asyncio.get_running_loop().time() + grace
        while self._tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            await asyncio.wait(set(self._tasks), timeout=left)
        late = set(self._tasks)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    def claim(self, turn_id: str) -> None:
        """Take a claim on showing ``turn_id``: the runtime's events leave it alone now."""
        self._claims[turn_id] += 1

    def release(self, turn_id: str) -> None:
        """Give back a claim taken with `claim`."""
        self._claims[turn_id] -= 1
        if self._claims[turn_id] <= 0:
            del self._claims[turn_id]

    def is_claimed(self, turn_id: str) -> bool:
        """Whether anyone here holds a claim on showing ``turn_id``."""
        return self._claims[turn_id] > 0

    async def reply(
        self,
        thread: Thread,
        turn_id: str,
        *,
        since: int | None = None,
        taking_up: bool = False,
        reader: str | None = None,
    ) -> None:
        """Show the turn (see `ReplyRenderer.show`), then give back the caller's claim.

        The caller holds a claim on the turn. A reply Slack refuses, or that a
        timeout or a dropped connection breaks off, is logged: the turn goes on.
        """
        try:
            await self._renderer.show(
                thread, turn_id, since=since, taking_up=taking_up, reader=reader
            )
        except SlackApiError as exc:
            logger.error("turn %s: Slack refused the reply: %s", turn_id, slack_error(exc))
        except Exception:
            logger.exception("turn %s: its reply could not be delivered", turn_id)
        finally:
            self.release(turn_id)
