"""`Delegations`: the child turns a runtime's turns delegate to, from start to how they end.

A call that delegates starts (or, on a replay, joins) a child turn and waits for
it, showing its events to the parent's watchers (`agent.engine.delegated_call`).
A child that waits for a person makes its parent wait too, on a mirror of each
of its requests (see `agent.core.delegation`); the parent is *reconciled*
whenever the child moves (an answer, an ending, a new suspend): each mirror
whose child request is no longer open is settled, and once none is left the
parent runs on, its call joining the child where it stands. A child that asks
what its waiting parent does not show yet wakes the parent, which asks again
for all that is open. A parent that ends without completing cancels the
children still at work. Reconciling is idempotent, so it is also done at
start-up for a parent found suspended, in case the process died between a
child's move and its parent's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent._json import JsonValue
from agent.core.delegation import ParentLink
from agent.core.hitl import AuthorizeAnswer, ChildRequest, Grant, StoredAnswer
from agent.core.messages import ToolCall
from agent.core.records import SessionKey
from agent.core.turns import (
    TURN_STATUSES_ENDED,
    Cancelled,
    Failed,
    Interrupted,
    Suspended,
    TurnRecord,
    TurnResult,
)
from agent.engine.delegated_call import DelegationHost, cancel_child, delegate_call
from agent.engine.grants import grant_answer
from agent.engine.session import AgentSession
from agent.engine.turn.context import RunContext
from agent.errors import ConfigError, RuntimeClosedError

__all__ = ["Delegations"]

logger = logging.getLogger("agent")


class Delegations:
    """The child turns of one runtime's turns."""

    def __init__(self, runtime: DelegationHost) -> None:
        self._runtime = runtime

    # -- a call that delegates ------------------------------------------------------

    async def delegate(
        self, run: RunContext, call: ToolCall, agent: str, task: str, nth: int
    ) -> JsonValue:
        """Run ``task`` as the ``nth`` child turn of ``call``; see `delegate_call`."""
        return await delegate_call(self._runtime, run, call, agent, task, nth)

    # -- how a child's moves reach its parent ----------------------------------------

    def turn_changed(self, key: SessionKey, record: TurnRecord) -> None:
        """A turn was answered, suspended or ended: reconcile its parent, cascade its end."""
        if self._runtime.is_closed:
            return
        link = record.input.parent
        result = record.result
        if link is not None:
            parent = SessionKey(link.agent, link.session_id)
            # a child that asks again may ask what its waiting parent does not show yet
            asking = (key, record.turn_id) if isinstance(result, Suspended) else None
            self._spawn(
                lambda: self.reconcile(parent, link.turn_id, asking=asking), f"reconcile {parent}"
            )
        if isinstance(result, Suspended) and any(r.child for r in result.requests):
            # a child may have moved on while this turn was writing its suspend
            self._spawn(lambda: self.reconcile(key, record.turn_id), f"reconcile {key}")
        elif isinstance(result, (Cancelled, Failed, Interrupted)):
            ended = result
            self._spawn(lambda: self.cascade(key, record.turn_id, ended), f"cascade {key}")

    async def reconcile(
        self, key: SessionKey, turn_id: str, *, asking: tuple[SessionKey, str] | None = None
    ) -> int:
        """Settle the mirrors of turn ``turn_id`` whose child request is no longer open.

        ``asking``: a child turn that just suspended. If the turn still waits (on another
        call's requests) and stands for none of that child's, it is woken: its calls run
        again, each joining its child where it stands, and it waits on all that is open,
        the new requests included.

        Returns:
            How many were settled.
        """
        session = self._runtime.session(key.agent, key.session_id)
        suspended = await session.suspended()
        if suspended is None or suspended.turn_id != turn_id:
            return 0
        settled = 0
        for request in suspended.requests:
            if request.child is None or await self._still_open(request.child):
                continue
            settled += await session.upkeep.settle_mirror(turn_id, request.id)
        if asking is not None and await self._asks_unshown(session, turn_id, asking):
            await session.upkeep.wake(turn_id)
        return settled

    async def _asks_unshown(
        self, session: AgentSession, turn_id: str, asking: tuple[SessionKey, str]
    ) -> bool:
        """Whether turn ``turn_id`` waits, standing for none of the ``asking`` child's asks."""
        waiting = await session.suspended()
        if waiting is None or waiting.turn_id != turn_id:
            return False  # it runs (and joins the child itself), or it ended
        child_key, child_turn = asking
        child = await self._runtime.session(child_key.agent, child_key.session_id).suspended()
        if child is None or child.turn_id != child_turn:
            return False
        return not any(r.child and r.child.turn_id == child_turn for r in waiting.requests)

    async def answer(
        self,
        key: SessionKey,
        turn_id: str,
        child: ChildRequest,
        value: JsonValue,
        *,
        by: str | None,
        granted: Grant | None,
    ) -> None:
        """Answer the child request a mirror of turn ``turn_id`` stands for, then reconcile.

        Checked as the child's request says (``granted`` is the child's, from
        `grant_answer`); its errors are the child's.
        """
        session = self.session_of(child)
        await session.resume(child.turn_id, child.input_id, value, by=by, granted=granted)
        await self.reconcile(key, turn_id)

    async def cascade(self, key: SessionKey, turn_id: str, ended: TurnResult) -> None:
        """Cancel the children of a turn that ended without completing, if any still run."""
        steps = await self._runtime.store.load_steps(key, turn_id)
        reason = _stop_reason(ended)
        for step_id, memo in steps.items():
            if step_id.startswith("child:") and isinstance(memo, dict):
                agent, session_id, child_turn = (
                    memo.get("agent"),
                    memo.get("session_id"),
                    memo.get("turn_id"),
                )
                if isinstance(agent, str) and isinstance(session_id, str):
                    child = self._runtime.session(agent, session_id)
                    await cancel_child(child, str(child_turn), reason)

    async def recover(self, key: SessionKey, suspended: Suspended) -> None:
        """At start-up: reconcile a turn found waiting on a child (it may have moved on)."""
        if any(r.child for r in suspended.requests):
            try:
                await self.reconcile(key, suspended.turn_id)
            except Exception:
                # the next move of the child reconciles it again; a start never fails on it
                logger.exception("could not reconcile %s with its children", key)

    async def stop_orphans(self, found: Sequence[tuple[SessionKey, TurnRecord]]) -> int:
        """At start-up: stop the child turns among ``found`` whose parent no longer waits.

        A parent that ended in a write whose cascade was lost with its process (a cancel,
        a reset), or that went past a call that let its child go, leaves its child to
        nobody. Returns how many were stopped.
        """
        stopped = 0
        for key, record in found:
            link = record.input.parent
            if link is None or (not record.is_unfinished and record.status != "suspended"):
                continue
            try:
                stopped += await self._stop_if_orphaned(key, record, link)
            except Exception:
                logger.exception("could not look at the parent of %s in %s", record.turn_id, key)
        return stopped

    async def _stop_if_orphaned(
        self, key: SessionKey, record: TurnRecord, link: ParentLink
    ) -> bool:
        try:
            parent = self._runtime.session(link.agent, link.session_id)
            turns = await parent.turns()
        except ConfigError:
            return False  # the parent's agent is not mounted here: not this process's to say
        found = next((t for t in turns if t.turn_id == link.turn_id), None)
        if found is not None and found.status not in TURN_STATUSES_ENDED:
            return False
        child = self._runtime.session(key.agent, key.session_id)
        ended = found.result if found is not None else None
        return await child.upkeep.stop(record.turn_id, _stop_reason(ended))

    async def grant(
        self, child: ChildRequest, *, by: str | None, principal: Any, hook: AuthorizeAnswer | None
    ) -> Grant | None:
        """`grant_answer` for the child request a mirror stands for: as the child's says."""
        return await grant_answer(
            self.session_of(child),
            turn_id=child.turn_id,
            input_id=child.input_id,
            by=by,
            principal=principal,
            authorize_answer=hook,
        )

    async def answer_of(self, child: ChildRequest) -> StoredAnswer | None:
        """How the child request a mirror stands for was settled, if it was."""
        return await self.session_of(child).answer_of(child.turn_id, child.input_id)

    def session_of(self, child: ChildRequest) -> AgentSession:
        """The session of the child turn a mirror stands for."""
        return self._runtime.session(child.agent, child.session_id)

    async def _still_open(self, child: ChildRequest) -> bool:
        session = self.session_of(child)
        waits = await session.suspended()
        return (
            waits is not None
            and waits.turn_id == child.turn_id
            and waits.request_for(child.input_id) is not None
        )

    def _spawn(self, work: Callable[[], Awaitable[Any]], name: str) -> None:
        # closed: the next start reconciles what is suspended
        with contextlib.suppress(RuntimeClosedError):
            _ = self._runtime.spawn(_quietly(work, name), name=name)


def _stop_reason(ended: TurnResult | None) -> str:
    """Why a child is stopped once its parent ended so: the parent's own reason, if any."""
    return ended.reason if isinstance(ended, (Cancelled, Interrupted)) else "requested"


async def _quietly(work: Callable[[], Awaitable[Any]], name: str) -> None:
    try:
        await work()
    except RuntimeClosedError:
        pass
    except Exception:
        # what is left undone is done at the next start (a reconcile), or left to the child
        logger.exception("%s failed", name)
