"""The rules every store keeps, written once: what a commit may write, who holds a lease.

Pure functions over values the store read, with no I/O: the memory store calls
them on its dicts and the SQLite store on the rows it selected, inside the
transaction that then writes. What a commit writes once it is allowed is shared
with the engine's mirror, in `agent.core.records.apply_session_writes`.

A store may keep a rule in its schema instead, where the database enforces it
more cheaply: SQLite refuses a taken transcript index or step by its primary
keys (so its message says "UNIQUE constraint failed"), and the memory store
checks both here, before writing anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from agent._json import loads
from agent.core.feedback import Feedback
from agent.core.records import (
    Commit,
    InboxItem,
    LeaseTaken,
    SessionKey,
    SessionSummary,
    StoredSession,
)
from agent.core.transcript import Compaction
from agent.core.turns import TURN_RECORD_ADAPTER, TURN_STATUSES_UNFINISHED, TurnRecord
from agent.errors import LeaseLostError, StoreConflictError, StoreError

__all__ = [
    "FEEDBACK_COLUMNS",
    "INTERRUPTED",
    "LET_GO",
    "STILL_IN_PLAY",
    "SUSPENDED",
    "UNFINISHED",
    "Lease",
    "check_commit",
    "check_compaction",
    "check_expected",
    "check_holder",
    "check_inbox_done",
    "check_reset_pending",
    "counts_as_a_session",
    "feedback_of",
    "feedback_order",
    "inbox_items",
    "is_held_by",
    "newest_first",
    "summaries",
    "take_lease",
    "title_of",
]

UNFINISHED: Final = TURN_STATUSES_UNFINISHED
"""The statuses of a turn still to run: `SessionStore.unfinished_turns` lists them."""
SUSPENDED: Final = frozenset({"suspended"})
"""The status of a turn suspended for a person's answer: `SessionStore.suspended_turns`."""
INTERRUPTED: Final = frozenset({"interrupted"})
"""The status of a turn the engine stopped for good: `SessionStore.interrupted_turns`."""
LET_GO: Final = 0.0
"""The ``until`` of a lease its holder let go: it ran out long ago, so anyone may take it."""


# -- commits -----------------------------------------------------------------


def check_holder(key: SessionKey, writer: str | None, holder: str | None) -> None:
    """The holder fence: refuse a write under a lease another process took since.

    Args:
        key: The session written.
        writer: The commit's ``holder`` (None: a write that takes no lease into account).
        holder: Who holds the session's lease now (None: nobody ever did).

    Raises:
        LeaseLostError: Another holder has the lease.
    """
    if writer is not None and holder is not None and holder != writer:
        raise LeaseLostError(f"{key}: another process took this session on")


def check_expected(
    key: SessionKey, expect: Iterable[tuple[str, str]], status_of: Callable[[str], str | None]
) -> None:
    """Refuse a commit whose expected turn statuses no longer hold.

    Args:
        key: The session written.
        expect: The commit's ``(turn id, status)`` pairs, checked in order.
        status_of: The stored status of a turn, None for a turn the session lacks.

    Raises:
        StoreConflictError: A turn is missing or has moved on; another writer got there first.
    """
    for turn_id, expected in expect:
        if status_of(turn_id) != expected:
            raise StoreConflictError(f"{key}: turn {turn_id} is no longer {expected}")


def check_compaction(
    key: SessionKey, compaction: Compaction | None, unended: int, generation: int
) -> None:
    """Refuse a compaction that would move out a turn still in play, or another generation's.

    Raises:
        StoreConflictError: ``unended`` turns it covers have not ended, or the session
            was reset since the compaction was planned.
    """
    if compaction is not None and compaction.generation != generation:
        raise StoreConflictError(
            f"{key}: compaction planned in generation {compaction.generation}, "
            f"the session is at {generation}; nothing was compacted"
        )
    if compaction is not None and unended:
        raise StoreConflictError(
            f"{key}: {unended} turn(s) up to {compaction.through} have not ended; "
            "nothing was compacted"
        )


STILL_IN_PLAY: Final = UNFINISHED | SUSPENDED
"""The statuses of the turns a compaction never moves out."""


def check_reset_pending(key: SessionKey, through: int | None) -> int:
    """Refuse an archive when no reset is pending; return the sequence number it covers.

    Raises:
        StoreError: Nothing asked for a reset (in the store, or in the same commit).
    """
    if through is None:
        raise StoreError(f"{key}: no reset is pending to carry out")
    return through


