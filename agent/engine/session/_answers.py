"""`Answers`: a person's answer to a suspended turn, or its expiry, stored and acted on.

An answer is stored under ``input:<turn id>:<input id>`` together with the
request it answers, in the write that queues the turn again; that write expects
the turn to be still suspended, so of two answers racing (two clicks, two
processes) exactly one is applied. A resume that finds the turn no longer
suspended says, to someone who could have answered, who answered and how.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from agent._json import JsonValue
from agent.core.delegation import MIRROR_PREFIX
from agent.core.hitl import (
    REQUEST_ADAPTER,
    ChildRequest,
    Grant,
    InputRequest,
    answer_step,
    check_answerer,
    check_value,
    is_answerer,
)
from agent.core.phases import is_suspend_ending
from agent.core.records import Commit, StoredSession, StoredStep, apply_commit
from agent.core.turns import Suspended, moved
from agent.engine.session._inbox import TAKING, Inbox
from agent.engine.session._state import SessionState, suspend_is_ending, suspended_in
from agent.engine.session._worker import Worker
from agent.engine.session._writer import Writer
from agent.errors import ResumeConflictError, RuntimeClosedError, StoreConflictError

__all__ = ["Answers"]


class Answers:
    """Applies answers, and expiries, to the requests of one session's suspended turns."""

    def __init__(self, shared: SessionState, writer: Writer, worker: Worker, inbox: Inbox) -> None:
        self._shared = shared
        self._writer = writer
        self._worker = worker
        self._inbox = inbox

    async def resume(
        self,
        turn_id: str,
        input_id: str,
        value: JsonValue,
        *,
        by: str | None,
        granted: Grant | None,
    ) -> None:
        """Answer the request a suspended turn waits on; see `AgentSession.resume`."""
        self._shared.host.check_open()
        child = await self._child_of(turn_id, input_id)
        if child is None:
            child = await self._answer_here(turn_id, input_id, value, by=by, granted=granted)
        if child is not None:
            await self._answer_child(turn_id, child, value, by=by, granted=granted)

    async def _answer_here(
        self,
        turn_id: str,
        input_id: str,
        value: JsonValue,
        *,
        by: str | None,
        granted: Grant | None,
    ) -> ChildRequest | None:
        """Store the answer, or hand it over; for a mirror, the child request to answer.

        The mirror may be one this copy of the session did not know of until it read
        it again under the lock: a mirror's answer is never stored here.
        """
        may_hand_over = self._inbox.may_hand_over(self._shared.host.hands_over)
        async with self._writer.locked_and_leased(wait=not may_hand_over) as held:
            state = await (self._shared.loaded() if held else self._shared.reread_unless_busy())
            if state.reset_through is not None:
                raise ResumeConflictError(
                    f"{self._shared.key} is being reset; its requests are withdrawn and archived"
                )
            try:
                request = await self._suspended_request(state, turn_id, input_id, by, granted)
            except ResumeConflictError:
                # this replica's copy may be behind one that answered it or suspended it again
                state = await self._shared.reread_unless_busy()
                request = await self._suspended_request(state, turn_id, input_id, by, granted)
            if request.child is not None:
                return request.child
            check_answerer(turn_id, request, by=by, granted=granted)
            check_value(request, value)
            if not held:
                # checked as the owner will check it: the owner stores it, and runs the turn
                body = self._inbox.answer_body(turn_id, input_id, value, by, granted)
                ref = f"{turn_id}/{input_id}"
                await self._inbox.hand_over("answer", ref, body, turn_id=turn_id, answers=input_id)
                return None
            expires_at = request.expires_at
            if expires_at is not None and expires_at <= self._shared.host.clock():
                await self._store_answer(state, turn_id, request, {"expired": True})
                raise ResumeConflictError(
                    f"request {input_id} of turn {turn_id} already expired", expired=True
                )
            await self._store_answer(state, turn_id, request, {"value": value, "by": by}, granted)
            return None

    async def _answer_child(
        self,
        turn_id: str,
        child: ChildRequest,
        value: JsonValue,
        *,
        by: str | None,
        granted: Grant | None,
    ) -> None:
        """Answer the child request a mirror stands for, as the child's request says."""
        # An answer handed to this session's inbox is not done by the child's commit: the
        # item is settled here once the child has the answer.
        token = TAKING.set(None)
        try:
            await self._shared.host.delegations.answer(
                self._shared.key, turn_id, child, value, by=by, granted=granted
            )
        finally:
            TAKING.reset(token)

    async def _child_of(self, turn_id: str, input_id: str) -> ChildRequest | None:
        """The child request that request ``input_id`` of ``turn_id`` mirrors, if it does.

        A mirror settled already still names its child, whose answer tells who answered.
        """
        record = (await self._shared.loaded()).turns.get(turn_id)
        if record is None:
            return None
        waiting = record.result if isinstance(record.result, Suspended) else None
        request = waiting.request_for(input_id) if waiting is not None else None
        if request is None and input_id.startswith(MIRROR_PREFIX):
            steps = await self._shared.host.store.load_steps(self._shared.key, turn_id)
            memo = steps.get(answer_step(turn_id, input_id))
            kept = memo.get("request") if isinstance(memo, dict) else None
            request = REQUEST_ADAPTER.validate_python(kept) if kept is not None else None
        return request.child if request is not None else None

    async def settle_mirror(self, turn_id: str, input_id: str) -> bool:
        """Settle a mirror whose child request is no longer open; False if it is not open."""
        async with self._writer.locked_and_leased():
            state = await self._shared.loaded()
            request = _still_open(state, turn_id, input_id)
            if request is None or request.child is None:
                return False
            try:
                await self._store_answer(state, turn_id, request, {"child_moved_on": True})
            except ResumeConflictError:
                return False
            return True

    async def wake(self, turn_id: str) -> bool:
        """Queue a suspended turn again without an answer; False if it no longer waits."""
        async with self._writer.locked_and_leased():
            state = await self._shared.loaded()
            if _waiting(state, turn_id) is None:
                return False
            record = state.turns[turn_id]
            woken = moved(record, "queued", resumes=record.resumes + 1)
            commit = Commit(turns=(woken,), status="running", expect=((turn_id, "suspended"),))
            try:
                caller_left = await self._writer.commit_shielded(commit)
            except StoreConflictError:
                await self._shared.reread_unless_busy()
                return False
            apply_commit(state, commit)
            self._run_again(turn_id, caller_left)
            return True

    async def expire(self, turn_id: str, input_id: str) -> bool:
        """Answer an overdue request as expired; see `AgentSession.expire`."""
        async with self._writer.locked_and_leased():
            state = await self._shared.loaded()
            request = _still_open(state, turn_id, input_id)
            if request is None:
                return False
            expires_at = request.expires_at
            if expires_at is None or request.child is not None:
                return False  # a mirror expires when the child's request does
            if expires_at > self._shared.host.clock():
                # The event loop's timer fired before the wall clock reached the deadline
                # (the clock was set back, say), so the expiry is scheduled again.
                suspended = suspended_in(state)
                assert suspended is not None
                self._shared.host.schedule_expiry(self._shared.key, suspended)
                return False
            try:
                await self._store_answer(state, turn_id, request, {"expired": True})
            except ResumeConflictError:
                return False  # a person answered in the meantime
            return True

    async def _suspended_request(
        self,
        state: StoredSession,
        turn_id: str,
        input_id: str,
        by: str | None,
        granted: Grant | None,
    ) -> InputRequest:
        record = state.turns.get(turn_id)
        if record is None:
            raise ResumeConflictError(f"{self._shared.key}: no turn {turn_id}")
        if record.status != "suspended" or not isinstance(record.result, Suspended):
            raise await self._not_suspended_error(turn_id, input_id, by, granted)
        if is_suspend_ending(record, state.cancels):
            raise ResumeConflictError(f"{self._shared.key}: turn {turn_id} is being cancelled")
        request = record.result.request_for(input_id)
        if request is None:
            answered = await self._not_suspended_error(turn_id, input_id, by, granted)
            if answered.answered_by is not None or answered.expired:
                raise answered  # settled already, while the batch's other calls still wait
            waits_on = record.result.requests
            if not any(is_answerer(turn_id, r, by=by, granted=granted) for r in waits_on):
                raise ResumeConflictError(
                    f"{self._shared.key}: turn {turn_id} waits for another request"
                )
            ids = ", ".join(repr(r.id) for r in waits_on)
            raise ResumeConflictError(
                f"{self._shared.key}: turn {turn_id} waits for {ids}, not {input_id!r}"
            )
        return request

    async def _not_suspended_error(
        self, turn_id: str, input_id: str, by: str | None, granted: Grant | None
    ) -> ResumeConflictError:
        steps = await self._shared.host.store.load_steps(self._shared.key, turn_id)
        answer = steps.get(answer_step(turn_id, input_id))
        not_waiting = ResumeConflictError(
            f"{self._shared.key}: turn {turn_id} is not waiting for an answer"
        )
        if not isinstance(answer, dict):
            return not_waiting
        asked = REQUEST_ADAPTER.validate_python(answer.get("request"))
        if not is_answerer(turn_id, asked, by=by, granted=granted):
            # only someone who could have answered the request is told who did, and how
            return not_waiting
        if answer.get("expired"):
            return ResumeConflictError(
                f"request {input_id} of turn {turn_id} already expired", expired=True
            )
        who, value = answer.get("by"), answer.get("value")
        return ResumeConflictError(
            f"request {input_id} of turn {turn_id} was already answered by "
            f"{who or 'someone'}: {value!r}",
            answered_by=who if isinstance(who, str) else None,
            answer=value,
        )

    async def _store_answer(
        self,
        state: StoredSession,
        turn_id: str,
        request: InputRequest,
        answer: JsonValue,
        granted: Grant | None = None,
    ) -> None:
        record = state.turns[turn_id]
        suspended = record.result
        assert isinstance(suspended, Suspended)
        still_open = tuple(r for r in suspended.requests if r.id != request.id)
        if still_open:
            # other calls of the batch still wait for their answers: the turn stays
            # suspended on those, and runs on once the last is in
            waiting = dataclasses.replace(suspended, request=still_open[0], others=still_open[1:])
            resumed = dataclasses.replace(record, result=waiting)
        else:
            resumed = moved(record, "queued", resumes=record.resumes + 1)
        # The request is stored with its answer: a later resume is checked against it,
        # and the answer is only ever handed to the tool call that asked.
        kept = {**answer, "call": request.call_id, "request": request.as_dict()}
        commit = Commit(
            steps=(StoredStep(answer_step(turn_id, request.id), turn_id, kept),),
            turns=(resumed,),
            status="suspended" if still_open else "running",
            # written only if the turn is still suspended: of two resumes racing (two
            # clicks, two processes), exactly one is applied
            expect=((turn_id, "suspended"),),
        )
        try:
            caller_left = await self._writer.commit_shielded(commit)
        except StoreConflictError:
            await self._shared.reread_unless_busy()  # another process answered: read what it wrote
            raise await self._not_suspended_error(
                turn_id, request.id, answer.get("by"), granted
            ) from None
        apply_commit(state, commit)
        self._shared.host.cancel_expiry(self._shared.key, turn_id)
        self._shared.host.turn_changed(self._shared.key, resumed)
        if still_open:
            assert isinstance(resumed.result, Suspended)
            self._shared.host.schedule_expiry(self._shared.key, resumed.result)
            if caller_left:
                raise asyncio.CancelledError
            return
        self._run_again(turn_id, caller_left)

    def _run_again(self, turn_id: str, caller_left: bool) -> None:
        """Queue a turn that was suspended, ahead of turns admitted before it suspended."""
        self._shared.host.cancel_expiry(self._shared.key, turn_id)
        self._shared.queue.appendleft(turn_id)
        # If the runtime is closed, what was written stays, and the turn runs at the next
        # start.
        with contextlib.suppress(RuntimeClosedError):
            self._worker.start()
        if caller_left:
            raise asyncio.CancelledError


def _waiting(state: StoredSession, turn_id: str) -> Suspended | None:
    """The suspend of ``turn_id``, if the session still waits on it (no reset, no cancel)."""
    suspended = suspended_in(state)
    if (
        state.reset_through is not None
        or suspend_is_ending(state)
        or suspended is None
        or suspended.turn_id != turn_id
    ):
        return None
    return suspended


def _still_open(state: StoredSession, turn_id: str, input_id: str) -> InputRequest | None:
    """Request ``input_id`` of ``turn_id``, if the session is suspended on it still."""
    suspended = _waiting(state, turn_id)
    return suspended.request_for(input_id) if suspended is not None else None
