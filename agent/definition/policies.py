"""Resolving what a turn runs under from an agent's surface policies."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agent.core.policy import Mode, SurfacePolicy, TurnPolicy

if TYPE_CHECKING:
    from agent.definition.agent import Agent

__all__ = ["resolve_policy", "warn_unmounted_surfaces"]

logger = logging.getLogger("agent")


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
