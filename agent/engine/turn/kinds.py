"""A call's kind, resolved once and recorded with the reply that made it.

What decides how a call is run (a transaction, an await, a person's approval
first) must come from the turn's own history on a replay, not from the process
doing the replaying: that process may no longer declare the tool, or declare it
differently. So the model step that commits a reply with calls records each
call's kind in its memo (``model:<n>`` has ``kinds``), and a replay reads it from
there. A call recorded as asking is asked for whatever the replaying process
declares; a reply committed before kinds were recorded carries none, and only
its calls consult the tools as declared now.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal, get_args

from agent.core.messages import ToolCall
from agent.definition.tools import Tool
from agent.engine.turn.context import RunContext

__all__ = ["CALL_KINDS", "CallKind", "kind_of", "kinds_of", "needs_approval", "recorded_kind"]

CallKind = Literal["local", "remote", "asks", "delegates", "unknown"]
"""``local``: a plain ``def``, run inside its step's transaction; ``remote``: awaited,
then committed; ``asks``: a person approves it before it runs; ``delegates``: it hands
its task to another agent, as a child turn; ``unknown``: no tool of that name could run
it (denied, or not declared). Stored: never rename one."""

CALL_KINDS: Final[frozenset[str]] = frozenset(get_args(CallKind))


def kind_of(tool: Tool | None) -> CallKind:
    """The kind of a call to ``tool`` as this process declares it."""
    if tool is None:
        return "unknown"
    if tool.requires_approval:
        return "asks"
    if tool.delegates_to is not None:
        return "delegates"
    return "local" if tool.is_local else "remote"


def kinds_of(run: RunContext, calls: Iterable[ToolCall]) -> dict[str, str]:
    """The kind of each call, by call id, to record with the reply that made them."""
    return {call.id: kind_of(run.tool_for(call.name)) for call in calls}


async def recorded_kind(run: RunContext, at: int, call: ToolCall) -> str | None:
    """The kind recorded for ``call`` of the reply at transcript index ``at``; None if none was."""
    kinds = run.kinds.get(at)
    if kinds is None:
        memo = (await run.stored_steps()).get(f"model:{at}")
        stored = memo.get("kinds") if isinstance(memo, dict) else None
        kinds = {
            str(call_id): kind
            for call_id, kind in (stored.items() if isinstance(stored, dict) else ())
            if isinstance(kind, str) and kind in CALL_KINDS
        }
        run.kinds[at] = kinds
    return kinds.get(call.id)


def needs_approval(recorded: str | None, tool: Tool | None) -> bool:
    """Whether a person approves the call before it runs: as recorded, or as declared now.

    Either one asking is enough: a process that dropped the approval from a tool does not
    run a call recorded as asking unapproved, and one that added it asks for calls
    recorded before.
    """
    return recorded == "asks" or (tool is not None and tool.requires_approval)
