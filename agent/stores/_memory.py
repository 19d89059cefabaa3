"""The in-memory session store: for tests and throwaway runs.

It has no transactional handle, so a local tool that asks for ``ctx.store``
fails its turn with `FatalToolError`; exactly-once holds only on SQLite.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agent._json import JsonValue
from agent.core.feedback import Feedback
from agent.core.messages import Message
from agent.core.records import (
    Archive,
    Commit,
    InboxItem,
    LeaseTaken,
    LogBounds,
    SessionKey,
    SessionSummary,
    StoredSession,
    apply_session_writes,
)
from agent.core.transcript import Transcript
from agent.core.turns import TurnRecord
from agent.stores import _rules
from agent.stores._memory_archive import expire_archive, file_away, take_steps
from agent.stores._rules import STILL_IN_PLAY, Lease

__all__ = ["MemoryStore"]

T = TypeVar("T")


class _Session:
    """One session's rows; it exists once a write was allowed, never on a read."""

    __slots__ = ("archive", "deliveries", "events", "last_event", "live", "messages", "steps")

    def __init__(self) -> None:
        self.live = StoredSession()
        """Status, turns, cancels, generation and pending reset, as a load returns them.
        Its transcript stays empty: ``messages`` holds it, by the index each commit gave."""
        self.messages: dict[int, Message] = {}
        self.steps: dict[tuple[str, str], JsonValue] = {}
        self.archive: dict[int, Archive] = {}
        self.deliveries: dict[str, JsonValue] = {}
        self.events: dict[int, tuple[float, JsonValue]] = {}
        self.last_event = 0


