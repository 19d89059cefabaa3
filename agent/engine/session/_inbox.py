"""`Inbox`: work handed to the process that writes a session, by one that does not.

Replicas behind a load balancer each get some of a thread's messages and clicks.
A replica that cannot take a session's lease (another live replica holds it)
hands the start, cancel, answer, reset, hold, release or steer over: it checks what it
can on a fresh read (a suspended session refuses a start, an answer must come
from someone allowed to give it), posts the item in the store, and the store
wakes the other replicas. The owner carries each item out as it would its own
call, in the commit that deletes the item (`Commit.inbox_done`), so an item is
carried out exactly once, and supersede, cancel and answers work whichever
replica Slack reached. The owner is the replica that runs the turn, so it is the
one that shows it.

An owner finds its items when woken, when its sweep looks (every replica's does,
for sessions whose owner died too), and before it lets a session go.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from dataclasses import dataclass
from typing import Protocol

from pydantic import TypeAdapter

from agent._json import JsonValue
from agent.core.hitl import Grant
from agent.core.records import InboxItem, SessionKey
from agent.core.turns import INTERRUPT_REASONS, TurnInput
from agent.engine.session._state import SessionState
from agent.errors import AgentError, StoreConflictError


class HandOverTarget(Protocol):
    """The calls of `AgentSession` an item is carried out with."""

    @property
    def key(self) -> SessionKey: ...

    async def start(self, input: TurnInput, *, turn_id: str, replace: bool) -> str: ...

    async def cancel(self, turn_id: str, reason: str) -> bool: ...

    async def resume(
        self,
        turn_id: str,
        input_id: str,
        value: JsonValue,
        *,
        by: str | None,
        granted: Grant | None,
    ) -> None: ...

    async def reset(self) -> object: ...

    async def interrupt_turn(self, turn_id: str) -> bool: ...

    async def interrupt(self, why: str) -> list[str]: ...

    async def resume_session(self) -> bool: ...

    async def steer(
        self, text: str, *, turn_id: str | None, steer_id: str | None, by: str | None
    ) -> object: ...

    async def settle_inbox_item(self, item: int) -> None: ...


__all__ = ["ELSEWHERE_POLL_SECONDS", "TAKING", "HandOverTarget", "Inbox", "Taking"]

logger = logging.getLogger("agent")

ELSEWHERE_POLL_SECONDS = 0.25
"""How often a caller waiting on work another process carries out reads the session again."""

_INPUT: TypeAdapter[TurnInput] = TypeAdapter(TurnInput)
_GRANT: TypeAdapter[Grant] = TypeAdapter(Grant)


@dataclass(slots=True)
class Taking:
    """The inbox item a call is carrying out: its first commit deletes it."""

    id: int
    done: bool = False


TAKING: contextvars.ContextVar[Taking | None] = contextvars.ContextVar("inbox_item", default=None)
"""Set while the owner carries out an item; `Writer.commit_shielded` adds it to the commit."""


class Inbox:
    """Hands one session's work to its owner, and carries out what was handed to it."""

    def __init__(self, shared: SessionState) -> None:
        self._shared = shared

    @staticmethod
    def may_hand_over(hands_over: bool) -> bool:
        """Whether a call here may hand its work over (never one carrying out an item)."""
        return hands_over and TAKING.get() is None

    async def hand_over(
        self,
        kind: str,
        ref: str,
        body: JsonValue,
        *,
        turn_id: str | None = None,
        answers: str | None = None,
    ) -> None:
        """Post the work for the owner; the same work posted twice is one item.

        ``turn_id``: the turn the work runs (a start's, an answer's), which the owner
        runs and shows from now on; ``answers``: the request an answer is for.
        """
        host = self._shared.host
        posted = await host.store.post_inbox(self._shared.key, kind, ref, body, at=host.clock())
        if turn_id is not None:
            self._shared.handed_over[turn_id] = answers
        logger.info(
            "%s is written by another process: its %s %s was handed over%s",
            self._shared.key,
            kind,
            ref,
            "" if posted else " (already)",
        )

    @staticmethod
    def start_body(given: TurnInput, replace: bool) -> JsonValue:
        return {"input": _INPUT.dump_python(given, mode="json"), "replace": replace}

    @staticmethod
    def answer_body(
        turn_id: str, input_id: str, value: JsonValue, by: str | None, granted: Grant | None
    ) -> JsonValue:
        grant = None if granted is None else _GRANT.dump_python(granted, mode="json")
        return {
            "turn_id": turn_id,
            "input_id": input_id,
            "value": value,
            "by": by,
            "granted": grant,
        }

    async def carry_out(self, session: HandOverTarget) -> int:
        """Carry out the items handed to this session, oldest first; how many were.

        The caller has just found this process holding the session's lease, or
        able to take it.
        """
        done = 0
        for item in await self._shared.host.store.read_inbox(self._shared.key):
            if self._shared.host.is_closed:
                break
            await self._carry_out_one(session, item)
            done += 1
        return done

    async def _carry_out_one(self, session: HandOverTarget, item: InboxItem) -> None:
        taking = Taking(item.id)
        token = TAKING.set(taking)
        try:
            await _act(session, item)
        except StoreConflictError:
            return  # another owner carried it out first
        except AgentError as exc:
            # refused as the same call made here would have been (the replica that handed
            # it over checked what it could, on what it read then): it is done with
            logger.warning(
                "%s: the %s %s handed over was refused: %s", session.key, item.kind, item.ref, exc
            )
        finally:
            TAKING.reset(token)
        if not taking.done:
            # nothing was written for it (a start already admitted, a cancel of a turn that
            # ended): it is done with all the same
            with contextlib.suppress(StoreConflictError):
                await session.settle_inbox_item(item.id)


async def _act(session: HandOverTarget, item: InboxItem) -> None:
    body = item.body if isinstance(item.body, dict) else {}
    if item.kind == "start":
        given = _INPUT.validate_python(body.get("input"))
        await session.start(given, turn_id=item.ref, replace=bool(body.get("replace")))
    elif item.kind == "cancel":
        reason = str(body.get("reason", "requested"))
        if reason in INTERRUPT_REASONS:
            await session.interrupt_turn(item.ref)
        else:
            await session.cancel(item.ref, reason)
    elif item.kind == "answer":
        granted = body.get("granted")
        await session.resume(
            str(body.get("turn_id")),
            str(body.get("input_id")),
            body.get("value"),
            by=by if isinstance(by := body.get("by"), str) else None,
            granted=None if granted is None else _GRANT.validate_python(granted),
        )
    elif item.kind == "reset":
        await session.reset()
    elif item.kind == "hold":
        await session.interrupt(str(body.get("why", "")))
    elif item.kind == "release":
        await session.resume_session()
    elif item.kind == "steer":
        by = body.get("by")
        await session.steer(
            str(body.get("text", "")),
            turn_id=str(body.get("turn_id")),
            steer_id=item.ref,
            by=by if isinstance(by, str) else None,
        )
    else:
        logger.warning("%s: an inbox item of unknown kind %r is dropped", session.key, item.kind)
