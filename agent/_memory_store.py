"""The in-memory session store: for tests and throwaway runs.

It has no transactional handle, so a local tool that asks for ``ctx.store``
fails its turn with `FatalToolError`; exactly-once holds only on SQLite.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any, TypeVar

from agent.errors import StoreConflictError, StoreError
from agent.messages import JsonValue
from agent.ports import Commit, SessionKey, SessionStatus, StoredSession
from agent.turns import TURN_STATUSES_UNFINISHED, TurnRecord

__all__ = ["MemoryStore"]

T = TypeVar("T")


class _Session:
    __slots__ = ("messages", "status", "steps", "turns")

    def __init__(self) -> None:
        self.status: SessionStatus = "new"
        self.messages: dict[int, Any] = {}
        self.steps: dict[tuple[str, str], JsonValue] = {}
        self.turns: dict[str, TurnRecord] = {}


class MemoryStore:
    """Sessions in a dict; lost with the process."""

    def __init__(self) -> None:
        self._sessions: dict[SessionKey, _Session] = {}

    async def close(self) -> None:
        """Nothing to release; here so both stores close alike."""

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _session(self, key: SessionKey) -> _Session:
        return self._sessions.setdefault(key, _Session())

    async def load(self, key: SessionKey) -> StoredSession:
        s = self._session(key)
        turns = sorted(s.turns.values(), key=lambda t: t.seq)
        return StoredSession(
            status=s.status,
            transcript=[s.messages[i] for i in sorted(s.messages)],
            turns={t.turn_id: t for t in turns},
        )

    async def load_steps(self, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
        steps = self._session(key).steps
        return {step: copy.deepcopy(v) for (turn, step), v in steps.items() if turn == turn_id}

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        self._apply(key, commit)

    async def commit_with(
        self,
        key: SessionKey,
        work: Callable[[Any], T],
        record: Callable[[T | Exception], Commit],
    ) -> Commit:
        outcome: T | Exception
        try:
            # off the loop, as a local tool may block; there is no handle to lend
            outcome = await asyncio.to_thread(work, None)
        except Exception as exc:
            outcome = exc
        commit = record(outcome)
        self._apply(key, commit)
        return commit

    async def unfinished_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return self._turns_in(TURN_STATUSES_UNFINISHED)

    async def suspended_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return self._turns_in(frozenset({"suspended"}))

    def _turns_in(self, statuses: frozenset[str]) -> list[tuple[SessionKey, TurnRecord]]:
        found = [
            (key, turn)
            for key, s in self._sessions.items()
            for turn in s.turns.values()
            if turn.status in statuses
        ]
        return sorted(found, key=lambda kt: (kt[0].agent, kt[0].session_id, kt[1].seq))

    def _apply(self, key: SessionKey, commit: Commit) -> None:
        s = self._session(key)
        # check everything first so a clash writes nothing, as a rolled-back transaction
        if commit.expect_status is not None:
            assert commit.turn is not None
            stored = s.turns.get(commit.turn.turn_id)
            if stored is None or stored.status != commit.expect_status:
                raise StoreConflictError(
                    f"{key}: turn {commit.turn.turn_id} is no longer {commit.expect_status}"
                )
        for m in commit.messages:
            if m.index in s.messages:
                raise StoreError(f"{key}: transcript index {m.index} is already taken")
        for st in commit.steps:
            if (st.turn_id, st.step_id) in s.steps:
                raise StoreError(f"{key}: step {st.step_id} is already committed")
        for m in commit.messages:
            s.messages[m.index] = m.message
        for st in commit.steps:
            s.steps[(st.turn_id, st.step_id)] = copy.deepcopy(st.result)
        if commit.turn is not None:
            s.turns[commit.turn.turn_id] = commit.turn
        if commit.status is not None:
            s.status = commit.status
