"""What the steps of one run of a turn share: the turn, its session's state, and its plumbing.

A run's model steps and tool steps read the same transcript, commit under the
same lease, emit events in one numbered sequence and stop at the same cancel.
`RunContext` holds all of that, so that each kind of step can be a plain
function of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from agent._json import JsonValue
from agent.core.events import TurnEvent
from agent.core.messages import Message, ToolCall
from agent.core.records import Commit, SessionKey, StoredSession, apply_commit
from agent.core.transcript import summary_message
from agent.core.turns import TurnRecord
from agent.definition.agent import Agent
from agent.definition.output import OUTPUT_TOOL
from agent.definition.policies import resolve_policy
from agent.definition.tools import Tool
from agent.ports import SessionStore

__all__ = ["Delegator", "Interrupted", "RunContext", "StepFailed", "is_being_cancelled"]


class Interrupted(Exception):
    """The turn was cancelled (or ran out of time) while a step was in flight."""


class StepFailed(Exception):
    """A step failed in a way that fails the turn; ``phase`` and ``step`` say where.

    ``call_id`` names the tool call that failed it, when one did: that call ran, so its
    result is its own error, not the "not run" the calls after it get.
    """

    def __init__(self, error: str, *, phase: str, step: str, call_id: str | None = None) -> None:
        super().__init__(error)
        self.error, self.phase, self.step = error, phase, step
        self.call_id = call_id
        self.also: dict[str, str] = {}
        """Other calls of the batch that failed the turn too (they ran together), by call
        id: each keeps its own error as its result."""


class Delegator(Protocol):
    """What runs a child turn for a call that delegates (see `agent.core.delegation`)."""

    async def delegate(
        self, run: RunContext, call: ToolCall, agent: str, task: str, nth: int
    ) -> JsonValue:
        """Run ``task`` as the ``nth`` child turn of ``call``; its reply, or suspend on its asks."""
        ...


class RunContext:
    """One run of one turn, as each of its steps sees it."""

    def __init__(
        self,
        *,
        agent: Agent,
        store: SessionStore,
        key: SessionKey,
        state: StoredSession,
        record: TurnRecord,
        emit: Callable[[TurnEvent], None],
        clock: Callable[[], float],
        holder: str | None,
        still_ours: Callable[[], Awaitable[None]] | None = None,
        delegator: Delegator | None = None,
        forward: Callable[[TurnEvent], None] | None = None,
    ) -> None:
        self.agent = agent
        self.delegator = delegator
        """Runs the child turns this turn's calls delegate to (the runtime); None: it cannot."""
        self.forward = forward or (lambda event: None)
        """Hands a child turn's event to this turn's watchers (tagged with ``via``)."""
        self.children: set[str] = set()
        """The child steps (`agent.core.delegation.child_step`) this run has written."""
        self.holder = holder
        """The session's lease this run writes under: the store refuses it once another took it."""
        self.still_ours = still_ours
        """Raises `LeaseLostError` once another process took the session on: asked before
        output no commit fences (a streamed delta) goes out."""
        self.store = store
        self.key = key
        self.state = state
        """The session in memory; each commit of this run is mirrored into it."""
        self.transcript = state.transcript
        self.record = record
        """The turn's record as last committed."""
        self._emit_to = emit
        self._seq = 0
        self._clock = clock
        self.interrupted = asyncio.Event()
        """Set when the turn is to stop at its next checkpoint boundary."""
        self._timed_out = False
        self._summary: tuple[str, Message] | None = None
        self.is_replay = False
        """This run picks the turn up again (a crash, a takeover, an answer): what the turn
        committed before is read back from the store, and checked against the loop."""
        self._stored: dict[str, JsonValue] | None = None
        self.unplaced: dict[str, JsonValue] = {}
        """The batch's calls whose result is committed but not yet in the transcript (it
        waits for a call ahead of it), by call id: their `settled_memo`."""
        self.kinds: dict[int, dict[str, str]] = {}
        """The kind recorded for each call (`agent.engine.turn.kinds`), by the transcript
        index of the reply that made it."""
        given = record.input
        # A turn admitted with no policy (before policies existed, or by a program) runs
        # under its source's policy as the agent has it now, rather than with every tool.
        policy = given.policy or (
            resolve_policy(agent, given.event.source) if given.event else None
        )
        denied = frozenset(policy.deny_tools) if policy else frozenset()
        # the tool that gives the turn's result is the agent's contract, not a policy's
        self.denied = denied - {OUTPUT_TOOL} if agent.output_type is not None else denied
        """Tools this turn's policy denies: never listed, and called, unknown."""
        self.system = policy.system if policy else agent.instructions
        self.tool_specs = tuple(s for s in agent.tool_specs if s.name not in self.denied)

    @property
    def turn_id(self) -> str:
        """The turn this run drives."""
        return self.record.turn_id

    @property
    def summary(self) -> Message | None:
        """What stands for the compacted turns in a request, if any were."""
        if self.state.summary is None:
            return None
        if self._summary is None or self._summary[0] != self.state.summary:
            # one message per summary, so a request's view is the same from step to step
            self._summary = (self.state.summary, summary_message(self.state.summary))
        return self._summary[1]

    def now(self) -> float:
        """The runtime's clock, in seconds since the epoch."""
        return self._clock()

    def cancel_reason(self) -> str | None:
        """Why the turn is to stop: its stored cancel request, or ``timeout``; None to go on."""
        reason = self.state.cancels.get(self.turn_id)
        if reason is None and self._timed_out:
            reason = "timeout"
        return reason

    def stop_if_cancelled(self) -> None:
        """Raise `Interrupted` at a checkpoint boundary if the turn is to stop."""
        if self.cancel_reason() is not None:
            raise Interrupted

    def time_up(self) -> None:
        """The turn ran out of time: it stops at its next boundary, as if cancelled."""
        self._timed_out = True
        self.interrupted.set()

    def tool_for(self, name: str) -> Tool | None:
        """The tool a call names, as this process declares it; None if unknown or denied."""
        return None if name in self.denied else self.agent.tools_by_name.get(name)

    async def stored_steps(self) -> dict[str, JsonValue]:
        """The step memos the turn had committed when this run began, read once.

        Only a replay has any; the steps this run writes are known in memory.
        """
        if self._stored is None:
            self._stored = (
                await self.store.load_steps(self.key, self.turn_id) if self.is_replay else {}
            )
        return self._stored

    async def answers(self) -> dict[str, JsonValue]:
        """This turn's stored answers by step id (only a replay has any: an answer resumes it)."""
        return {k: v for k, v in (await self.stored_steps()).items() if k.startswith("input:")}

    async def commit(self, commit: Commit) -> None:
        """Write ``commit`` under this run's lease, then mirror it into memory."""
        # Only the session's own worker awaits here, and cancelling it means the runtime
        # is closing and drops this state, so a write that lands after the cancel is fine.
        commit = dataclasses.replace(commit, holder=self.holder)
        await self.store.commit(self.key, commit)
        self.mirror(commit)

    def mirror(self, commit: Commit) -> None:
        """Mirror ``commit``, written, into the session's state and this run's record."""
        apply_commit(self.state, commit)
        self.record = self.state.turns[self.turn_id]

    async def commit_through_cancel(self, commit: Commit) -> bool:
        """Write ``commit`` and mirror it even if this run is cancelled while it waits.

        For a write whose landing must be known here: one that counts a run of the
        turn, which a clean stop of the runtime takes back (see `TurnRecord.runs`).

        Returns:
            Whether the run was cancelled meanwhile (the caller re-raises it).
        """
        commit = dataclasses.replace(commit, holder=self.holder)
        writing = asyncio.ensure_future(self.store.commit(self.key, commit))
        cancelled = False
        while not writing.done():
            try:
                await asyncio.shield(writing)
            except asyncio.CancelledError:
                cancelled = True
            except Exception:
                break
        writing.result()  # a write that failed raises its error here
        self.mirror(commit)
        return cancelled

    def emit(self, event_type: type[Any], **fields: Any) -> None:
        """Emit an event of this turn, numbered in the order this run emits them."""
        self._seq += 1
        event = event_type(
            agent=self.key.agent,
            session=self.key.session_id,
            turn_id=self.turn_id,
            seq=self._seq,
            **fields,
        )
        self._emit_to(event)


def is_being_cancelled() -> bool:
    """Whether the task running this turn was asked to stop (a shutdown, a deploy)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
