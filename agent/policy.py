"""Surface policies: how an agent behaves per source (``slack``) and per place within it.

An operator declares a `SurfacePolicy` per source, and a channel may refine it
with its own. What a turn runs under is a `TurnPolicy`, resolved once when the
turn is admitted and kept with it (through a park, across a restart), so a
configuration changed meanwhile does not change a turn already under way. It is
enforced in code: a denied tool is not listed to the model, and a call to it
fails as an unknown tool, so no prompt can talk the model into it.

The source and the channel come from the signed event the channel received,
never from the text of a message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from agent.definition import Agent

__all__ = ["SurfacePolicy", "TurnPolicy", "resolve_policy", "warn_unmounted_surfaces"]

logger = logging.getLogger("agent")

Mode = Literal["overlay", "replace"]


class SurfacePolicy(BaseModel):
    """What an operator declares for a source, or for one place (a channel) within it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deny_tools: tuple[str, ...] = ()
    """Tools the model may not see or call here."""
    allow_tools: tuple[str, ...] = ()
    """For a channel: tools its source denies that this channel allows again."""
    instructions: str | None = None
    """Text added to the system prompt (``overlay``) or replacing it (``replace``). For a
    source, an ``instructions.<source>.md`` file of the agent's folder supplies it."""
    mode: Mode = "overlay"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnPolicy:
    """The policy one turn runs under, resolved when it was admitted."""

    source: str
    """Where the turn came from (the signed event's source)."""
    place: str | None = None
    """Where within the source (a Slack channel id), when the policy was refined by it."""
    system: str
    """The whole system prompt of the turn."""
    deny_tools: tuple[str, ...] = ()
    """Tools not listed to the model; a call to one fails as an unknown tool."""


def resolve_policy(
    agent: Agent, source: str, *, place: str | None = None, refined: SurfacePolicy | None = None
) -> TurnPolicy:
    """The policy of a turn from ``source`` (refined by its ``place``'s policy, if it has one).

    The base instructions come first; the source's overlay is appended to them (or,
    with ``replace``, is the whole prompt); then the place's, the same way. Denied
    tools are the source's and the place's, less those the place allows again.
    """
    surface = agent.surfaces.get(source, SurfacePolicy())
    system = _layered(agent.instructions, agent.source_instructions(source), surface.mode)
    denied = set(surface.deny_tools)
    if refined is not None:
        system = _layered(system, refined.instructions, refined.mode)
        denied = (denied | set(refined.deny_tools)) - set(refined.allow_tools)
    return TurnPolicy(
        source=source,
        place=place if refined is not None else None,
        system=system,
        deny_tools=tuple(sorted(denied)),
    )


def _layered(base: str, layer: str | None, mode: Mode) -> str:
    if layer is None:
        return base
    if mode == "replace":
        return layer
    return f"{base}\n\n{layer}" if base else layer


def warn_unmounted_surfaces(agent: Agent, sources: Iterable[str]) -> list[str]:
    """Log a warning for each source with a policy that none of ``sources`` emits.

    Returns:
        Those sources, sorted.
    """
    emitted = set(sources)
    unmounted = sorted(set(agent.surfaces) - emitted)
    for source in unmounted:
        logger.warning(
            "agent %s has a policy for source %r, but no channel here emits it (only %s)",
            agent.name,
            source,
            ", ".join(sorted(emitted)) or "none",
        )
    return unmounted
