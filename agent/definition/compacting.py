"""`Compacting`: when a long session's oldest turns give way to a summary of them."""

from __future__ import annotations

from dataclasses import dataclass

from agent.errors import ConfigError

__all__ = ["Compacting"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Compacting:
    """Keep a long-lived session's memory and requests flat.

    Once ``every`` turns more than ``keep_turns`` have ended, the oldest of them
    (all but the newest ``keep_turns``) are summarised by the agent's model into
    one summary, sent before the live messages in every later request, and moved
    with their steps into the archive of the session's generation.
    """

    keep_turns: int = 20
    """The newest turns kept word for word."""
    every: int = 20
    """How many turns beyond ``keep_turns`` gather before one summary call takes them."""
    message_chars: int = 4_000
    """Of each message summarised, how much the summary request carries."""

    def __post_init__(self) -> None:
        if self.keep_turns < 1 or self.every < 1 or self.message_chars < 100:
            raise ConfigError(
                "compacting: keep_turns and every must be 1 or more, message_chars 100 or more"
            )
