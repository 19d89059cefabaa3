"""`Worker`: runs a session's queued turns one at a time, and carries out a pending reset.

One worker task per session takes turns from the head of the queue. Before each
turn it takes the session's lease again: when another process had the session
in between, the worker reads it again (`take_lease_and_catch_up`) and requeues
what is still unfinished. When the store fails under a turn, the session halts
until the next start: what committed stays, and the turn resumes then.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from agent.core.records import Commit, StoredSession, apply_commit
from agent.core.turns import SessionReset, Suspended, TurnRecord
from agent.definition.tools import describe_error
from agent.engine.lease import drop_quietly
from agent.engine.session._compactor import Compactor
from agent.engine.session._state import SessionState
from agent.engine.session._waiters import Waiters
from agent.engine.turn.run import TurnRun
from agent.errors import LeaseLostError, ReplayIntegrityError, RuntimeClosedError

__all__ = ["Worker"]

logger = logging.getLogger("agent")


class Worker:
    """The task that runs one session's turns, and what it does around each turn."""

    def __init__(self, shared: SessionState, waiters: Waiters) -> None:
        self._shared = shared
        self._waiters = waiters
        self._compactor = Compactor(shared, on_takeover=self._stop_after_takeover)

    @property
    def compactor(self) -> Compactor:
        """The session's compactions and expiries, planned and committed between turns."""
        return self._compactor

    def enqueue(self, turn_id: str) -> None:
        """Queue ``turn_id`` behind the turns queued, and start the worker if it is not running."""
        self._shared.queue.append(turn_id)
        self.start()

    def start(self) -> None:
        """Start the worker task, unless it runs already or the session is halted."""
        if self._shared.worker_task is None and self._shared.halted is None:
            self._shared.worker_task = self._shared.host.spawn(
                self._drain(), name=f"session {self._shared.key}"
            )

    def queue_if_unfinished(self, record: TurnRecord) -> None:
        """Queue the turn if it is unfinished and this process neither runs nor queued it."""
        is_known_here = (
            record.turn_id == self._shared.active or record.turn_id in self._shared.queue
        )
        if record.is_unfinished and not is_known_here:
            self.enqueue(record.turn_id)

    def queue_unfinished_turns(self, state: StoredSession) -> None:
        """Queue every unfinished turn this process has not picked up, oldest first."""
        for record in sorted(state.turns.values(), key=lambda t: t.seq):
            self.queue_if_unfinished(record)
        self._shared.queued_unfinished = True

    async def take_lease_and_catch_up(self, *, wait: bool = True) -> bool:
        """Take the session's lease; read the session again if another process had it."""
        if not await self._shared.lease.take(wait=wait):
            return False
        if self._shared.lease.stale:
            if self._shared.active is not None:
                # A run here lost the lease while it ran. The run stops at its next commit
                # and the worker reads the session again; until then this copy may be
                # stale, so no write is planned on it.
                raise LeaseLostError(
                    f"{self._shared.key} was taken on by another process meanwhile; try again"
                )
            await self._catch_up()
        return True

    async def _catch_up(self) -> None:
        """Read the session again after another process wrote it, and pick up where it is.

        Turns queued here are queued again from the store (one behind a suspend
        included); those waiting on a turn that ended elsewhere are answered.
        """
        async with self._shared.catching_up:
            if not self._shared.lease.stale:
                return  # the worker or an admission caught up while this one waited
            before = (
                self._shared.in_memory.generation if self._shared.in_memory is not None else None
            )
            self._shared.in_memory = None
            self._shared.queue.clear()
            state = await self._shared.loaded()
            self._shared.lease.stale = False
            self.queue_unfinished_turns(state)
            self._waiters.settle_ended(state)
            done = self._shared.reset_done
            reset_elsewhere = before is not None and state.generation > before
            if done is not None and not done.done() and reset_elsewhere:
                # the reset asked here was carried out by another process
                done.set_result(
                    SessionReset(
                        previous_session=f"{self._shared.key.session_id}#g{state.generation - 1}",
                        generation=state.generation,
                    )
                )

    async def _drain(self) -> None:
        """Run the queued turns one at a time, until none is left, one is suspended, or a halt."""
        try:
            while self._shared.halted is None:
                try:
                    # before each turn: another process may have taken the session meanwhile
                    await self.take_lease_and_catch_up()
                except RuntimeClosedError:
                    return  # closed while it waited for another process
                except Exception as exc:
                    self._halt("(taking the session)", exc)
                    return
                if self._is_reset_due():
                    await self._carry_out_reset()
                    continue
                if await self._compactor.commit_if_ready():
                    continue
                if not self._shared.queue or self._is_suspended() or self._is_held():
                    break
                turn_id = self._shared.queue.popleft()
                self._shared.active = turn_id
                try:
                    await self._run_turn(turn_id)
                finally:
                    self._shared.active = None
                _ = self._compactor.plan(on_ready=self.start)
        finally:
            self._shared.worker_task = None
            if not self._shared.admit_lock.locked() and not self._shared.host.is_closed:
                # a closing runtime lets the leases go itself
                await drop_quietly(self._shared.lease)
                if self._shared.summary_ready is not None and self._shared.halted is None:
                    self.start()  # a summary finished as the worker stopped: commit it

    def _is_suspended(self) -> bool:
        # Turns queued behind a suspended turn wait: they would follow a tool call that has
        # no result yet.
        return self._shared.in_memory is not None and self._shared.in_memory.status == "suspended"

    def _is_held(self) -> bool:
        # A held session's queued turns wait for `AgentSession.resume_session`.
        return self._shared.in_memory is not None and self._shared.in_memory.hold is not None

    def _is_reset_due(self) -> bool:
        """A reset is pending and every turn it covers has ended."""
        state = self._shared.in_memory
        if state is None or state.reset_through is None:
            return False
        head = state.turns.get(self._shared.queue[0]) if self._shared.queue else None
        return head is None or head.seq > state.reset_through

    async def _carry_out_reset(self) -> None:
        """Archive the generation a pending reset covers, now that its turns have ended."""
        state = self._shared.in_memory
        assert state is not None
        archived = state.generation
        token = self._shared.lease.token
        commit = Commit(archive=True, holder=token)
        try:
            await self._shared.host.store.commit(self._shared.key, commit)
        except LeaseLostError:
            self._stop_after_takeover("(reset)", token)
            return
        except Exception as exc:
            self._halt("(reset)", exc)
            return
        apply_commit(state, commit)
        logger.info("%s reset: generation %d archived", self._shared.key, archived)
        done = self._shared.reset_done
        if done is not None and not done.done():
            done.set_result(
                SessionReset(
                    previous_session=f"{self._shared.key.session_id}#g{archived}",
                    generation=state.generation,
                )
            )

    async def _run_turn(self, turn_id: str) -> None:
        """Run one turn to its ending, and tell those waiting on it how it ended."""
        state = await self._shared.loaded()
        record = state.turns.get(turn_id)
        if record is None or not record.is_unfinished:
            self._waiters.settle_ended(state)
            return
        token = self._shared.lease.token
        run = TurnRun(
            agent=self._shared.agent,
            store=self._shared.host.store,
            key=self._shared.key,
            state=state,
            record=record,
            emit=self._waiters.emit,
            clock=self._shared.host.clock,
            holder=token,
            opened_here=turn_id in self._shared.opened_here,
            still_ours=lambda: self._shared.lease.confirm(token),
            stop_landed=self._shared.stop_landed,
            steers=self._shared.steers,
            delegator=self._shared.host.delegations,
            forward=lambda event: self._waiters.forward(event, into=turn_id),
        )
        self._shared.opened_here.discard(turn_id)
        self._shared.running = run
        try:
            result = await run.run()
        except asyncio.CancelledError:
            if run.counted:
                self._shared.counted.add(turn_id)  # the close takes it back
            raise
        except LeaseLostError:
            self._shared.counted.discard(turn_id)  # the process that took it on runs it
            self._stop_after_takeover(turn_id, token)
            return
        except Exception as exc:
            self._halt(turn_id, exc)
            return
        finally:
            self._shared.running = None
            self._shared.steers.forget(turn_id)
        self._shared.counted.discard(turn_id)
        if isinstance(result, Suspended):
            self._shared.host.schedule_expiry(self._shared.key, result)
        self._waiters.settle(turn_id, result)

    async def take_back_runs(self) -> None:
        """Take back the run counts of the turns a clean close stopped here, as it closes.

        `TurnRecord.runs` counts runs begun and not ended, so that start-up holds a turn
        the process died under `POISON_RUNS` times in a row. A run that a close stopped
        (a SIGTERM, a deploy) is no death: one small write per such turn takes its count
        back, while the lease still fences it. A write that is refused (the turn ended or
        suspended in a write that landed as the close came, another process took the
        session on, the store is gone) leaves the count as stored.
        """
        state = self._shared.in_memory
        counted, self._shared.counted = self._shared.counted, set()
        if state is None or not self._shared.lease.is_held:
            return
        for turn_id in sorted(counted):
            record = state.turns.get(turn_id)
            if record is None or not record.is_unfinished or record.runs <= 0:
                continue
            back = dataclasses.replace(record, runs=record.runs - 1)
            commit = Commit(
                turns=(back,),
                expect=((turn_id, record.status),),
                holder=self._shared.lease.token,
            )
            try:
                await self._shared.host.store.commit(self._shared.key, commit)
            except Exception as exc:
                logger.info(
                    "%s: the run of %s stopped at close stays counted (%s)",
                    self._shared.key,
                    turn_id,
                    describe_error(exc),
                )
                continue
            apply_commit(state, commit)

    def _stop_after_takeover(self, turn_id: str, token: str) -> None:
        """Stop writing, when another process took the session on while a turn ran here.

        Nothing of the refused write landed. The worker waits for the lease, reads
        the session again, and goes on with whatever is still unfinished then.
        """
        logger.warning(
            "%s: another process took the session on during %s", self._shared.key, turn_id
        )
        if self._shared.lease.token == token:
            self._shared.lease.lost()
        else:
            # The lease was lost and taken back here since, under a newer token: it stays
            # held, but the session is read again before the next turn.
            self._shared.lease.stale = True

    def _halt(self, turn_id: str, exc: Exception) -> None:
        """Stop running turns here until the next start, after the store failed under one.

        What committed stays and the turn is still unfinished on disk, so the next
        start-up resumes it. Running the next turn now would append after a
        half-finished one (a tool call with no result wedges every later model
        call), so nothing more runs in this session until then.
        """
        logger.exception("turn %s of %s stopped on an internal error", turn_id, self._shared.key)
        self._shared.halted = describe_error(exc)
        if isinstance(exc, ReplayIntegrityError):
            # a replay that disagreed with the store is told as found, both positions named
            self._shared.diverged = exc
        self._shared.queue.clear()
        error = self._shared.halted_error()
        self._waiters.fail_all(lambda turn_id: error)
        # observers and streams of the turn learn that this run is over
        self._waiters.emit(self._waiters.halted_event(turn_id))
