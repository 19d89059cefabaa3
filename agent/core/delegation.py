"""Delegation: a turn that hands a task to another agent, as a turn of a session of its own.

A call that delegates (``ctx.delegate`` in a tool, or a tool made by
``delegate_tool``) starts a *child* turn: a turn of the child agent's session
``<parent session>/<call id>``, whose id is made from the parent turn's and the
call's, so a replay of the parent joins the child it started rather than
starting another. The child records its `ParentLink`. While the child waits for
a person, the parent waits too, on a *mirror* of each of the child's requests:
answering a mirror answers the child's request, checked as the child's request
says, and the parent runs on once the child is no longer waiting on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container
from dataclasses import dataclass

from agent.core.hitl import ChildRequest, InputRequest

__all__ = [
    "MIRROR_PREFIX",
    "ChildRequest",
    "ParentLink",
    "child_address",
    "child_step",
    "mirror_of",
]

MIRROR_PREFIX = "delegated:"
"""How the id of a mirror request begins (see `mirror_of`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentLink:
    """The turn and call a child turn was delegated by, kept with the child's input."""

    agent: str
    session_id: str
    turn_id: str
    call_id: str
    depth: int = 1
    """How many delegations down from a turn nobody delegated: its children are at 1."""


def child_address(
    parent_session: str, parent_turn: str, call_id: str, nth: int = 0
) -> tuple[str, str]:
    """The session id and turn id of the ``nth`` delegation (from 0) of a call; stable."""
    child = call_id if nth == 0 else f"{call_id}.{nth}"
    return f"{parent_session}/{child}", f"{parent_turn}/{child}"


def child_step(call_id: str, nth: int = 0) -> str:
    """The parent's step id that records which child turn a call delegated to."""
    return f"child:{call_id}:{nth}"


def mirror_of(
    asked: InputRequest, child: ChildRequest, *, call_id: str, settled: Container[str]
) -> InputRequest:
    """The parent's request standing for ``asked``, the child's, made by the parent's call.

    Its id names the delegation and the child's request, so it stays the same while the
    child waits on that request (its card is the same card) and is new for each request
    the child makes. One the parent settled already (``settled``: its answered request
    ids; a reconcile on a stale copy of the child thought it moved on) is never asked
    under again: a ``#<n>`` is added. Who may answer, the prompt and the schema are the
    child's.
    """
    which = child.turn_id.rsplit("/", 1)[-1]
    mirror_id = base = f"{MIRROR_PREFIX}{which}:{asked.id}"
    again = 0
    while mirror_id in settled:
        again += 1
        mirror_id = f"{base}#{again}"
    return dataclasses.replace(asked, id=mirror_id, call_id=call_id, child=child)
