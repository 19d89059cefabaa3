"""The in-memory session store: for tests and throwaway runs.

It has no transactional handle, so a local tool that asks for ``ctx.store``
fails its turn with `FatalToolError`; exactly-once holds only on SQLite.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agent._json import JsonValue
from agent.core.records import (
    Archive,
    Commit,
    LeaseTaken,
    LogBounds,
    SessionKey,
    SessionStatus,
    SessionSummary,
    StoredSession,
)
from agent.core.turns import TURN_STATUSES_UNFINISHED, TurnRecord
from agent.errors import LeaseLostError, StoreConflictError, StoreError

__all__ = ["MemoryStore"]

T = TypeVar("T")


class _Session:
    __slots__ = (
        "archive",
        "cancels",
        "deliveries",
        "events",
        "generation",
        "last_event",
        "messages",
        "reset_through",
        "status",
        "steps",
        "turns",
    )

    def __init__(self) -> None:
        self.status: SessionStatus = "new"
        self.messages: dict[int, Any] = {}
        self.steps: dict[tuple[str, str], JsonValue] = {}
        self.turns: dict[str, TurnRecord] = {}
        self.cancels: dict[str, str] = {}
        self.generation = 0
        self.reset_through: int | None = None
        self.archive: dict[int, Archive] = {}
        self.deliveries: dict[str, JsonValue] = {}
        self.events: dict[int, tuple[float, JsonValue]] = {}
        self.last_event = 0


class MemoryStore:
    """Sessions in a dict; lost with the process."""

    def __init__(self) -> None:
        self._sessions: dict[SessionKey, _Session] = {}
        self._leases: dict[SessionKey, tuple[str, float]] = {}
        self._place_policies: dict[tuple[str, str], JsonValue] = {}

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
            cancels=dict(s.cancels),
            generation=s.generation,
            reset_through=s.reset_through,
            retired={turn_id for archive in s.archive.values() for turn_id in archive.turns},
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

    async def cancelled_parks(self) -> list[SessionKey]:
        return [
            key
            for key, s in self._sessions.items()
            if any(t.status == "suspended" and t.turn_id in s.cancels for t in s.turns.values())
        ]

    async def pending_resets(self) -> list[SessionKey]:
        return [key for key, s in self._sessions.items() if s.reset_through is not None]

    async def load_archive(self, key: SessionKey, generation: int) -> Archive | None:
        archive = self._session(key).archive.get(generation)
        return copy.deepcopy(archive)

    async def take_lease(
        self, key: SessionKey, holder: str, *, now: float, until: float, over: str | None = None
    ) -> LeaseTaken:
        held = self._leases.get(key)
        if held is not None and held[0] not in {holder, over} and held[1] > now:
            return LeaseTaken(granted=False, holder=held[0])
        self._leases[key] = (holder, until)
        return LeaseTaken(granted=True, holder=holder, previous=held[0] if held else None)

    async def renew_lease(self, key: SessionKey, holder: str, *, until: float) -> bool:
        held = self._leases.get(key)
        if held is None or held[0] != holder:
            return False
        self._leases[key] = (holder, until)
        return True

    async def drop_lease(self, key: SessionKey, holder: str) -> None:
        held = self._leases.get(key)
        if held is not None and held[0] == holder:
            self._leases[key] = (holder, 0.0)

    async def save_place_policy(self, source: str, place: str, policy: JsonValue | None) -> None:
        if policy is None:
            self._place_policies.pop((source, place), None)
        else:
            self._place_policies[source, place] = copy.deepcopy(policy)

    async def place_policies(self, source: str) -> dict[str, JsonValue]:
        return {p: copy.deepcopy(v) for (s, p), v in self._place_policies.items() if s == source}

    async def has_session(self, key: SessionKey) -> bool:
        s = self._sessions.get(key)
        return s is not None and bool(s.turns or s.generation)

    async def save_delivery(self, key: SessionKey, turn_id: str, state: JsonValue | None) -> None:
        deliveries = self._session(key).deliveries
        if state is None:
            deliveries.pop(turn_id, None)
        else:
            deliveries[turn_id] = copy.deepcopy(state)

    async def claim_delivery(self, key: SessionKey, turn_id: str, state: JsonValue) -> bool:
        deliveries = self._session(key).deliveries
        if turn_id in deliveries:
            return False
        deliveries[turn_id] = copy.deepcopy(state)
        return True

    async def deliveries(self, agent: str) -> list[tuple[SessionKey, str, JsonValue]]:
        return [
            (key, turn_id, copy.deepcopy(state))
            for key, s in self._sessions.items()
            if key.agent == agent
            for turn_id, state in s.deliveries.items()
        ]

    async def load_delivery(self, key: SessionKey, turn_id: str) -> JsonValue | None:
        s = self._sessions.get(key)
        return copy.deepcopy(s.deliveries.get(turn_id)) if s is not None else None

    async def append_events(
        self, key: SessionKey, bodies: Sequence[JsonValue], *, at: float
    ) -> list[int]:
        s = self._session(key)
        positions = []
        for body in bodies:
            s.last_event += 1
            s.events[s.last_event] = (at, copy.deepcopy(body))
            positions.append(s.last_event)
        return positions

    async def read_events(
        self, key: SessionKey, *, after: int, limit: int
    ) -> list[tuple[int, JsonValue]]:
        s = self._sessions.get(key)
        if s is None:
            return []
        kept = sorted(position for position in s.events if position > after)[:limit]
        return [(position, copy.deepcopy(s.events[position][1])) for position in kept]

    async def event_bounds(self, key: SessionKey) -> LogBounds:
        s = self._sessions.get(key)
        if s is None:
            return LogBounds(first=1, last=0)
        return LogBounds(first=min(s.events, default=s.last_event + 1), last=s.last_event)

    async def prune_events(self, *, before: float) -> int:
        pruned = 0
        for s in self._sessions.values():
            for position in [p for p, (at, _) in s.events.items() if at < before]:
                del s.events[position]
                pruned += 1
        return pruned

    async def list_sessions(self, agent: str, *, prefix: str = "") -> list[SessionSummary]:
        found = []
        for key, s in self._sessions.items():
            if key.agent != agent or not key.session_id.startswith(prefix):
                continue
            first = min(s.turns.values(), key=lambda t: t.seq, default=None)
            found.append(
                SessionSummary(
                    session_id=key.session_id,
                    status=s.status,
                    title=first.input.text if first is not None else None,
                    last_event=s.last_event,
                    updated_at=max((at for at, _ in s.events.values()), default=None),
                )
            )
        return sorted(found, key=lambda f: (f.updated_at or 0.0, f.session_id), reverse=True)

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
        held = self._leases.get(key)
        if commit.holder is not None and held is not None and held[0] != commit.holder:
            raise LeaseLostError(f"{key}: another process took this session on")
        for turn_id, expected in commit.expect:
            stored = s.turns.get(turn_id)
            if stored is None or stored.status != expected:
                raise StoreConflictError(f"{key}: turn {turn_id} is no longer {expected}")
        if commit.archive and s.reset_through is None and commit.reset_through is None:
            raise StoreError(f"{key}: no reset is pending to carry out")
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
        for record in commit.turns:
            s.turns[record.turn_id] = record
        for turn_id, reason in commit.cancels:
            if turn_id in s.turns:
                s.cancels.setdefault(turn_id, reason)
        if commit.status is not None:
            s.status = commit.status
        if commit.reset_through is not None:
            s.reset_through = commit.reset_through
        if commit.archive:
            self._archive(s)

    @staticmethod
    def _archive(s: _Session) -> None:
        through = s.reset_through
        assert through is not None
        retiring = {t.turn_id: t for t in s.turns.values() if t.seq <= through}
        steps: dict[str, dict[str, JsonValue]] = {}
        for (turn_id, step_id), result in list(s.steps.items()):
            if turn_id in retiring:
                steps.setdefault(turn_id, {})[step_id] = result
                del s.steps[(turn_id, step_id)]
        s.archive[s.generation] = Archive(
            generation=s.generation,
            transcript=[s.messages[i] for i in sorted(s.messages)],
            turns=retiring,
            steps=steps,
        )
        s.messages.clear()
        for turn_id in retiring:
            del s.turns[turn_id]
            s.cancels.pop(turn_id, None)
        s.generation += 1
        s.reset_through = None
        s.status = "new"
