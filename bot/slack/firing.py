"""A schedule's firing, started as a proactive turn and posted into its channel."""

from __future__ import annotations

from agent import AgentRuntime, Trigger, receive
from bot.schedules import Firing
from bot.slack.channel import SlackChannel

__all__ = ["fire", "has_fired"]


async def fire(channel: SlackChannel, runtime: AgentRuntime, team: str, firing: Firing) -> str:
    """Start ``firing``'s turn (or replay it, when it ran already) and post it; its turn id."""
    schedule = firing.schedule
    return await receive(
        channel,
        runtime,
        seed=firing.seed(),
        target={"channel": schedule.channel},
        trigger=Trigger(by=firing.by),
        session=schedule.session(team),
        turn_id=firing.turn_id,
        policy=await channel.policy_for(schedule.channel),  # the channel's, as for a person
    )


async def has_fired(
    channel: SlackChannel, runtime: AgentRuntime, team: str, firing: Firing
) -> bool:
    """Whether ``firing``'s turn exists already (here, before a restart, or in another process)."""
    session = runtime.session(channel.agent, firing.schedule.session(team))
    return any(t.turn_id == firing.turn_id for t in await session.turns())
