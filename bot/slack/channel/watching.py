"""The tasks that show turns, and who has claimed the showing of each turn.

Bolt keeps no reference to a listener's work, so every admission, reply and
click runs in a task kept here, logged if it fails and drained at shutdown.
A turn is shown by whoever claims it: a click, an admission or a start-up each
hold a claim while they may show the turn, and the runtime's own events show
only a turn that nobody claims (one resumed because its request expired).

A reply that Slack could not take for a passing reason (an outage, a rate limit
outlasting slack_sdk's retries, a dropped connection whose outcome could not be
read back) is shown again later, from what the store kept of it, as a start-up
would: the thread is not left without its answer until the next deploy.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError

from agent import TurnRecord
from bot.slack.channel.delivery import DeliveryState, Thread
from bot.slack.channel.render import ReplyRenderer, slack_error
from bot.slack.once import AMBIGUOUS, PASSING, CannotTell

__all__ = ["REPLY_RETRIES", "Watching"]

logger = logging.getLogger("bot.slack")

REPLY_RETRIES = (2.0, 10.0, 30.0, 60.0, 300.0, 900.0)
"""Seconds before each new try at a reply Slack could not take: some 22 minutes in
all; after that the reply stays owed, and the next start shows it."""


class Watching:
    """The channel's tasks and its claims on showing turns."""

    def __init__(
        self, renderer: ReplyRenderer, *, retries: Sequence[float] = REPLY_RETRIES
    ) -> None:
        self._renderer = renderer
        self._retries = tuple(retries)
        self._later: set[asyncio.TimerHandle] = set()
        """Replies to try again, each at its time (not tasks: a shutdown waits for none)."""
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
        Replies due to be tried again are not: they stay owed to the next start.
        """
        for later in self._later:
            later.cancel()
        self._later.clear()
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
        tried: int = 0,
    ) -> None:
        """Show the turn (see `ReplyRenderer.show`), then give back the caller's claim.

        The caller holds a claim on the turn. A reply Slack refuses, or that a
        timeout or a dropped connection breaks off, is logged: the turn goes on.
        One broken off for a passing reason is tried again later (``tried``: how
        often it was already).
        """
        passing = False
        began: TurnRecord | None = None
        try:
            began = await self._renderer.show(
                thread, turn_id, since=since, taking_up=taking_up, reader=reader
            )
        except SlackApiError as exc:
            passing = slack_error(exc) in PASSING
            logger.error("turn %s: Slack refused the reply: %s", turn_id, slack_error(exc))
        except (*AMBIGUOUS, CannotTell) as exc:
            passing = True
            logger.warning(
                "turn %s: its reply broke off: %s", turn_id, str(exc) or type(exc).__name__
            )
        except Exception:
            logger.exception("turn %s: its reply could not be delivered", turn_id)
        finally:
            self.release(turn_id)
        if passing and tried < len(self._retries):
            self._show_again(thread, turn_id, reader, tried)
        elif began is not None and await self._went_on_unseen(thread, turn_id, began):
            # A showing that began on a waiting turn ends on that wait. If the turn was
            # woken meanwhile, while this showing's claim kept the runtime's events away
            # (a sub-agent asking again wakes its waiting parent), nobody else shows it.
            self.claim(turn_id)
            self.spawn(self.reply(thread, turn_id, reader=reader), name=f"reply {turn_id}")

    async def _went_on_unseen(self, thread: Thread, turn_id: str, began: TurnRecord) -> bool:
        """Whether a turn shown from a wait was resumed since, is not ended, and is unshown.

        Read only for a showing that began on a waiting turn: every other ends with its turn.
        """
        if began.status != "suspended":
            return False
        session = self._renderer.runtime.session(self._renderer.agent, thread.session_id)
        now = next((t for t in await session.turns() if t.turn_id == turn_id), None)
        if now is None or self.is_claimed(turn_id):
            return False
        return now.resumes > began.resumes and now.status in ("queued", "running", "suspended")

    def _show_again(self, thread: Thread, turn_id: str, reader: str | None, tried: int) -> None:
        delay = self._retries[tried]
        logger.info("turn %s: its reply is tried again in %.1f s", turn_id, delay)

        def due() -> None:
            self._later.discard(later)
            self.spawn(self._again(thread, turn_id, reader, tried + 1), name=f"reply {turn_id}")

        later = asyncio.get_running_loop().call_later(delay, due)
        self._later.add(later)

    async def _again(self, thread: Thread, turn_id: str, reader: str | None, tried: int) -> None:
        if self.is_claimed(turn_id):
            return  # shown meanwhile by another (a click went on with it): it has the reply
        kept = await self._renderer.deliveries.load(thread.session_id, turn_id)
        if kept.done or kept == DeliveryState():
            return  # shown to its end meanwhile: nothing is owed
        self.claim(turn_id)
        await self.reply(thread, turn_id, taking_up=True, reader=reader, tried=tried)
