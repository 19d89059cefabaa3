"""The runtime's care of history, now and then: retention's sweep, and compaction's.

Each agent with a ``history_retention`` has its archived turns that ended before
the period expired in the store (any replica may do it: each turn expires once),
and its sessions holding live turns that ended before it move those out, expired,
under their lease: an idle one here, one at work by its worker when its turn ends.
Each agent with ``compacting`` has its idle sessions that hold more live turns than
it keeps compacted: a turn's end does that as a rule, the sweep catches a session
with no turn since (compaction newly turned on, a summary that failed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from agent.definition.agent import Agent
from agent.errors import RuntimeClosedError
from agent.ports import SessionStore

__all__ = ["compact_history", "expire_history", "now_and_then", "sweep_interval"]

logger = logging.getLogger("agent")

MAX_INTERVAL = 3600.0


class _Tended(Protocol):
    async def expire_history(self, *, before: float, at: float) -> bool: ...

    async def compact_if_due(self) -> bool: ...


def sweep_interval(agents: Iterable[Agent]) -> float | None:
    """How often to sweep: a quarter of the shortest period, at most hourly; None for none."""
    agents = list(agents)
    periods = [a.history_retention / 4 for a in agents if a.history_retention is not None]
    periods += [MAX_INTERVAL for a in agents if a.compacting is not None]
    return min(min(periods), MAX_INTERVAL) if periods else None


async def compact_history(
    store: SessionStore, agents: Iterable[Agent], session: Callable[[str, str], _Tended]
) -> int:
    """Start the summaries idle sessions are due; how many were started here."""
    started = 0
    for agent in agents:
        if agent.compacting is None:
            continue
        crowded = agent.compacting.keep_turns + agent.compacting.every - 1
        for session_id in await store.crowded_sessions(agent.name, more_than=crowded):
            started += await session(agent.name, session_id).compact_if_due()
    return started


async def expire_history(
    store: SessionStore,
    agents: Iterable[Agent],
    session: Callable[[str, str], _Tended],
    *,
    now: float,
) -> int:
    """Expire what each agent's retention period is over for; how much was.

    The count is the archived turns expired, plus one for each session whose live
    turns were moved out, expired (or are being, by the worker of a session at work).
    """
    expired = 0
    for agent in agents:
        if agent.history_retention is None:
            continue
        before = now - agent.history_retention
        expired += await store.expire_history(agent.name, ended_before=before, at=now)
        for session_id in await store.expired_sessions(agent.name, ended_before=before):
            if await session(agent.name, session_id).expire_history(before=before, at=now):
                expired += 1
    return expired


async def now_and_then(work: Callable[[], Awaitable[object]], seconds: float, doing: str) -> None:
    """Await ``work`` every ``seconds`` until the runtime closes; ``doing`` names a failure."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await work()
        except RuntimeClosedError:
            return
        except Exception:
            logger.exception("could not %s; trying again", doing)
