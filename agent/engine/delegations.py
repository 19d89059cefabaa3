"""`Delegations`: the child turns a runtime's turns delegate to, from start to how they end.

A call that delegates starts (or, on a replay, joins) a child turn and waits for
it, showing its events to the parent's watchers. A child that waits for a person
makes its parent wait too, on a mirror of each of its requests (see
`agent.core.delegation`); the parent is *reconciled* whenever the child moves
(an answer, an ending, a new suspend): each mirror whose child request is no
longer open is settled, and once none is left the parent runs on, its call
joining the child where it stands. A parent that ends without completing
cancels the children still at work. Reconciling is idempotent, so it is also
done at start-up for a parent found suspended, in case the process died between
a child's move and its parent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

from agent._json import JsonValue
from agent.core.delegation import ParentLink, child_address, child_step, mirror_of
from agent.core.hitl import AuthorizeAnswer, ChildRequest, Grant, InputRequired, StoredAnswer
from agent.core.messages import ToolCall
from agent.core.policy import TurnPolicy
from agent.core.records import Commit, SessionKey, StoredStep
from agent.core.turns import (
    TURN_STATUSES_ENDED,
    Cancelled,
    Completed,
    Failed,
    Interrupted,
    Suspended,
    TurnInput,
    TurnRecord,
    TurnResult,
)
from agent.definition.agent import Agent
from agent.definition.policies import resolve_policy
from agent.engine.grants import grant_answer
from agent.engine.session import AgentSession
from agent.engine.turn.context import RunContext
from agent.errors import ConfigError, RuntimeClosedError, ToolError, UnknownTurnError
from agent.ports import SessionStore


class DelegationHost(Protocol):
    """The runtime, as its child turns need it."""

    store: SessionStore

    @property
    def is_closed(self) -> bool:
        """Whether the runtime has begun closing."""
        ...

    def agent(self, name: str) -> Agent:
        """The mounted agent ``name``; `ConfigError` if there is none."""
        ...

    def session(self, agent: str, session_id: str) -> AgentSession:
        """The session ``(agent, session_id)``."""
        ...

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Run ``work`` in a task the runtime keeps and cancels as it closes."""
        ...


__all__ = ["Delegations"]

logger = logging.getLogger("agent")

UNSTORED_INTERRUPT_POLL = 0.05
"""Seconds between looks at a parent whose interrupt came with no cancel stored (its
write failed and was taken back): the parent's call goes on waiting for its child."""


