"""`Compactor`: a session's compactions, planned as turns end and committed between turns.

The summary is written by the model in a task of its own, so a turn admitted
meanwhile runs at once; the worker commits the compaction at its next pause
between turns, under the session's lease, so across replicas only the process
that writes the session compacts it. A plan gone stale (the session reset, or
compacted, since) is dropped, and a summary that failed is tried again after
the next turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agent.core.records import Commit, apply_commit
from agent.core.transcript import Compaction
from agent.definition.tools import describe_error
from agent.engine.session._compacting import plan_compaction, plan_expiry, summarise
from agent.engine.session._state import SessionState
from agent.errors import LeaseLostError, StoreConflictError

__all__ = ["Compactor"]

logger = logging.getLogger("agent")


class Compactor:
    """Plans, summarises and commits one session's compactions."""

    def __init__(self, shared: SessionState, *, on_takeover: Callable[[str, str], None]) -> None:
        self._shared = shared
        self._on_takeover = on_takeover

    def plan(self, *, on_ready: Callable[[], None]) -> bool:
        """Expire what is due, or start a summary if one is due; whether either was.

        ``on_ready`` is called once there is something for the worker to commit.
        """
        retention = self._shared.agent.history_retention
        state = self._shared.in_memory
        if retention is not None and state is not None:
            now = self._shared.host.clock()
            if self.plan_expiry(before=now - retention, at=now):
                on_ready()
                return True
        compacting = self._shared.agent.compacting
        busy = self._shared.summarising is not None or self._shared.summary_ready is not None
        if compacting is None or state is None or busy:
            return False
        planned = plan_compaction(state, compacting)
        if planned is None:
            return False
        through, base = planned
        agent, key = self._shared.agent, self._shared.key

        async def write_summary() -> None:
            try:
                self._shared.summary_ready = await summarise(agent, key, state, through, base)
            except Exception as exc:
                logger.warning("%s: no summary to compact with (%s)", key, describe_error(exc))
                return
            finally:
                if self._shared.summarising is asyncio.current_task():
                    self._shared.summarising = None
            on_ready()  # the worker commits it at its next pause between turns

        self._shared.summarising = self._shared.host.spawn(
            write_summary(), name=f"summary of {key}"
        )
        return True

    def plan_expiry(self, *, before: float, at: float) -> bool:
        """Have the turns that ended before ``before`` move out, expired, at the next pause.

        A summary being written is dropped: it would keep what expires.
        """
        state = self._shared.in_memory
        expiry = plan_expiry(state, before, at) if state is not None else None
        if expiry is None:
            return False
        if self._shared.summarising is not None:
            self._shared.summarising.cancel()
            self._shared.summarising = None
        self._shared.summary_ready = expiry
        return True

    async def commit_if_ready(self) -> bool:
        """Commit the summary written, if one is; whether the session changed."""
        compaction, self._shared.summary_ready = self._shared.summary_ready, None
        state = self._shared.in_memory
        if compaction is None or state is None or self._is_stale(compaction):
            return False
        token = self._shared.lease.token
        commit = Commit(compact=compaction, holder=token)
        try:
            await self._shared.host.store.commit(self._shared.key, commit)
        except LeaseLostError:
            self._on_takeover("(compaction)", token or "")
            return False
        except StoreConflictError as exc:
            logger.info("%s: compaction dropped (%s)", self._shared.key, exc)
            return False
        except Exception as exc:
            # the turns stay live and the next turn's end plans again: nothing is lost
            logger.warning("%s: compaction failed (%s)", self._shared.key, describe_error(exc))
            return False
        apply_commit(state, commit)
        logger.info(
            "%s: turns up to %d %s",
            self._shared.key,
            compaction.through,
            "expired" if compaction.expire_at is not None else "compacted into a summary",
        )
        return True

    def _is_stale(self, compaction: Compaction) -> bool:
        state = self._shared.in_memory
        if state is None or state.generation != compaction.generation:
            return True
        if state.compacted_through != compaction.through:
            return state.compacted_through > compaction.through
        # nothing more to move: only an expiry that replaces a summary is still worth it
        return compaction.expire_at is None or state.summary == compaction.summary
