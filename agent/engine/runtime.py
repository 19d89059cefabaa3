"""`AgentRuntime`: hosts agents on a store, keeps their sessions, recovers lost turns."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from agent.core.events import TurnEvent
from agent.core.records import SessionKey
from agent.core.turns import Suspended, TurnRecord
from agent.definition.agent import Agent
from agent.engine.delegations import Delegations
from agent.engine.expiries import Expiries, expires_here
from agent.engine.lease import LEASE_SECONDS, new_holder, retire
from agent.engine.retention import (
    compact_history,
    expire_history,
    now_and_then,
    sweep_interval,
)
from agent.engine.session import AgentSession
from agent.engine.session._upkeep import Upkeep
from agent.errors import ConfigError, RuntimeClosedError
from agent.ports import EventSink, InboxWakeups, SessionStore

__all__ = ["AgentRuntime"]

logger = logging.getLogger("agent")

LET_GO_SECONDS = 3.0
"""How long a closing runtime gives its sessions to let their leases go."""

SWEEP_SECONDS = 1.0
"""How often a runtime looks for unfinished turns another process wrote, by default: a
replica that died is taken over within about this long (its liveness shows at once)."""


class AgentRuntime:
    """Runs the turns of some agents on one session store.

    Use it as an async context manager: entering resumes every turn that a dead
    process left unfinished (a Slack event that was acknowledged is never
    redelivered, so nobody else would); leaving stops the running turns where
    they stand, to be resumed by the next start.

    Example:
        >>> async with AgentRuntime(store, [agent]) as runtime:
        ...     reply = await runtime.session("ops", "s1").turn("hello")
    """

    def __init__(
        self,
        store: SessionStore,
        agents: Agent | Sequence[Agent],
        *,
        sink: EventSink | None = None,
        max_loaded_sessions: int = 1000,
        clock: Callable[[], float] = time.time,
        lease_seconds: float = LEASE_SECONDS,
        sweep_seconds: float | None = SWEEP_SECONDS,
        hand_over: bool = False,
    ) -> None:
        """Host ``agents`` on ``store``.

        Args:
            store: Where sessions live.
            agents: The agents whose sessions this runtime runs.
            sink: Receives every event of every turn.
            max_loaded_sessions: How many sessions keep their transcript in memory;
                beyond it, the least recently used idle ones are dropped and read
                again when next used, so a long-lived bot does not grow without bound.
            clock: Wall-clock seconds since the epoch; input requests expire by it.
            lease_seconds: How long a session stays this runtime's to write after its
                turns stop renewing it: another process on the store (``run-schedule``
                beside the server) waits that long for a runtime that froze. One whose
                process exited is taken over at once.
            sweep_seconds: How often the runtime looks in the store for unfinished turns
                it neither runs nor queued (an operator's retry written by another
                process, ``python -m bot turns --held --retry``; a turn whose process
                died while this one ran) and runs them; None: only at start.
            hand_over: Replicas: a start, cancel, answer or reset of a session another
                live process writes is handed to it through the store's inbox (the one
                that writes a session runs and shows its turns), instead of waiting for
                it to let the session go; and this runtime carries out what others hand
                to the sessions it writes. Off, the second process waits, which is right
                for a server and its command line sharing one SQLite file.
        """
        self.store = store
        self._max_loaded = max_loaded_sessions
        self._loaded: OrderedDict[SessionKey, AgentSession] = OrderedDict()
        self._agents: dict[str, Agent] = {}
        for agent in [agents] if isinstance(agents, Agent) else agents:
            if agent.name in self._agents:
                raise ConfigError(f"two agents are named {agent.name!r}")
            self._agents[agent.name] = agent
        self._sinks: list[EventSink] = [sink] if sink is not None else []
        self._sessions: dict[SessionKey, AgentSession] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._is_closed = False
        self.clock = clock
        self.holder = new_holder()
        """This runtime's name in the store's session leases."""
        self.lease_seconds = lease_seconds
        self._expiries = Expiries(self, clock)
        self.delegations = Delegations(self)
        """The child turns of this runtime's turns (see `agent.engine.delegations`)."""
        self._sweep_seconds = sweep_seconds
        self.hands_over = hand_over
        """Whether work for a session another process writes is handed over to it."""

    def agent(self, name: str) -> Agent:
        """The agent registered under ``name``.

        Raises:
            ConfigError: No such agent.
        """
        try:
            return self._agents[name]
        except KeyError:
            raise ConfigError(f"no agent named {name!r} in this runtime") from None

    def session(self, agent: str, session_id: str) -> AgentSession:
        """The session ``(agent, session_id)``; the same object on every call."""
        key = SessionKey(agent, session_id)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = AgentSession(self, key)
        return session

    def note_loaded(self, key: SessionKey) -> None:
        """Mark the session at ``key`` as just used, and unload idle ones beyond the limit."""
        session = self.session(key.agent, key.session_id)
        self._loaded[session.key] = session
        self._loaded.move_to_end(session.key)
        while len(self._loaded) > self._max_loaded:
            for candidate in self._loaded.values():  # least recently used first
                if candidate is not session and candidate.is_idle:
                    break
            else:
                return  # every loaded session is busy; keep them all for now
            candidate.unload()
            del self._loaded[candidate.key]

    async def start(self) -> int:
        """Resume every unfinished turn in the store; return how many were queued."""
        recovered = 0
        unfinished = await self.store.unfinished_turns()
        for key, record in unfinished:
            if key.agent not in self._agents:
                logger.warning(
                    "turn %s of %s is unfinished but no agent %r is mounted; left as is",
                    record.turn_id,
                    key,
                    key.agent,
                )
                continue
            session = self.session(key.agent, key.session_id)
            if self.hands_over:
                # replicas: a session another live replica writes is its to run, not one to
                # queue here and wait on; a dead one's is taken over now (or by the sweep)
                await session.upkeep.pick_up(record.turn_id)
            else:
                await session.upkeep.recover(record.turn_id)
            recovered += 1
        if recovered:
            logger.info("resuming %d unfinished turn(s) from their last checkpoint", recovered)
        for key in await self.store.cancelled_suspensions():
            if key.agent in self._agents:
                # a cancel that came while the suspend was being written, then the
                # process stopped before the suspend's run could end the turn
                await self.session(key.agent, key.session_id).upkeep.end_cancelled_suspend()
        for key in await self.store.pending_resets():
            if key.agent in self._agents:
                # The reset was asked for before the process stopped: its turns were
                # cancelled, but the generation was not archived yet.
                await self.session(key.agent, key.session_id).upkeep.recover_reset()
        waiting = await self.store.suspended_turns()
        for key, record in waiting:
            suspended = record.result
            if key.agent not in self._agents or not isinstance(suspended, Suspended):
                continue
            # A request that fell due while no process ran is answered as expired before
            # start() returns, so nobody reads the stale suspend; once none is open, its
            # turn runs like any other. Only such a session is read here.
            due = [
                r
                for r in suspended.requests
                if expires_here(r) and (r.expires_at or math.inf) <= self.clock()
            ]
            waits_on_child = any(r.child for r in suspended.requests)
            if not due and not waits_on_child:
                self.schedule_expiry(key, suspended)
                continue
            session = self.session(key.agent, key.session_id)
            for request in due:
                await self._expiries.expire_quietly(session, suspended.turn_id, request.id)
            if (still := await session.suspended()) and still.turn_id == suspended.turn_id:
                self.schedule_expiry(key, still)
                # a child it waits on may have moved on while no process ran
                await self.delegations.recover(key, still)
        # and a child whose parent ended while no process could tell it is stopped
        mounted = [(k, r) for k, r in [*unfinished, *waiting] if k.agent in self._agents]
        await self.delegations.stop_orphans(mounted)
        if self._sweep_seconds is not None:
            finding = now_and_then(self.sweep, self._sweep_seconds, "look for unfinished turns")
            _ = self.spawn(finding, name="sweep")
        if (every := sweep_interval(self._agents.values())) is not None:
            tending = now_and_then(self.tend_history, every, "expire or compact history")
            _ = self.spawn(tending, name="history")
        if self.hands_over and isinstance(self.store, InboxWakeups):
            self.store.subscribe_inbox(self._handed, missed=self._handed_maybe)
        return recovered

    def _handed(self, key: SessionKey) -> None:
        """Another process handed work to a session: carry it out if this one writes it."""
        if key.agent in self._agents and not self._is_closed:
            session = self.session(key.agent, key.session_id)
            _ = self.spawn(_carry_out_quietly(session), name=f"inbox {key}")

    def _handed_maybe(self) -> None:
        """Notices may have been lost: look at every session with work handed to it."""
        if not self._is_closed:
            _ = self.spawn(self._inbox_now(), name="inbox")

    async def _inbox_now(self) -> None:
        for key in await self.store.inbox_sessions():
            self._handed(key)

    async def expire_history(self, *, now: float | None = None) -> int:
        """Expire what each agent's ``history_retention`` is over for; how many turns expired.

        ``now`` defaults to the runtime's clock. The runtime does it now and then itself.
        """
        at = self.clock() if now is None else now
        return await expire_history(self.store, self._agents.values(), self._upkeep, now=at)

    async def tend_history(self) -> int:
        """Expire and compact what is due (see `agent.engine.retention`); what was done."""
        expired = await self.expire_history()
        return expired + await compact_history(self.store, self._agents.values(), self._upkeep)

    def _upkeep(self, agent: str, session_id: str) -> Upkeep:
        return self.session(agent, session_id).upkeep

    async def sweep(self) -> int:
        """Queue the unfinished turns in the store that this runtime neither runs nor queued.

        Another process wrote them since this runtime started: an operator's retry of a
        held turn, or the turns of a process that died (taken over as at start-up). A
        session another live process holds is left to it. Returns how many turns were
        looked at.
        """
        looked = 0
        for key, record in await self.store.unfinished_turns():
            if key.agent not in self._agents or self._is_closed:
                continue
            session = self.session(key.agent, key.session_id)
            if not session.upkeep.knows(record.turn_id):
                looked += 1
                await session.upkeep.pick_up(record.turn_id)
        if self.hands_over:
            for key in await self.store.inbox_sessions():
                if key.agent in self._agents and not self._is_closed:
                    # handed over by a replica: carried out here if this one writes the
                    # session, or may (its owner died)
                    looked += await self.session(key.agent, key.session_id).upkeep.carry_out_inbox()
        return looked

    def schedule_expiry(self, key: SessionKey, suspended: Suspended) -> None:
        """Answer ``suspended``'s first request to fall due as expired when its time comes."""
        self._expiries.schedule(key, suspended)

    def cancel_expiry(self, key: SessionKey, turn_id: str) -> None:
        """Forget the expiry timer of a request that was answered."""
        self._expiries.cancel(key, turn_id)

    def turn_changed(self, key: SessionKey, record: TurnRecord) -> None:
        """A turn was answered, suspended or ended: its parent or children may move."""
        self.delegations.turn_changed(key, record)

    async def close(self) -> None:
        """Stop running turns at once; they stay unfinished on disk for the next start."""
        self._is_closed = True
        self._expiries.clear()  # the next start schedules them again from the store
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for session in self._sessions.values():
            session.upkeep.abandon_waiters()
        # Best effort, and bounded: a store that does not answer (its server gone) must
        # not hold a deploy's stop. A lease not let go runs out, or is taken at once
        # once this process is seen gone; a run not taken back stays counted.
        letting_go = [
            asyncio.ensure_future(session.upkeep.let_go()) for session in self._sessions.values()
        ]
        if letting_go:
            _, late = await asyncio.wait(letting_go, timeout=LET_GO_SECONDS)
            for task in late:
                task.cancel()
            if late:
                logger.warning(
                    "stopped without letting %d session(s) go: the store did not answer", len(late)
                )
            await asyncio.gather(*letting_go, return_exceptions=True)
        retire(self.holder)
        self._sessions.clear()
        self._loaded.clear()

    async def __aenter__(self) -> AgentRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def is_closed(self) -> bool:
        """Whether `close` was called."""
        return self._is_closed

    def check_open(self) -> None:
        """Refuse new work once the runtime is closed.

        Raises:
            RuntimeClosedError: `close` was called.
        """
        if self._is_closed:
            raise RuntimeClosedError("this runtime is closed; start a new one to run turns")

    def spawn(self, work: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Run ``work`` as a task the runtime keeps a reference to and cancels on close."""
        if self._is_closed:
            work.close()
            raise RuntimeClosedError("this runtime is closed; start a new one to run turns")
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("task %s died", task.get_name(), exc_info=task.exception())

    def add_sink(self, sink: EventSink) -> Callable[[], None]:
        """Give ``sink`` every event of every turn too (a channel that watches all turns).

        Returns:
            A function that stops it.
        """
        self._sinks.append(sink)
        return lambda: self._sinks.remove(sink) if sink in self._sinks else None

    def emit(self, event: TurnEvent) -> None:
        """Hand an event to the runtime's sinks; a failing sink never stops a turn."""
        for sink in self._sinks:
            try:
                sink.emit(event)
            except Exception:
                logger.exception("the event sink failed on %s", event.type)


async def _carry_out_quietly(session: AgentSession) -> None:
    try:
        await session.upkeep.carry_out_inbox()
    except RuntimeClosedError:
        pass
    except Exception:
        # the sweep looks again soon
        logger.exception("could not carry out the work handed to %s", session.key)
