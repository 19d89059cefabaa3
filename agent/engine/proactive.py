"""Turns nobody typed: a schedule or a program starts a turn, and a channel shows it.

A proactive turn opens with a *seed*, stored as a ``trigger`` message attributed
to what started it (``schedule:daily``), so the transcript records that no
person said it; the model reads it as an ordinary user message. Its reply is
shown by the channel's own `Channel.deliver`, the renderer an inbound reply
uses, at a target the channel understands (a Slack channel id, say).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from agent._json import JsonValue
from agent.core.policy import TurnPolicy
from agent.core.turns import TurnInput
from agent.errors import ConfigError

if TYPE_CHECKING:
    from agent.engine.runtime import AgentRuntime

__all__ = ["Channel", "ChecksTargets", "Trigger", "receive"]


class Channel(Protocol):
    """A surface that shows turns: a reply to a person, or a turn nobody typed."""

    @property
    def agent(self) -> str:
        """The name of the agent whose turns it shows."""
        ...

    async def deliver(self, session_id: str, turn_id: str, target: JsonValue) -> None:
        """Show the turn at ``target`` until it ends or is suspended on a person's answer.

        It must keep what it needs to finish the showing after a restart: the
        turn itself is durable, and so must be where it is being shown.
        """
        ...


@runtime_checkable
class ChecksTargets(Protocol):
    """A channel that can tell a target it cannot show to, before any turn starts."""

    def check_target(self, target: JsonValue) -> object:
        """Raise `ValueError`, saying why, if this channel cannot show turns at ``target``."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    """What started a turn that no person started."""

    by: str
    """Its name, stored with the seed: ``schedule:daily``, ``cli``..."""
    kind: Literal["proactive"] = "proactive"


async def receive(
    channel: Channel,
    ctx: AgentRuntime,
    *,
    seed: str,
    target: JsonValue,
    trigger: Trigger,
    session: str,
    turn_id: str | None = None,
    policy: TurnPolicy | None = None,
) -> str:
    """Start a proactive turn in ``session`` and show it at ``target`` through ``channel``.

    A ``turn_id`` the session already has replays that turn rather than starting
    another (a schedule's firing, delivered twice, is one turn); delivering it
    again is the channel's to make idempotent.

    Args:
        channel: Shows the turn, as it shows a reply to a person.
        ctx: The runtime that runs the channel's agent.
        seed: The turn's opening text.
        target: Where the channel shows it.
        trigger: What started it.
        session: The session it belongs to.
        turn_id: Its id, when the caller derives one (else a new one).
        policy: The policy it runs under (see `resolve_policy`), from where it is shown.

    Returns:
        The turn's id, once the channel has shown it to its end or to a request.

    Raises:
        ConfigError: The channel cannot deliver, or the runtime has no such agent.
        ValueError: The channel says it cannot show turns at ``target`` (see
            `ChecksTargets`); nothing was started.
        RuntimeClosedError: The runtime is closed: nothing would run the turn.
    """
    deliver = getattr(channel, "deliver", None)
    if not callable(deliver):
        raise ConfigError(f"{type(channel).__name__} cannot deliver a turn: it has no deliver()")
    agent = getattr(channel, "agent", None)
    if not isinstance(agent, str):
        raise ConfigError(f"{type(channel).__name__} names no agent to run the turn")
    ctx.agent(agent)  # raises ConfigError when the runtime does not host it
    if isinstance(channel, ChecksTargets):
        channel.check_target(target)  # a turn that could never be shown is not started
    opening = TurnInput(
        text=seed, trigger=trigger.kind, by=trigger.by, target=target, policy=policy
    )
    started = await ctx.session(agent, session).start(opening, turn_id=turn_id)
    await deliver(session, started, target)
    return started
