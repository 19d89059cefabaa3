"""A call that delegates: its child turn started or joined, waited on, and what the call gets.

See `agent.engine.delegations` for how the child's moves reach its parent once the
call has let it go (the parent waits on mirrors of the child's requests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from agent._json import JsonValue
from agent.core.delegation import ParentLink, child_address, child_step, mirror_of
from agent.core.hitl import ChildRequest, InputRequired, answer_step
from agent.core.messages import ToolCall
from agent.core.policy import TurnPolicy
from agent.core.records import Commit, StoredStep
from agent.core.turns import Cancelled, Completed, Failed, Suspended, TurnInput, TurnResult
from agent.definition.agent import Agent
from agent.definition.policies import resolve_policy
from agent.engine.session import AgentSession
from agent.engine.turn.context import RunContext
from agent.errors import ConfigError, ToolError, UnknownTurnError
from agent.ports import SessionStore

__all__ = ["DelegationHost", "cancel_child", "delegate_call"]

logger = logging.getLogger("agent")

UNSTORED_INTERRUPT_POLL = 0.05
"""Seconds between looks at a parent whose interrupt came with no cancel stored (its
write failed and was taken back): the parent's call goes on waiting for its child."""


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


async def delegate_call(
    runtime: DelegationHost, run: RunContext, call: ToolCall, agent: str, task: str, nth: int
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
        child_agent = runtime.agent(agent)
    except ConfigError:
        raise ToolError(f"no agent named {agent!r} is mounted to delegate to") from None
    session_id, turn_id = child_address(run.key.session_id, run.turn_id, call.id, nth)
    await _record_child(run, child_step(call.id, nth), agent, session_id, turn_id)
    child = runtime.session(agent, session_id)
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
        result = await _until_ended(run, child, turn_id, lambda: runtime.is_closed)
    finally:
        stop()
    settled: set[str] = set()
    if isinstance(result, Suspended):  # mirrors never take an id the turn settled
        prefix = answer_step(run.turn_id, "")
        settled = {k.removeprefix(prefix) for k in await run.answers()}
    return _reply_of(agent, call, child, result, settled)


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
                await cancel_child(child, turn_id, reason)
                return await waiting  # it stops at its next checkpoint boundary
            await asyncio.wait((waiting,), timeout=UNSTORED_INTERRUPT_POLL)
        return waiting.result()
    except asyncio.CancelledError:
        # The call was stopped: the parent's grace ran out, its tool's own timeout, a
        # wait_for around it. Nobody waits for the child any more, so it is stopped too;
        # only a shutdown leaves it, to be joined again at the next start.
        if not closing():
            reason = run.cancel_reason() or "requested"
            await asyncio.shield(cancel_child(child, turn_id, reason))
        raise
    finally:
        waiting.cancel()


async def cancel_child(child: AgentSession, turn_id: str, reason: str) -> None:
    """Stop a child turn for its parent's ``reason`` (best effort: a failure is logged)."""
    # the parent's own reason: a child of a turn out of time is out of time too
    try:
        _ = await child.upkeep.stop(turn_id, reason)
    except UnknownTurnError:
        pass  # never admitted: nothing of it runs
    except Exception:
        logger.exception("could not cancel child turn %s of %s", turn_id, child.key)


def _reply_of(
    agent: str, call: ToolCall, child: AgentSession, result: TurnResult, settled: set[str]
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
                settled=settled,
            )
            for asked in result.requests
        ]
        raise InputRequired(mirrors[0], tuple(mirrors[1:]))
    if isinstance(result, Failed):
        raise ToolError(f"agent {agent} failed: {result.error}")
    if isinstance(result, Cancelled):
        raise ToolError(f"agent {agent}'s turn was cancelled ({result.reason})")
    raise ToolError(f"agent {agent}'s turn was interrupted ({result.reason})")
