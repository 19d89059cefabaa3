"""Surface policies: how an agent behaves per source (``slack``) and per place within it.

An operator declares a `SurfacePolicy` per source, and a channel may refine it
with its own. What a turn runs under is a `TurnPolicy`, resolved once when the
turn is admitted and kept with it (while it is suspended, across a restart), so a
configuration changed meanwhile does not change a turn already under way. It is
enforced in code: a denied tool is not listed to the model, and a call to it
fails as an unknown tool, so no prompt can talk the model into it.

The source and the channel come from the signed event the channel received,
never from the text of a message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "SurfacePolicy",
    "TurnPolicy",
]

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
