"""The engine's three seams (`SessionStore`, `EventSink`, `Model`) and what crosses them.

The engine depends on these protocols only; the SQLite and memory stores and
the scripted model are implementations (the Anthropic model comes next). A
store's writes are whole transactions: the engine hands it a `Commit` (or a
piece of work that produces one inside the transaction) and never holds a
transaction open across an ``await``. A step's memo points at the transcript
message it committed with, so every result is stored once.

`SessionStore` is the composition of seven role protocols (`TurnStore`, `LeaseStore`,
`DeliveryStore`, `PlacePolicyStore`, `FeedbackStore`, `EventLogStore`, `InboxStore`), so code
that needs one role can say which; every store implements them all, and
``tests/agent/stores/`` holds the contract each method keeps on every store.
`EventWakeups` is optional: a store shared by processes that can tell each of
them when another appended to a log (PostgreSQL) has it; the others do not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from agent._json import JsonValue
from agent.core.events import TurnEvent
from agent.core.feedback import Feedback
from agent.core.model import ModelRequest, ModelStreamEvent
from agent.core.records import (
    Archive,
    Commit,
    InboxItem,
    LeaseTaken,
    LogBounds,
    SessionKey,
    SessionSummary,
    StoredSession,
)
from agent.core.turns import TurnRecord

__all__ = [
    "DeliveryStore",
    "EventLogStore",
    "EventSink",
    "EventWakeups",
    "FeedbackStore",
    "InboxStore",
    "InboxWakeups",
    "LeaseStore",
    "Model",
    "PlacePolicyStore",
    "SessionStore",
    "StoreHandle",
    "TurnStore",
]

T = TypeVar("T")


class StoreHandle(Protocol):
    """The store's own connection, lent to a local tool inside the step's transaction.

    Writes made through it commit or roll back with the step's checkpoint. Its SQL
    is the store's own dialect, placeholders included: ``paramstyle`` says which, in
    DB-API terms (``qmark``: SQLite's ``?``; ``format``: PostgreSQL's ``%s``).
    """

    @property
    def paramstyle(self) -> str:
        """How a statement marks its parameters: ``qmark`` or ``format``."""
        ...

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement in the step's transaction and return its rows."""
        ...


class TurnStore(Protocol):
    """A session's transcript, steps and turn records, written one `Commit` at a time."""

    async def load(self, key: SessionKey) -> StoredSession:
        """Read a session's status, transcript and turns (empty when it is new)."""
        ...

    async def load_steps(self, key: SessionKey, turn_id: str) -> dict[str, JsonValue]:
        """Read the step memos of one turn, by step id."""
        ...

    async def commit(self, key: SessionKey, commit: Commit) -> None:
        """Write ``commit`` in one transaction."""
        ...

    async def commit_with(
        self,
        key: SessionKey,
        work: Callable[[StoreHandle | None], T],
        record: Callable[[T | Exception], Commit],
    ) -> Commit:
        """Run ``work`` and write what ``record`` makes of its outcome, in one transaction.

        ``work`` runs on the store's own connection thread with the handle (``None``
        where the store has no transactional handle). If it raises an `Exception`,
        its writes are rolled back and ``record`` gets the exception instead. If
        ``record`` raises, the whole transaction rolls back and the error propagates.
        No other session's statements run in between.
        """
        ...

    async def unfinished_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        """Every queued or running turn, in admission order per session."""
        ...

    async def suspended_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        """Every turn suspended for a person's answer."""
        ...

    async def interrupted_turns(self) -> list[tuple[SessionKey, TurnRecord]]:
        """Every turn the engine interrupted (a held poison turn, say), in order per session."""
        ...

    async def cancelled_suspensions(self) -> list[SessionKey]:
        """Every session suspended on a turn whose cancel was stored but not yet carried out."""
        ...

    async def pending_resets(self) -> list[SessionKey]:
        """Every session with a reset that was asked for and not yet carried out."""
        ...

    async def is_archived(self, key: SessionKey, turn_id: str) -> bool:
        """Whether a reset, a compaction or retention moved the turn into the archive."""
        ...

    async def load_archive(self, key: SessionKey, generation: int) -> Archive | None:
        """Read one archived generation of a session (None when there is none)."""
        ...

    async def expire_history(self, agent: str, *, ended_before: float, at: float) -> int:
        """Delete the payloads of the agent's archived turns that ended before ``ended_before``.

        Each keeps its record without its input and result text (``expired_at`` set to
        ``at``); its archived messages and steps go. Returns how many expired.
        """
        ...

    async def expired_sessions(self, agent: str, *, ended_before: float) -> list[str]:
        """The ids of the agent's sessions with a live turn or a summary older than then."""
        ...

    async def crowded_sessions(self, agent: str, *, more_than: int) -> list[str]:
        """The ids of the agent's sessions holding more than ``more_than`` live turns."""
        ...

    async def has_session(self, key: SessionKey) -> bool:
        """Whether the session ever admitted a turn; cheap, and loads nothing.

        A turn it still holds or one a reset archived counts; a delivery state,
        a logged event or a read alone does not (reads never create a session).
        """
        ...

    async def list_sessions(self, agent: str, *, prefix: str = "") -> list[SessionSummary]:
        """The sessions of ``agent`` whose id starts with ``prefix``, newest activity first.

        Exactly those `has_session` is true for. Each is titled with the opening
        text of its first live turn and ordered by its newest kept event (ties and
        sessions with none by id, descending).
        """
        ...


