"""`SessionState`: what the parts of one `AgentSession` share, and the checks over a stored session.

The session's parts (admission, the write lock and lease, the worker, cancels,
answers, waiters) each keep a reference to one `SessionState` and hold no
state of their own. The invariants that span them live here, in one place:

- The admit lock is held across every admission: its reads of the queue and of
  the active turn, its write, and its change to the queue.
- The in-memory copy of the session is never behind the store: every commit made
  here is mirrored into it after the write lands (even when the caller who asked
  for the write was cancelled meanwhile), and it is read again when another
  process may have written the session.
- Every write is fenced by a token of the session's lease: the token the
  admission in progress took, or the one the worker's turn runs under.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.core.events import TurnEvent
from agent.core.phases import is_suspend_ending
from agent.core.records import SessionKey, StoredSession
from agent.core.transcript import Compaction
from agent.core.turns import SessionReset, Suspended, TurnRecord, TurnResult
from agent.engine.lease import SessionLease
from agent.engine.turn.steering import SteerBox
from agent.errors import SessionSuspendedError, StoreError, UnknownTurnError

if TYPE_CHECKING:
    from agent.engine.host import SessionHost
    from agent.engine.turn.run import TurnRun

__all__ = [
    "Observer",
    "SessionState",
    "is_held_by_suspend",
    "suspend_is_ending",
    "suspended_in",
    "unfinished_turns",
]

Observer = Callable[[TurnEvent], None]


class SessionState:
    """The state of one session in this process, shared by the parts of its `AgentSession`."""

    def __init__(self, host: SessionHost, key: SessionKey) -> None:
        self.host = host
        self.agent = host.agent(key.agent)
        self.key = key
        self.in_memory: StoredSession | None = None
        """The session as this process holds it; None until read (and after an unload)."""
        self.load_lock = asyncio.Lock()
        self.admit_lock = asyncio.Lock()
        """Held by one admission at a time: a start, cancel, reset, resume or expiry."""
        self.queue: deque[str] = deque()
        """Turns to run here, in order; the worker takes them from the head."""
        self.worker_task: asyncio.Task[None] | None = None
        """The task running this session's turns, while there is one."""
        self.active: str | None = None
        """The turn the worker is running, if any."""
        self.opened_here: set[str] = set()
        """Turns this process's admission opened (their first run counted), not run yet."""
        self.counted: set[str] = set()
        """Turns whose latest run this process counted in `TurnRecord.runs` and has not
        seen end or suspend: a clean close takes each count back (it was no death)."""
        self.running: TurnRun | None = None
        """The run of the active turn, once it has begun."""
        self.stop_landing: asyncio.Future[None] | None = None
        """Done once the write asking the running turn to stop has landed (or failed): the
        run writes its cancelled ending only after it, so none is on disk without it."""
        self.waiters: dict[str, list[asyncio.Future[TurnResult]]] = {}
        """Callers of `AgentSession.result`, by turn id."""
        self.observers: list[tuple[str | None, Observer]] = []
        """Callbacks of `AgentSession.observe`, each with the turn it watches (None: all)."""
        self.halted: str | None = None
        """Why this session stopped running turns until the next start, if it did."""
        self.diverged: StoreError | None = None
        """The `ReplayIntegrityError` that halted it, if one did: callers get it untouched."""
        self.queued_unfinished = False
        """Whether the unfinished turns of the loaded copy were queued (once per load)."""
        self.reset_done: asyncio.Future[SessionReset] | None = None
        """Resolved when the pending reset asked for here is carried out."""
        self.handed_over: dict[str, str | None] = {}
        """Turns whose start or answer this process handed to the one that writes the
        session (that process runs them, and shows them), each with the request whose
        answer was handed over (None for a start)."""
        self.lease = SessionLease(
            host.store,
            key,
            host.holder,
            seconds=host.lease_seconds,
            closed=lambda: host.is_closed,
        )
        self.steers = SteerBox()
        """Steers taken for the running turn and not placed in its transcript yet."""
        self.summarising: asyncio.Task[None] | None = None
        """The model writing a compaction's summary, in the background."""
        self.summary_ready: Compaction | None = None
        """A compaction whose summary is written: the worker commits it between turns."""
        self.catching_up = asyncio.Lock()
        self.write_token: str | None = None
        """The lease token the admission in progress took; its writes are fenced by it."""

    async def loaded(self) -> StoredSession:
        """The session in memory, read from the store the first time."""
        # The session is read from the store once. After that, every commit made here is
        # mirrored into this copy, so no step reads the history again.
        if self.in_memory is None:
            async with self.load_lock:
                if self.in_memory is None:
                    self.in_memory = await self.host.store.load(self.key)
                    self.queued_unfinished = False
        self.host.note_loaded(self.key)
        return self.in_memory

    async def reread_unless_busy(self) -> StoredSession:
        """Read the session again when nothing here runs (another process may have moved it)."""
        if self.worker_task is None and not self.queue and self.in_memory is not None:
            self.in_memory = None
        return await self.loaded()

    @property
    def is_idle(self) -> bool:
        """Nothing runs, waits, watches or is being admitted here right now."""
        return (
            self.worker_task is None
            and not self.queue
            and not self.waiters
            and not self.observers
            and not self.admit_lock.locked()
            and not self.load_lock.locked()
        )

    def refuse_if_halted(self) -> None:
        """Raise the halted session's `StoreError` if an internal error stopped it."""
        if self.halted is not None:
            raise self.halted_error()

    def halted_error(self) -> StoreError:
        """The error callers get while this session is halted."""
        if self.diverged is not None:
            return self.diverged
        return StoreError(
            f"{self.key} halted after an internal error ({self.halted}); "
            "its turns resume when the runtime starts again"
        )

    async def is_archived(self, state: StoredSession, turn_id: str) -> bool:
        """Whether ``turn_id`` left the live state: a reset, a compaction or retention.

        The ids a reset archived are in memory; those compaction moved out are asked of
        the store, so a long session does not hold every id it ever had.
        """
        if turn_id in state.retired:
            return True
        if turn_id in state.turns or not (state.generation or state.compacted_through):
            return False
        return await self.host.store.is_archived(self.key, turn_id)

    async def no_turn_error(self, state: StoredSession, turn_id: str) -> UnknownTurnError:
        """The error for ``turn_id``, which is no live turn of this session."""
        archived = await self.is_archived(state, turn_id)
        return UnknownTurnError(self.no_turn(state, turn_id, archived=archived))

    def no_turn(self, state: StoredSession, turn_id: str, *, archived: bool = False) -> str:
        """Why ``turn_id`` is not a turn of this session, for an error message."""
        if archived or turn_id in state.retired:
            return (
                f"{self.key}: turn {turn_id} was archived by a reset, or moved out by compaction"
                " or history retention; session.archived(generation) keeps its record"
            )
        return f"{self.key}: no turn {turn_id}"

    def suspended_error(self, state: StoredSession) -> SessionSuspendedError:
        """The error a new turn gets while the session is suspended on a person's answer."""
        suspended = suspended_in(state)
        waiting = (
            f" (turn {suspended.turn_id} waits on {suspended.request.id!r})" if suspended else ""
        )
        return SessionSuspendedError(
            f"{self.key} is waiting for a person's answer{waiting}; "
            "no other turn starts until it is answered"
        )

    async def stop_landed(self) -> None:
        """Wait until a request to stop the running turn is on disk, or was taken back."""
        while (landing := self.stop_landing) is not None and not landing.done():
            await asyncio.shield(landing)

    def reset_future(self) -> asyncio.Future[SessionReset]:
        """The future the pending reset resolves, made when none is pending."""
        if self.reset_done is None or self.reset_done.done():
            done: asyncio.Future[SessionReset] = asyncio.get_running_loop().create_future()
            # Its callers wait on it through asyncio.shield and may all have left, so an
            # exception nobody retrieves is expected: reading it here keeps asyncio quiet.
            done.add_done_callback(lambda f: f.cancelled() or f.exception())
            self.reset_done = done
        return self.reset_done


def unfinished_turns(state: StoredSession, *, suspended_too: bool = False) -> list[TurnRecord]:
    """The turns not yet ended, in admission order (a suspended one too, if asked)."""
    wanted = [
        t for t in state.turns.values() if t.is_unfinished or (suspended_too and not t.is_ended)
    ]
    return sorted(wanted, key=lambda t: t.seq)


def is_held_by_suspend(state: StoredSession) -> bool:
    """The session is suspended on a person's answer, so no other turn may start.

    A suspend that a cancel is ending does not hold the session: its turn is ending.
    """
    return state.status == "suspended" and not suspend_is_ending(state)


def suspend_is_ending(state: StoredSession) -> bool:
    """The session's suspend was cancelled while being written; its run is ending it now."""
    suspended = suspended_in(state)
    return suspended is not None and is_suspend_ending(
        state.turns[suspended.turn_id], state.cancels
    )


def suspended_in(state: StoredSession) -> Suspended | None:
    """The checkpoint of the turn the session is suspended on, if it is."""
    if state.status != "suspended":
        return None
    for record in state.turns.values():
        if record.status == "suspended" and isinstance(record.result, Suspended):
            return record.result
    return None