class MemoryStore:
    """Sessions in a dict; lost with the process."""

    def __init__(self) -> None:
        self._sessions: dict[SessionKey, _Session] = {}
        self._leases: dict[SessionKey, Lease] = {}
        self._place_policies: dict[tuple[str, str], JsonValue] = {}
        self._feedback: dict[tuple[SessionKey, str, str], Feedback] = {}
        self._inbox: dict[int, tuple[SessionKey, InboxItem]] = {}
        self._inbox_ids = itertools.count(1)

    async def close(self) -> None:
        """Nothing to release; here so both stores close alike."""

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _session(self, key: SessionKey) -> _Session:
        """The session a write goes to, made on the first one."""
        return self._sessions.setdefault(key, _Session())

    async def load(self, key: SessionKey) -> StoredSession:
        s = self._sessions.get(key)
        if s is None:
            return StoredSession()
        live = s.live
        return StoredSession(
            status=live.status,
            transcript=Transcript(
                (s.messages[i] for i in sorted(s.messages)), base=live.transcript.base
            ),
            turns={t.turn_id: t for t in sorted(live.turns.values(), key=lambda t: t.seq)},
            cancels=dict(live.cancels),
            generation=live.generation,
            reset_through=live.reset_through,
            retired=set(live.retired),
            hold=live.hold,
            summary=live.summary,
            compacted_through=live.compacted_through,
            summary_since=live.summary_since,
        )

    async def load_steps(self, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
        s = self._sessions.get(key)
        steps = s.steps if s is not None else {}
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
        return self._turns_in(_rules.UNFINISHED)

    async def suspended_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return self._turns_in(_rules.SUSPENDED)

    async def interrupted_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        return self._turns_in(_rules.INTERRUPTED)

    async def cancelled_suspensions(self) -> list[SessionKey]:
        return [
            key
            for key, s in self._sessions.items()
            if any(
                t.status in _rules.SUSPENDED and t.turn_id in s.live.cancels
                for t in s.live.turns.values()
            )
        ]

    async def pending_resets(self) -> list[SessionKey]:
        return [key for key, s in self._sessions.items() if s.live.reset_through is not None]

    async def is_archived(self, key: SessionKey, turn_id: str) -> bool:
        s = self._sessions.get(key)
        return s is not None and any(turn_id in a.turns for a in s.archive.values())

    async def load_archive(self, key: SessionKey, generation: int) -> Archive | None:
        s = self._sessions.get(key)
        return copy.deepcopy(s.archive.get(generation)) if s is not None else None

    async def take_lease(
        self, key: SessionKey, holder: str, *, now: float, until: float, over: str | None = None
    ) -> LeaseTaken:
        taken = _rules.take_lease(self._leases.get(key), holder=holder, now=now, over=over)
        if taken.granted:
            self._leases[key] = Lease(holder, until)
        return taken

    async def renew_lease(self, key: SessionKey, holder: str, *, until: float) -> bool:
        if not _rules.is_held_by(self._leases.get(key), holder):
            return False
        self._leases[key] = Lease(holder, until)
        return True

    async def drop_lease(self, key: SessionKey, holder: str) -> None:
        if _rules.is_held_by(self._leases.get(key), holder):
            self._leases[key] = Lease(holder, _rules.LET_GO)

    async def save_place_policy(self, source: str, place: str, policy: JsonValue | None) -> None:
        if policy is None:
            self._place_policies.pop((source, place), None)
        else:
            self._place_policies[source, place] = copy.deepcopy(policy)

    async def place_policies(self, source: str) -> dict[str, JsonValue]:
        return {p: copy.deepcopy(v) for (s, p), v in self._place_policies.items() if s == source}

    async def save_feedback(self, feedback: Feedback) -> None:
        self._feedback[feedback.key, feedback.turn_id, feedback.by] = feedback

    async def feedback_since(self, since: float, *, agent: str | None = None) -> list[Feedback]:
        found = [
            f
            for f in self._feedback.values()
            if f.at >= since and (agent is None or f.key.agent == agent)
        ]
        return sorted(found, key=_rules.feedback_order)

    async def has_session(self, key: SessionKey) -> bool:
        s = self._sessions.get(key)
        return s is not None and _rules.counts_as_a_session(s.live)

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

    async def expire_history(self, agent: str, *, ended_before: float, at: float) -> int:
        expired = 0
        for key, s in self._sessions.items():
            if key.agent == agent:
                for generation in list(s.archive):
                    expired += expire_archive(s.archive, generation, at, ended_before)
        return expired

    async def expired_sessions(self, agent: str, *, ended_before: float) -> list[str]:
        def is_due(live: StoredSession) -> bool:
            since = live.summary_since
            return (since is not None and since < ended_before) or any(
                t.ended_at is not None and t.ended_at < ended_before for t in live.turns.values()
            )

        return sorted(
            key.session_id
            for key, s in self._sessions.items()
            if key.agent == agent and is_due(s.live)
        )

    async def crowded_sessions(self, agent: str, *, more_than: int) -> list[str]:
        return sorted(
            key.session_id
            for key, s in self._sessions.items()
            if key.agent == agent and len(s.live.turns) > more_than
        )

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
            if not _rules.counts_as_a_session(s.live):
                continue
            first = min(s.live.turns.values(), key=lambda t: t.seq, default=None)
            found.append(
                SessionSummary(
                    session_id=key.session_id,
                    status=s.live.status,
                    title=_rules.title_of(first),
                    last_event=s.last_event,
                    updated_at=max((at for at, _ in s.events.values()), default=None),
                )
            )
        return _rules.newest_first(found)

    def _turns_in(self, statuses: frozenset[str]) -> list[tuple[SessionKey, TurnRecord]]:
        found = [
            (key, turn)
            for key, s in self._sessions.items()
            for turn in s.live.turns.values()
            if turn.status in statuses
        ]
        return sorted(found, key=lambda kt: (kt[0].agent, kt[0].session_id, kt[1].seq))

    def _apply(self, key: SessionKey, commit: Commit) -> None:
        # every check first, so a refused commit writes nothing, as a rolled-back
        # transaction; a session that is new here is kept only once they pass
        s = self._sessions.get(key) or _Session()
        live = s.live
        held = self._leases.get(key)
        _rules.check_commit(
            key,
            commit,
            holder=held.holder if held is not None else None,
            status_of=lambda turn_id: _status_of(live, turn_id),
            reset_through=live.reset_through,
            is_index_taken=lambda index: index in s.messages,
            is_step_taken=lambda turn_id, step_id: (turn_id, step_id) in s.steps,
            is_in_inbox=lambda item: self._inbox.get(item, (None,))[0] == key,
        )
        if commit.compact is not None:
            through = commit.compact.through
            unended = [
                t for t in live.turns.values() if t.seq <= through and t.status in STILL_IN_PLAY
            ]
            _rules.check_compaction(key, commit.compact, len(unended), live.generation)
        self._sessions[key] = s
        for item in commit.inbox_done:
            del self._inbox[item]
        for m in commit.messages:
            s.messages[m.index] = m.message
        for st in commit.steps:
            s.steps[(st.turn_id, st.step_id)] = copy.deepcopy(st.result)
        generation = live.generation  # the one an archive in this commit files away
        retired = apply_session_writes(live, commit)
        if commit.archive or commit.compact is not None:
            below = commit.compact.base if commit.compact is not None else None
            moved = sorted(i for i in s.messages if below is None or i < below)
            file_away(
                s.archive,
                generation,
                [s.messages.pop(i) for i in moved],
                retired,
                take_steps(s.steps, retired),
            )
            if commit.compact is not None and commit.compact.expire_at is not None:
                expire_archive(s.archive, generation, commit.compact.expire_at, None, retired)

    async def post_inbox(
        self, key: SessionKey, kind: str, ref: str, body: JsonValue, *, at: float
    ) -> bool:
        if any(k == key and (i.kind, i.ref) == (kind, ref) for k, i in self._inbox.values()):
            return False
        number = next(self._inbox_ids)
        item = InboxItem(id=number, kind=kind, ref=ref, body=copy.deepcopy(body), at=at)
        self._inbox[number] = (key, item)
        return True

    async def read_inbox(self, key: SessionKey) -> list[InboxItem]:
        return [copy.deepcopy(item) for _, (k, item) in sorted(self._inbox.items()) if k == key]

    async def inbox_sessions(self) -> list[SessionKey]:
        return sorted({k for k, _ in self._inbox.values()}, key=lambda k: (k.agent, k.session_id))


def _status_of(live: StoredSession, turn_id: str) -> str | None:
    record = live.turns.get(turn_id)
    return record.status if record is not None else None