class LeaseStore(Protocol):
    """Which process writes a session now: one holder at a time, until its lease runs out."""

    async def take_lease(
        self, key: SessionKey, holder: str, *, now: float, until: float, over: str | None = None
    ) -> LeaseTaken:
        """Make ``holder`` the session's only writer until ``until``, if it may be.

        Granted when nobody holds the lease, ``holder`` already does (this renews
        it), it ran out before ``now``, or its holder is ``over`` (one the caller
        found dead). Times are wall-clock seconds since the epoch, shared by every
        process on the store.
        """
        ...

    async def renew_lease(self, key: SessionKey, holder: str, *, until: float) -> bool:
        """Extend the lease to ``until`` only if ``holder`` still holds it: True if so.

        Unlike `take_lease`, it never takes back a lease that ran out and was
        taken by another meanwhile, even one since let go: the session may have
        been written since, and the renewer's copy is stale.
        """
        ...

    async def drop_lease(self, key: SessionKey, holder: str) -> None:
        """Let the session's lease go, if ``holder`` still holds it."""
        ...


class DeliveryStore(Protocol):
    """What a channel keeps about showing each turn; the engine never reads it."""

    async def save_delivery(self, key: SessionKey, turn_id: str, state: JsonValue | None) -> None:
        """Keep how a channel is showing a turn (``None`` forgets it), in a transaction of its own.

        The engine never reads it. A channel keeps here what it must find again
        after a restart: the message a reply is being written into, whether a
        request was shown to the people who may answer it.
        """
        ...

    async def claim_delivery(self, key: SessionKey, turn_id: str, state: JsonValue) -> bool:
        """Keep ``state`` for the turn only if nothing is kept yet: True if this call did.

        Two processes delivering the same turn (a schedule's firing, twice) both
        ask; one gets it.
        """
        ...

    async def deliveries(self, agent: str) -> list[tuple[SessionKey, str, JsonValue]]:
        """Every delivery state kept for the sessions of ``agent``: session, turn id, state."""
        ...

    async def load_delivery(self, key: SessionKey, turn_id: str) -> JsonValue | None:
        """The delivery state kept for one turn, if any."""
        ...


class PlacePolicyStore(Protocol):
    """Policies people set from a surface, by source and place; the engine never reads them."""

    async def save_place_policy(self, source: str, place: str, policy: JsonValue | None) -> None:
        """Keep the policy an operator set for one place of a source (None forgets it).

        A channel keeps here what people change from the surface itself (a Slack
        slash command); the engine never reads it.
        """
        ...

    async def place_policies(self, source: str) -> dict[str, JsonValue]:
        """Every policy kept for the places of ``source``, by place."""
        ...


class FeedbackStore(Protocol):
    """What people said of turns' replies; the engine never reads it."""

    async def save_feedback(self, feedback: Feedback) -> None:
        """Keep one person's feedback on one turn, replacing what they gave it before.

        One row per agent, session, turn and person; it makes no session (a turn
        is checked to exist before, by `agent.engine.feedback.rate_turn`).
        """
        ...

    async def feedback_since(self, since: float, *, agent: str | None = None) -> list[Feedback]:
        """Every feedback given at or after ``since``, newest first (only ``agent``'s, if named)."""
        ...


