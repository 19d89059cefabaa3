"""`Compactions`: counts the compactions that reach a store, for a test to wait on."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.core.records import Commit, SessionKey

__all__ = ["Compactions"]

WAIT = 10.0


class Compactions:
    """Wraps ``store.commit`` to count the commits that compact (or expire) a session."""

    def __init__(self, store: Any) -> None:
        self.landed = 0
        self._changed = asyncio.Condition()
        committing = store.commit

        async def commit(key: SessionKey, commit: Commit) -> None:
            await committing(key, commit)
            if commit.compact is not None:
                async with self._changed:
                    self.landed += 1
                    self._changed.notify_all()

        store.commit = commit

    async def wait_for(self, count: int) -> None:
        """Until ``count`` compactions have landed, in all."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.landed >= count), WAIT)
