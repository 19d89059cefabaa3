"""`Waiters`: who waits on or watches a session's turns, and how events and endings reach them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from agent.core.events import TERMINAL_EVENT_TYPES, TurnEvent, TurnFailed, is_terminal
from agent.core.phases import outcome_of
from agent.core.records import StoredSession
from agent.core.turns import Suspended, TurnResult
from agent.engine.replay import fold_turn
from agent.engine.session._inbox import ELSEWHERE_POLL_SECONDS
from agent.engine.session._state import Observer, SessionState
from agent.errors import RuntimeClosedError, UnknownTurnError

__all__ = ["Waiters"]

logger = logging.getLogger("agent")


class Waiters:
    """Result waiters, observers and streams of one session's turns."""

    def __init__(self, shared: SessionState) -> None:
        self._shared = shared

    async def result(self, turn_id: str) -> TurnResult:
        """Wait for the turn to end (or be suspended); see `AgentSession.result`."""
        if self._elsewhere(turn_id):
            return await self._ended_elsewhere(turn_id)
        state = await self._shared.loaded()
        record = state.turns.get(turn_id)
        if record is None:
            raise await self._shared.no_turn_error(state, turn_id)
        # a suspend whose cancel its run is writing is not how the turn ends
        outcome = outcome_of(record, state.cancels)
        if outcome is not None:
            return outcome
        self._shared.refuse_if_halted()
        waiter: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        waiting = self._shared.waiters.setdefault(turn_id, [])
        waiting.append(waiter)
        try:
            return await waiter
        finally:
            # a caller that stopped waiting (a wait's timeout) leaves nothing behind, so an
            # idle session can still be let go
            if waiter in waiting:
                waiting.remove(waiter)
                if not waiting and self._shared.waiters.get(turn_id) is waiting:
                    del self._shared.waiters[turn_id]

    async def observe(
        self, callback: Observer, *, turn_id: str | None, replay: bool
    ) -> Callable[[], None]:
        """Subscribe ``callback``; see `AgentSession.observe`."""
        state = await self._shared.loaded()
        if replay and turn_id is not None and turn_id in state.turns:
            for event in fold_turn(self._shared.key, state, state.turns[turn_id]):
                callback(event)
        entry = (turn_id, callback)
        observers = self._shared.observers
        observers.append(entry)
        return lambda: observers.remove(entry) if entry in observers else None

    def _elsewhere(self, turn_id: str) -> bool:
        """Whether another process may run ``turn_id``: replicas hand turns to the writer.

        A turn this process neither runs nor queued is followed in the store, whoever
        was given it: this process handed it over, or another one did.
        """
        shared = self._shared
        return shared.host.hands_over and turn_id != shared.active and turn_id not in shared.queue

    async def _ended_elsewhere(self, turn_id: str) -> TurnResult:
        """Wait, reading the store now and then, for a turn another process runs to end."""
        while True:
            state = await self._shared.reread_unless_busy()
            if await self._shared.is_archived(state, turn_id):
                raise await self._shared.no_turn_error(state, turn_id)
            record = state.turns.get(turn_id)
            if record is None and not await self._is_on_its_way(turn_id):
                raise await self._shared.no_turn_error(state, turn_id)
            outcome = outcome_of(record, state.cancels) if record is not None else None
            answered = self._shared.handed_over.get(turn_id)
            if isinstance(outcome, Suspended) and outcome.request_for(answered or "") is not None:
                outcome = None  # the answer handed over is not carried out yet
            if outcome is not None:
                return outcome
            if not self._elsewhere(turn_id):
                return await self.result(turn_id)  # this process took it over meanwhile
            self._shared.host.check_open()
            await asyncio.sleep(ELSEWHERE_POLL_SECONDS)

    async def _is_on_its_way(self, turn_id: str) -> bool:
        """Whether a turn the session does not have yet was handed to its owner to start.

        A turn nobody handed over is unknown, as in a session this process writes: a
        stream of it must not wait for a start that may never come (a process that
        died before admitting it leaves nothing to wait for).
        """
        shared = self._shared
        if turn_id in shared.handed_over:
            return True
        inbox = await shared.host.store.read_inbox(shared.key)
        if any(item.kind == "start" and item.ref == turn_id for item in inbox):
            return True
        # the owner marks the item done in the commit that admits the turn: read again
        return turn_id in (await shared.reread_unless_busy()).turns

    async def stream(self, turn_id: str, *, replay: bool) -> AsyncIterator[TurnEvent]:
        """The events of one turn until its terminal event; see `AgentSession.stream`."""
        if self._elsewhere(turn_id):
            # run by the process it was handed to: what it committed, once it ends
            await self._ended_elsewhere(turn_id)
            state = await self._shared.loaded()
            for event in fold_turn(self._shared.key, state, state.turns[turn_id]):
                if replay or event.type in TERMINAL_EVENT_TYPES:
                    yield event
            return
        state = await self._shared.loaded()
        record = state.turns.get(turn_id)
        if record is None:
            raise await self._shared.no_turn_error(state, turn_id)
        if not replay and not record.is_unfinished:
            return
        queue: asyncio.Queue[TurnEvent] = asyncio.Queue()
        stop = await self.observe(queue.put_nowait, turn_id=turn_id, replay=replay)
        if self._shared.halted is not None and record.is_unfinished:
            # the session is halted: the turn will not move until the runtime starts again
            queue.put_nowait(self.halted_event(turn_id))
        try:
            while True:
                event = await queue.get()
                yield event
                if is_terminal(event):
                    return
        finally:
            stop()

    def emit(self, event: TurnEvent) -> None:
        """Hand ``event`` to this session's observers, then to the host's sinks."""
        self._observe(event, event.turn_id)
        self._shared.host.emit(event)

    def forward(self, event: TurnEvent, into: str) -> None:
        """Hand a delegated turn's ``event`` to the observers of turn ``into`` (its parent).

        Tagged with ``via``; the host's sinks had it from the child's own session.
        """
        self._observe(event.model_copy(update={"via": into}), into)

    def _observe(self, event: TurnEvent, turn_id: str) -> None:
        """Hand ``event`` to the observers of the session and of turn ``turn_id``."""
        for wanted, callback in tuple(self._shared.observers):
            if wanted is None or wanted == turn_id:
                try:
                    callback(event)
                except Exception:
                    logger.exception("an observer of %s failed on %s", self._shared.key, event.type)

    def settle(self, turn_id: str, result: TurnResult) -> None:
        """Give those waiting on ``turn_id`` its result; tell a parent its child's changed."""
        for waiter in self._shared.waiters.pop(turn_id, []):
            if not waiter.done():
                waiter.set_result(result)
        state = self._shared.in_memory
        record = state.turns.get(turn_id) if state is not None else None
        if record is not None:
            self._shared.host.turn_changed(self._shared.key, record)

    def settle_ended(self, state: StoredSession) -> None:
        """Answer those waiting on turns that ended, or a reset archived, in another process."""
        for turn_id in list(self._shared.waiters):
            record = state.turns.get(turn_id)
            if turn_id in state.retired:
                archived = UnknownTurnError(self._shared.no_turn(state, turn_id))
                for waiter in self._shared.waiters.pop(turn_id):
                    if not waiter.done():
                        waiter.set_exception(archived)
                continue
            outcome = outcome_of(record, state.cancels) if record is not None else None
            if outcome is None:
                continue
            for waiter in self._shared.waiters.pop(turn_id):
                if not waiter.done():
                    waiter.set_result(outcome)

    def abandon(self) -> None:
        """Tell everyone awaiting a turn that this runtime will not finish it."""
        self.fail_all(
            lambda turn_id: RuntimeClosedError(
                f"the runtime closed before turn {turn_id} of {self._shared.key} ended; "
                "it resumes from its last checkpoint on the next start"
            )
        )

    def fail_all(self, error_for: Callable[[str], Exception]) -> None:
        """Fail every waiter with ``error_for(its turn id)``, and a pending reset's callers."""
        for turn_id, waiters in self._shared.waiters.items():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(error_for(turn_id))
        self._shared.waiters.clear()
        resetting = self._shared.reset_done
        if resetting is not None and not resetting.done():
            resetting.set_exception(
                RuntimeClosedError(
                    f"{self._shared.key} stopped before its reset was carried out; "
                    "the next start carries it out"
                )
                if self._shared.halted is None
                else self._shared.halted_error()
            )

    def halted_event(self, turn_id: str) -> TurnFailed:
        """The event that tells a turn's watchers the halted session will not run it now."""
        return TurnFailed(
            agent=self._shared.key.agent,
            session=self._shared.key.session_id,
            turn_id=turn_id,
            seq=0,
            error=f"internal error: {self._shared.halted}",
        )
