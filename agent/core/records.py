"""What the engine and its stores exchange: keys, stored rows, and the one write, `Commit`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agent._json import JsonValue
from agent.core.messages import Message
from agent.core.transcript import Compaction, Transcript
from agent.core.turns import TurnRecord

__all__ = [
    "Archive",
    "Commit",
    "InboxItem",
    "LeaseTaken",
    "LogBounds",
    "SessionKey",
    "SessionStatus",
    "SessionSummary",
    "StoredMessage",
    "StoredSession",
    "StoredStep",
    "apply_commit",
    "apply_session_writes",
    "archive_generation",
    "compact_turns",
]


SessionStatus = Literal["new", "idle", "running", "suspended"]


@dataclass(frozen=True, slots=True)
class SessionKey:
    """Where a session lives: an agent's name and the session's id."""

    agent: str
    session_id: str

    def __str__(self) -> str:
        return f"{self.agent}/{self.session_id}"


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A transcript message at its index."""

    index: int
    message: Message


@dataclass(frozen=True, slots=True)
class StoredStep:
    """A step's memo: ``model:<n>``, ``tool:<n>:<call_id>`` or ``input:<turn>:<id>``."""

    step_id: str
    turn_id: str
    result: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """Everything one transaction writes for a session."""

    messages: tuple[StoredMessage, ...] = ()
    steps: tuple[StoredStep, ...] = ()
    turns: tuple[TurnRecord, ...] = ()
    """Each inserted, or replacing the stored record with the same id."""
    status: SessionStatus | None = None
    expect: tuple[tuple[str, str], ...] = ()
    """``(turn id, status)`` pairs: write only if each stored turn still has that
    status; otherwise write nothing and raise `StoreConflictError` (another writer
    got there first)."""
    cancels: tuple[tuple[str, str], ...] = ()
    """``(turn id, reason)``: cancel requests, stored before anything acts on them so
    that a turn lost to a crash is finished as cancelled, not replayed. A turn keeps
    the first request it got."""
    reset_through: int | None = None
    """Mark a reset pending: the turns up to this sequence number are to be archived."""
    archive: bool = False
    """Carry out the pending reset: move the transcript, the steps and the turns up to
    ``reset_through`` into the archive under the current generation, then start the
    next generation with status ``new``."""
    holder: str | None = None
    """The writer's lease: write only if no other holder took the session's lease
    since; otherwise write nothing and raise `LeaseLostError` (a process that
    stalled past its lease must not write over the one that took the session on)."""
    inbox_done: tuple[int, ...] = ()
    """Inbox items this commit carries out: deleted with it, so each is carried out
    once. One already gone raises `StoreConflictError` and writes nothing."""
    hold: str | None = None
    """Hold the session, saying why: its queued turns wait until the hold is released."""
    release_hold: bool = False
    """Release the session's hold (before this commit's own ``hold``, if it has one)."""
    compact: Compaction | None = None
    """Move the session's oldest turns out of its live state, a summary in their place."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxItem:
    """Work another process handed to the session's owner: a start, cancel, answer or reset."""

    id: int
    """Its number in the store, which a `Commit` names in ``inbox_done``."""
    kind: str
    ref: str
    """What it is about (the turn id of a start or cancel): one item per kind and ref."""
    body: JsonValue
    at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTaken:
    """What `SessionStore.take_lease` found: who holds the session's lease now."""

    granted: bool
    """Whether the caller holds it now."""
    holder: str
    """The caller when granted; otherwise the other holder."""
    previous: str | None = None
    """When granted: who held it before (None for nobody, ever). Another holder means
    another process may have written the session since the caller last read it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogBounds:
    """Where a session's event log stands: what is kept of it, and its last position."""

    first: int
    """Position of the oldest entry kept; ``last + 1`` when none is kept."""
    last: int
    """Position of the newest entry ever logged (0 for none); pruning never lowers it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSummary:
    """One line of a list of sessions."""

    session_id: str
    status: SessionStatus
    title: str | None
    """The opening text of the first live turn, if any."""
    last_event: int
    """Position of the session's newest logged event (0 for none)."""
    updated_at: float | None
    """When its newest kept event was logged."""