class EventLogStore(Protocol):
    """The durable log of each session's events, for clients that reconnect."""

    async def append_events(
        self, key: SessionKey, bodies: Sequence[JsonValue], *, at: float
    ) -> list[int]:
        """Append events to the session's log in one transaction; return their positions.

        Positions count from 1 per session, with no gaps and never reused, across
        processes and pruning alike.
        """
        ...

    async def read_events(
        self, key: SessionKey, *, after: int, limit: int
    ) -> list[tuple[int, JsonValue]]:
        """Up to ``limit`` kept log entries after position ``after``, oldest first."""
        ...

    async def event_bounds(self, key: SessionKey) -> LogBounds:
        """The oldest kept and the newest log position of the session."""
        ...

    async def prune_events(self, *, before: float) -> int:
        """Delete every log entry logged before ``before``; return how many went."""
        ...


class InboxStore(Protocol):
    """Work handed to a session's owner by a process that does not hold the session.

    A replica that gets a person's message (or click) for a session another live
    replica writes posts it here; the owner carries each item out in the commit
    that deletes it (`Commit.inbox_done`), so it is carried out exactly once.
    """

    async def post_inbox(
        self, key: SessionKey, kind: str, ref: str, body: JsonValue, *, at: float
    ) -> bool:
        """Keep an item for the session's owner; False if one of that kind and ref is kept.

        So the same Slack event redelivered to two replicas is one item.
        """
        ...

    async def read_inbox(self, key: SessionKey) -> list[InboxItem]:
        """The session's items still to carry out, oldest first."""
        ...

    async def inbox_sessions(self) -> list[SessionKey]:
        """Every session with an item still to carry out."""
        ...


@runtime_checkable
class EventWakeups(Protocol):
    """A store that tells this process when any process appended to a session's log.

    Optional: the event log checks for it (``isinstance(store, EventWakeups)``) and
    then wakes its followers on a notice instead of rereading the log every few
    seconds. The callbacks run on the event loop and must not block: queue, do
    not await. A notice comes after the entries it names can be read, never
    before; it may come late, twice, or for entries the subscriber has seen. It
    may be lost: one sent while the store was not listening is made up for by a
    call of ``missed``, one that could not be sent is not, so a subscriber still
    rereads now and then.
    """

    def subscribe_events(
        self, grew: Callable[[SessionKey, int], None], *, missed: Callable[[], None]
    ) -> None:
        """Call ``grew(key, last)`` whenever a log is appended to, up to position ``last``.

        ``missed()`` is called whenever notices may have been lost (the store began
        listening, or listened again after its connection dropped): any log may
        have grown since.
        """
        ...

    def unsubscribe_events(self, grew: Callable[[SessionKey, int], None]) -> None:
        """Stop calling ``grew`` and its ``missed``; a callback never subscribed is ignored."""
        ...


@runtime_checkable
class InboxWakeups(Protocol):
    """A store that tells this process when any process handed work to a session.

    Optional, as `EventWakeups` is: a runtime that hands work over subscribes, and
    carries out a session's items as soon as it is told; its sweep finds them too,
    later, when a notice is lost. The callbacks run on the event loop and must not
    block.
    """

    def subscribe_inbox(
        self, posted: Callable[[SessionKey], None], *, missed: Callable[[], None]
    ) -> None:
        """Call ``posted(key)`` whenever an item is posted for ``key``.

        ``missed()`` is called when notices may have been lost (the store began
        listening, or listened again after its connection dropped).
        """
        ...


class SessionStore(
    TurnStore,
    LeaseStore,
    DeliveryStore,
    PlacePolicyStore,
    FeedbackStore,
    EventLogStore,
    InboxStore,
    Protocol,
):
    """Durable home of transcripts, step memos and turn records: every role above in one.

    The engine and the bot take a `SessionStore`; a part of them that needs one
    role only may name that role's protocol instead.
    """


class EventSink(Protocol):
    """Receives every event of every turn. Must not block: queue, do not await."""

    def emit(self, event: TurnEvent) -> None:
        """Take one event."""
        ...


class Model(Protocol):
    """A language model that streams one reply per request."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream deltas, then end with exactly one `ModelReply`."""
        ...