class Delegations:
    """The child turns of one runtime's turns."""

    def __init__(self, runtime: DelegationHost) -> None:
        self._runtime = runtime

    # -- a call that delegates ------------------------------------------------------

    async def delegate(
        self, run: RunContext, call: ToolCall, agent: str, task: str, nth: int
    ) -> JsonValue:
        """Run ``task`` as the ``nth`` child turn of ``call``; see `ToolContext.delegate`.

        Raises:
            ToolError: No such agent, too deep, or the child failed or was cancelled.
            InputRequired: The child waits for a person: the parent waits on mirrors.
        """
        above = run.record.input.parent
        depth = (above.depth if above else 0) + 1
        if depth > run.agent.max_delegation_depth:
            raise ToolError(
                f"cannot delegate to {agent}: it would be {depth} delegations deep, and "
                f"agent {run.agent.name} allows {run.agent.max_delegation_depth}"
            )
        try:
            child_agent = self._runtime.agent(agent)
        except ConfigError:
            raise ToolError(f"no agent named {agent!r} is mounted to delegate to") from None
        session_id, turn_id = child_address(run.key.session_id, run.turn_id, call.id, nth)
        await _record_child(run, child_step(call.id, nth), agent, session_id, turn_id)
        child = self._runtime.session(agent, session_id)
        given = run.record.input
        opening = TurnInput(
            text=task,
            trigger="proactive",
            by=f"agent:{run.key.agent}",
            # the child asks the people its parent would, attested as its parent's were
            event=given.event,
            policy=_child_policy(run, child_agent),
            parent=ParentLink(
                agent=run.key.agent,
                session_id=run.key.session_id,
                turn_id=run.turn_id,
                call_id=call.id,
                depth=depth,
            ),
        )
        # A child answered while its parent waited ran on unwatched: its committed steps
        # are folded in first (a line shown twice is the same line, updated).
        stop = await child.observe(run.forward, turn_id=turn_id, replay=True)
        try:
            await child.start(opening, turn_id=turn_id)
            result = await _until_ended(run, child, turn_id, lambda: self._runtime.is_closed)
        finally:
            stop()
        return _reply_of(agent, call, child, result, run.record.resumes)

    # -- how a child's moves reach its parent ----------------------------------------

    def turn_changed(self, key: SessionKey, record: TurnRecord) -> None:
        """A turn was answered, suspended or ended: reconcile its parent, cascade its end."""
        if self._runtime.is_closed:
            return
        link = record.input.parent
        if link is not None:
            parent = SessionKey(link.agent, link.session_id)
            self._spawn(lambda: self.reconcile(parent, link.turn_id), f"reconcile {parent}")
        result = record.result
        if isinstance(result, Suspended) and any(r.child for r in result.requests):
            # a child may have moved on while this turn was writing its suspend
            self._spawn(lambda: self.reconcile(key, record.turn_id), f"reconcile {key}")
        elif isinstance(result, (Cancelled, Failed, Interrupted)):
            ended = result
            self._spawn(lambda: self.cascade(key, record.turn_id, ended), f"cascade {key}")

    async def reconcile(self, key: SessionKey, turn_id: str) -> int:
        """Settle the mirrors of turn ``turn_id`` whose child request is no longer open.

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
        return settled

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
        reason = ended.reason if isinstance(ended, (Cancelled, Interrupted)) else "requested"
        for step_id, memo in steps.items():
            if step_id.startswith("child:") and isinstance(memo, dict):
                agent, session_id, child_turn = (
                    memo.get("agent"),
                    memo.get("session_id"),
                    memo.get("turn_id"),
                )
                if isinstance(agent, str) and isinstance(session_id, str):
                    child = self._runtime.session(agent, session_id)
                    await _cancel_child(child, str(child_turn), reason)

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
        ended = found.result if found is not None else None
        reason = ended.reason if isinstance(ended, (Cancelled, Interrupted)) else "requested"
        child = self._runtime.session(key.agent, key.session_id)
        return await child.upkeep.stop(record.turn_id, reason)

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


async def _quietly(work: Callable[[], Awaitable[Any]], name: str) -> None:
    try:
        await work()
    except RuntimeClosedError:
        pass
    except Exception:
        # what is left undone is done at the next start (a reconcile), or left to the child
        logger.exception("%s failed", name)


async def _record_child(
    run: RunContext, step: str, agent: str, session_id: str, turn_id: str
) -> None:
    """Write, once, which child turn a call delegated to: a cancel of the parent finds it."""
    if step in run.children or step in await run.stored_steps():
        return
    memo: JsonValue = {"agent": agent, "session_id": session_id, "turn_id": turn_id}
    await run.commit(Commit(steps=(StoredStep(step, run.turn_id, memo),)))
    run.children.add(step)


def _child_policy(run: RunContext, child: Agent) -> TurnPolicy | None:
    """The child's own policy for its parent's source, denying what its parent's denies too.

    A delegation must not reach a tool the parent's place denies, whichever agent
    declares it.
    """
    given = run.record.input
    source = given.policy.source if given.policy else given.event.source if given.event else None
    if source is None:
        return None  # nobody spoke and no policy applies: the child runs on its base
    own = resolve_policy(child, source)
    denied = tuple(sorted(set(own.deny_tools) | run.denied))
    place = given.policy.place if given.policy else None
    return dataclasses.replace(own, place=place, deny_tools=denied)


async def _until_ended(
    run: RunContext, child: AgentSession, turn_id: str, closing: Callable[[], bool]
) -> TurnResult:
    """Wait for the child turn to end or suspend; a stop of the parent cancels it."""
    waiting = asyncio.ensure_future(child.result(turn_id))
    try:
        while not waiting.done():
            interrupted = asyncio.ensure_future(run.interrupted.wait())
            try:
                await asyncio.wait((waiting, interrupted), return_when=asyncio.FIRST_COMPLETED)
            finally:
                interrupted.cancel()
            if waiting.done():
                break
            reason = run.cancel_reason()
            if reason is not None:
                await _cancel_child(child, turn_id, reason)
                return await waiting  # it stops at its next checkpoint boundary
            await asyncio.wait((waiting,), timeout=UNSTORED_INTERRUPT_POLL)
        return waiting.result()
    except asyncio.CancelledError:
        # The call was stopped: the parent's grace ran out, its tool's own timeout, a
        # wait_for around it. Nobody waits for the child any more, so it is stopped too;
        # only a shutdown leaves it, to be joined again at the next start.
        if not closing():
            reason = run.cancel_reason() or "requested"
            await asyncio.shield(_cancel_child(child, turn_id, reason))
        raise
    finally:
        waiting.cancel()


async def _cancel_child(child: AgentSession, turn_id: str, reason: str) -> None:
    # the parent's own reason: a child of a turn out of time is out of time too
    try:
        _ = await child.upkeep.stop(turn_id, reason)
    except UnknownTurnError:
        pass  # never admitted: nothing of it runs
    except Exception:
        logger.exception("could not cancel child turn %s of %s", turn_id, child.key)


def _reply_of(
    agent: str, call: ToolCall, child: AgentSession, result: TurnResult, resumes: int
) -> JsonValue:
    """What the delegating call gets from the child's result.

    Raises:
        InputRequired: The child waits for a person: on the mirrors of its requests.
        ToolError: The child did not complete.
    """
    if isinstance(result, Completed):
        return result.output if result.output is not None else result.text
    if isinstance(result, Suspended):
        mirrors = [
            mirror_of(
                asked,
                ChildRequest(
                    agent=child.key.agent,
                    session_id=child.key.session_id,
                    turn_id=result.turn_id,
                    input_id=asked.id,
                ),
                call_id=call.id,
                resumes=resumes,
            )
            for asked in result.requests
        ]
        raise InputRequired(mirrors[0], tuple(mirrors[1:]))
    if isinstance(result, Failed):
        raise ToolError(f"agent {agent} failed: {result.error}")
    if isinstance(result, Cancelled):
        raise ToolError(f"agent {agent}'s turn was cancelled ({result.reason})")
    raise ToolError(f"agent {agent}'s turn was interrupted ({result.reason})")