@dataclass(slots=True, kw_only=True)
class StoredSession:
    """What the engine loads once per session and then keeps up to date itself."""

    status: SessionStatus = "new"
    transcript: Transcript = field(default_factory=Transcript)
    """The live messages; compaction moved those below ``transcript.base`` out."""
    turns: dict[str, TurnRecord] = field(default_factory=dict)
    cancels: dict[str, str] = field(default_factory=dict)
    """Stored cancel requests of turns, by turn id: the reason."""
    generation: int = 0
    """How many resets this session went through; the live tables hold this one."""
    reset_through: int | None = None
    """Set while a reset is pending: it archives the turns up to this sequence number."""
    retired: set[str] = field(default_factory=set)
    """Ids of turns a reset archived: a redelivery of one is not a new turn. Those a
    compaction or retention moved out are asked of the store instead."""
    hold: str | None = None
    """Why the session is held (a session interrupt, a poison turn), if it is: its
    queued turns wait, and new ones queue behind them, until the hold is released."""
    summary: str | None = None
    """What the compacted turns said, as the model summarised them; sent before the
    live messages."""
    compacted_through: int = 0
    """The sequence number of the newest compacted turn: new turns number above it."""
    summary_since: float | None = None
    """When the oldest turn the summary speaks of ended: past the agent's history
    retention from then, the summary gives way to a notice."""

    def next_seq(self) -> int:
        """The sequence number of the next turn admitted."""
        return max((t.seq for t in self.turns.values()), default=self.compacted_through) + 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Archive:
    """One generation of a session, as a reset archived it."""

    generation: int
    transcript: list[Message]
    turns: dict[str, TurnRecord]
    steps: dict[str, dict[str, JsonValue]]
    """Step memos by turn id, then step id."""


def apply_commit(state: StoredSession, commit: Commit) -> None:
    """Mirror a committed transaction into the session's in-memory state."""
    state.transcript.extend(stored.message for stored in commit.messages)
    apply_session_writes(state, commit)


def apply_session_writes(state: StoredSession, commit: Commit) -> dict[str, TurnRecord]:
    """Apply what ``commit`` writes beside the transcript and the steps, as every store does.

    The engine's mirror and the memory store both write through here, after the
    commit's messages; the SQLite store writes the same in SQL. Turn records
    replace those with the same id; a cancel request lands only on a turn the
    session has, and the first one a turn got is kept; then the status, a
    pending reset, and last the archive, which the commit's own ``reset_through``
    may have just asked for.

    Returns:
        The turns the commit's archive retired, by id (empty when it archived nothing).
    """
    for record in commit.turns:
        state.turns[record.turn_id] = record
    for turn_id, reason in commit.cancels:
        if turn_id in state.turns:
            state.cancels.setdefault(turn_id, reason)
    if commit.status is not None:
        state.status = commit.status
    if commit.release_hold:
        state.hold = None
    if commit.hold is not None:
        state.hold = commit.hold
    if commit.reset_through is not None:
        state.reset_through = commit.reset_through
    if commit.compact is not None:
        return compact_turns(state, commit.compact)
    return archive_generation(state) if commit.archive else {}


def compact_turns(state: StoredSession, compaction: Compaction) -> dict[str, TurnRecord]:
    """Carry out a compaction: its turns and messages leave the live state.

    Returns:
        The turns it moved out, by id, for the caller to keep if it keeps an archive.
    """
    moving = {t.turn_id: t for t in state.turns.values() if t.seq <= compaction.through}
    for turn_id in moving:
        # its id is not kept in ``retired``: the store answers for it (`is_archived`), so
        # what a long session holds stays flat
        del state.turns[turn_id]
        state.cancels.pop(turn_id, None)
    state.transcript.drop_below(compaction.base)
    state.summary, state.summary_since = compaction.summary, compaction.since
    state.compacted_through = max(state.compacted_through, compaction.through)
    return moving


def archive_generation(state: StoredSession) -> dict[str, TurnRecord]:
    """Carry out the pending reset: retire its turns and open the next generation.

    The turns up to ``reset_through`` leave the live state (their cancel requests
    with them, their ids into ``retired``), the transcript is emptied in place (a
    turn run holds that list), and the session starts afresh as ``new``. What the
    generation held is for the caller to keep, if it keeps an archive.

    Returns:
        The retired turns, by id, in the order the session held them.
    """
    through = state.reset_through
    assert through is not None, "a store refuses an archive with no reset pending"
    retiring = {t.turn_id: t for t in state.turns.values() if t.seq <= through}
    state.transcript.restart()
    state.summary, state.summary_since, state.compacted_through = None, None, 0
    for turn_id in retiring:
        del state.turns[turn_id]
        state.cancels.pop(turn_id, None)
        state.retired.add(turn_id)
    state.generation += 1
    state.reset_through = None
    state.status = "new"
    return retiring