def check_commit(
    key: SessionKey,
    commit: Commit,
    *,
    holder: str | None,
    status_of: Callable[[str], str | None],
    reset_through: int | None,
    is_index_taken: Callable[[int], bool],
    is_step_taken: Callable[[str, str], bool],
    is_in_inbox: Callable[[int], bool] = lambda item: False,
) -> None:
    """Every check of a commit, in order, before it writes anything (all or nothing).

    Args:
        key: The session written.
        commit: What would be written.
        holder: Who holds the session's lease now.
        status_of: The stored status of a turn, None for a turn the session lacks.
        reset_through: The stored pending reset, or None.
        is_index_taken: Whether the transcript holds a message at an index.
        is_step_taken: Whether a turn's step (turn id, step id) has a memo already.
        is_in_inbox: Whether the session's inbox still holds an item.

    Raises:
        LeaseLostError: See `check_holder`.
        StoreConflictError: See `check_expected` and `check_inbox_done`.
        StoreError: An archive with no reset pending, or a taken index or step.
    """
    check_holder(key, commit.holder, holder)
    check_expected(key, commit.expect, status_of)
    if commit.archive:
        asked = commit.reset_through if commit.reset_through is not None else reset_through
        check_reset_pending(key, asked)
    for stored in commit.messages:
        if is_index_taken(stored.index):
            raise StoreError(f"{key}: transcript index {stored.index} is already taken")
    for step in commit.steps:
        if is_step_taken(step.turn_id, step.step_id):
            raise StoreError(f"{key}: step {step.step_id} is already committed")
    check_inbox_done(key, commit.inbox_done, is_in_inbox)


def check_inbox_done(
    key: SessionKey, done: Iterable[int], is_in_inbox: Callable[[int], bool]
) -> None:
    """Refuse a commit that carries out an inbox item another writer carried out already.

    Raises:
        StoreConflictError: The item is gone from the inbox.
    """
    for item in done:
        if not is_in_inbox(item):
            raise StoreConflictError(f"{key}: inbox item {item} was carried out already")


# -- leases ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lease:
    """A session's lease as stored: who holds it, and until when (epoch seconds)."""

    holder: str
    until: float


def take_lease(current: Lease | None, *, holder: str, now: float, over: str | None) -> LeaseTaken:
    """What taking a lease finds; when granted, the store writes ``Lease(holder, until)``.

    Granted when nobody ever held it, ``holder`` holds it already (a renewal), it
    ran out by ``now``, or its holder is ``over`` (one the caller found dead).
    """
    if current is None or current.holder in {holder, over} or current.until <= now:
        return LeaseTaken(
            granted=True, holder=holder, previous=None if current is None else current.holder
        )
    return LeaseTaken(granted=False, holder=current.holder)


def is_held_by(current: Lease | None, holder: str) -> bool:
    """Whether ``holder`` still holds the lease: it may renew it or let it go.

    A lease that ran out is still its holder's until someone takes it; one taken
    by another meanwhile is not, even once that one let it go.
    """
    return current is not None and current.holder == holder


# -- sessions ----------------------------------------------------------------


def counts_as_a_session(live: StoredSession) -> bool:
    """Whether a session exists for `has_session` and `list_sessions`.

    It does once it admitted a turn or was reset (a reset archives its turns and
    starts the next generation, so a session reset before its first turn is
    still one a person started over); a delivery, a logged event or a read
    alone makes no session.
    """
    return bool(live.turns) or live.generation > 0


def title_of(first: TurnRecord | None) -> str | None:
    """A session's title in a listing: the opening text of its first live turn."""
    return first.input.text if first is not None else None


def summaries(rows: Iterable[tuple[Any, ...]]) -> list[SessionSummary]:
    """A SQL store's `list_sessions` rows, newest first.

    Each row is a session's id, status, last log position, newest event's time and
    its first live turn's record (JSON, or None).
    """
    return newest_first(
        SessionSummary(
            session_id=session_id,
            status=status,
            title=title_of(TURN_RECORD_ADAPTER.validate_json(record) if record else None),
            last_event=last_event,
            updated_at=updated_at,
        )
        for session_id, status, last_event, updated_at, record in rows
    )


def inbox_items(rows: Iterable[tuple[Any, ...]]) -> list[InboxItem]:
    """A SQL store's inbox rows (id, kind, ref, body as JSON, at) as items."""
    return [
        InboxItem(id=number, kind=kind, ref=ref, body=loads(body), at=at)
        for number, kind, ref, body, at in rows
    ]


def newest_first(found: Iterable[SessionSummary]) -> list[SessionSummary]:
    """Sessions by their newest kept event, newest first; ties (and none) by id, descending."""
    return sorted(found, key=lambda s: (s.updated_at or 0.0, s.session_id), reverse=True)


def feedback_order(feedback: Feedback) -> tuple[float, str, str, str, str]:
    """The sort key of `SessionStore.feedback_since` (ascending): newest first, then by address.

    Text is compared as Python compares it (the SQL stores sort what they read with
    it), so every store lists ties alike, whatever the database's collation.
    """
    key = feedback.key
    return (-feedback.at, key.agent, key.session_id, feedback.turn_id, feedback.by)


FEEDBACK_COLUMNS: Final = "agent, session_id, turn_id, given_by, rating, comment, at"
"""What a SQL store selects for `feedback_of`."""


def feedback_of(rows: Iterable[tuple[Any, ...]]) -> list[Feedback]:
    """A SQL store's feedback rows (`FEEDBACK_COLUMNS`) as values, in `feedback_order`."""
    found = (
        Feedback(
            key=SessionKey(agent, session_id),
            turn_id=turn_id,
            by=by,
            rating=rating,
            comment=comment,
            at=at,
        )
        for agent, session_id, turn_id, by, rating, comment, at in rows
    )
    return sorted(found, key=feedback_order)
