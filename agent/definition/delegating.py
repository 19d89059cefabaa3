"""A tool made from an agent: each call hands its task to that agent, as a child turn."""

from __future__ import annotations

import dataclasses

from agent._json import JsonValue
from agent.definition.tools import Tool, ToolContext, tool

__all__ = ["delegate_tool"]


def delegate_tool(agent: str, *, name: str | None = None, description: str | None = None) -> Tool:
    """A tool whose every call delegates its ``task`` to the mounted agent ``agent``.

    The call completes with the child turn's reply (see `ToolContext.delegate`); its
    kind is recorded as ``delegates``.

    Example:
        >>> researcher = delegate_tool("researcher", description="Look things up.")
    """

    async def delegate(task: str, ctx: ToolContext) -> JsonValue:
        return await ctx.delegate(agent, task)

    text = description or f"Hand a task to the {agent} agent; it answers with its reply."
    made = tool(name=name or f"ask_{agent}", description=text)(delegate)
    return dataclasses.replace(made, delegates_to=agent)
