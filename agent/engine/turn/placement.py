"""Where a tool call's result goes: into the transcript in call order, whatever order calls end in.

A batch's calls may finish in any order, but the transcript holds their
results in the order the model asked for them, so that a replay, and the next
model request, read the same history however the work settled. A call that
finishes while a call ahead of it is still owed commits its result as the
memo of its step (`settled_memo`) and waits; the call at the head of the batch
commits its step, its message and the messages of the settled calls right
behind it, in one transaction.

`OneByOne` is the shape before calls ran concurrently: each call is the head
when it ends, so its step and message commit together, as they always did.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent._json import JsonValue
from agent.core.messages import ToolCall, ToolMessage
from agent.core.records import Commit, StoredMessage, StoredStep
from agent.engine.turn.commits import settled_memo
from agent.engine.turn.context import RunContext

__all__ = ["InCallOrder", "OneByOne", "Placement"]


class Placement:
    """Commits the results of one batch's calls; `OneByOne` appends each as it ends."""

    def __init__(self, run: RunContext) -> None:
        self._run = run
        self.lock = asyncio.Lock()
        """Held by each commit of the batch, so two results never claim one index (and a
        local call, inside its transaction, runs alone)."""

    def commit_for(self, step: str, message: ToolMessage) -> Commit:
        """What records ``message``, the result of the call of ``step``."""
        index = len(self._run.transcript)
        return Commit(
            messages=(StoredMessage(index, message),),
            steps=(StoredStep(step, self._run.turn_id, _placed(index, message)),),
        )

    def committed(self, commit: Commit, message: ToolMessage) -> None:
        """``commit`` (from `commit_for`) is written and mirrored into memory."""

    async def record(self, step: str, message: ToolMessage) -> None:
        """Commit a remote call's result (or any call's that ran no transaction)."""
        async with self.lock:
            commit = self.commit_for(step, message)
            await self._run.commit(commit)
            self.committed(commit, message)

    async def record_local(
        self,
        step: str,
        work: Callable[[Any], JsonValue],
        outcome_message: Callable[[JsonValue | Exception], ToolMessage],
    ) -> ToolMessage:
        """Run a local call's ``work`` and commit its result in the same transaction."""
        run = self._run
        async with self.lock:
            made: list[ToolMessage] = []

            def record(outcome: JsonValue | Exception) -> Commit:
                made.append(outcome_message(outcome))
                return dataclasses.replace(self.commit_for(step, made[-1]), holder=run.holder)

            commit = await run.store.commit_with(run.key, work, record)
            run.mirror(commit)
            self.committed(commit, made[-1])
            return made[-1]


class OneByOne(Placement):
    """Calls run one after another, so each result goes straight to the end of the transcript."""


class InCallOrder(Placement):
    """Calls run concurrently; results reach the transcript in the order they were asked for."""

    def __init__(
        self, run: RunContext, owed: Iterable[ToolCall], settled: Mapping[str, ToolMessage]
    ) -> None:
        super().__init__(run)
        self._unplaced = [call.id for call in owed]
        """The calls still without a message, in call order."""
        self._settled = dict(settled)
        """Of those, the ones whose result is committed as a memo, waiting for their turn."""
        run.unplaced = {call_id: settled_memo(m) for call_id, m in self._settled.items()}

    def head_commit(self) -> Commit | None:
        """The commit that places settled results at the head of the batch, if any are."""
        waiting = self._placeable(self._unplaced)
        if not waiting:
            return None
        at = len(self._run.transcript)
        return Commit(messages=tuple(StoredMessage(at + i, m) for i, m in enumerate(waiting)))

    async def place_head(self) -> None:
        """Place the settled results at the head of the batch (a replay may find some)."""
        async with self.lock:
            commit = self.head_commit()
            if commit is not None:
                await self._run.commit(commit)
                self._placed(len(commit.messages))

    def commit_for(self, step: str, message: ToolMessage) -> Commit:
        """Place ``message`` with the settled results behind it, or keep it as a memo."""
        run = self._run
        if not self._unplaced or self._unplaced[0] != message.call_id:
            # a call ahead of this one is still owed: the result waits as the step's memo
            return Commit(steps=(StoredStep(step, run.turn_id, settled_memo(message)),))
        behind = self._placeable(self._unplaced[1:])
        index = len(run.transcript)
        placed = (message, *behind)
        return Commit(
            messages=tuple(StoredMessage(index + i, m) for i, m in enumerate(placed)),
            steps=(StoredStep(step, run.turn_id, _placed(index, message)),),
        )

    def committed(self, commit: Commit, message: ToolMessage) -> None:
        """Note what ``commit`` placed, or that ``message`` now waits as a memo."""
        if commit.messages:
            self._placed(len(commit.messages))
        else:
            self._settled[message.call_id] = message
            self._run.unplaced[message.call_id] = settled_memo(message)

    def _placeable(self, ids: list[str]) -> list[ToolMessage]:
        """The settled results at the front of ``ids``, up to the first call still owed."""
        ready = []
        for call_id in ids:
            if call_id not in self._settled:
                break
            ready.append(self._settled[call_id])
        return ready

    def _placed(self, count: int) -> None:
        for call_id in self._unplaced[:count]:
            self._settled.pop(call_id, None)
            self._run.unplaced.pop(call_id, None)
        del self._unplaced[:count]


def _placed(index: int, message: ToolMessage) -> dict[str, JsonValue]:
    return {"message": index, "is_error": message.is_error}
