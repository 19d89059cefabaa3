"""A schedule's firing, started as a proactive turn and posted into its channel."""

from __future__ import annotations

from slack_sdk.errors import SlackApiError

from agent import (
    AgentRuntime,
    Cancelled,
    Completed,
    Failed,
    Interrupted,
    Suspended,
    Trigger,
    receive,
)
from bot.schedules import Firing
from bot.slack.channel import SlackChannel
from bot.texts import held_firing

__all__ = ["ScheduleFailed", "fire", "fire_by_hand", "has_fired"]


class ScheduleFailed(Exception):
    """A schedule fired by hand did not deliver its reply; the message says why."""


async def fire(channel: SlackChannel, runtime: AgentRuntime, team: str, firing: Firing) -> str:
    """Start ``firing``'s turn (or replay it, when it ran already) and post it; its turn id."""
    schedule = firing.schedule
    return await receive(
        channel,
        runtime,
        seed=firing.seed(),
        target={"channel": schedule.channel},
        trigger=Trigger(by=firing.by),
        session=firing.session(team),
        turn_id=firing.turn_id,
        policy=await channel.policy_for(schedule.channel),  # the channel's, as for a person
    )


async def has_fired(
    channel: SlackChannel, runtime: AgentRuntime, team: str, firing: Firing
) -> bool:
    """Whether ``firing``'s turn exists already (here, before a restart, or in another process).

    It is looked for in the firing's own session, and in the one an older bot kept
    every firing of the schedule in.
    """
    for session_id in (firing.session(team), firing.schedule.session(team)):
        session = runtime.session(channel.agent, session_id)
        if any(t.turn_id == firing.turn_id for t in await session.turns()):
            return True
    return False


async def fire_by_hand(
    channel: SlackChannel, runtime: AgentRuntime, team: str, firing: Firing
) -> str:
    """Fire ``firing`` now and post its reply, as its cron would; what it came to, in a line.

    Raises:
        ScheduleFailed: Slack refused the reply, or the turn failed, was cancelled or is
            held.
    """
    schedule = firing.schedule
    try:
        turn_id = await fire(channel, runtime, team, firing)
    except SlackApiError as exc:
        error = exc.response.get("error")
        raise ScheduleFailed(f"Slack refused the reply: {error}") from None
    session = runtime.session(channel.agent, firing.session(team))
    # run and shown here, the turn has ended; run by a replica that fired the same
    # minute first, it is waited for there
    result, where = await session.result(turn_id), schedule.channel
    if isinstance(result, Completed):
        return f"Schedule {schedule.name}: its reply is in {where} (turn {turn_id})."
    if isinstance(result, Suspended):
        return f"Schedule {schedule.name}: waiting in {where} for an approval (turn {turn_id})."
    if isinstance(result, Failed):
        raise ScheduleFailed(f"the turn failed: {result.error}")
    if isinstance(result, Cancelled):
        raise ScheduleFailed(f"the turn was cancelled ({result.reason})")
    if isinstance(result, Interrupted):
        # A firing's turn id is fixed: firing it again replays the same held turn, which
        # stays held. Say so and what to do, rather than leave a retry that never ends.
        raise ScheduleFailed(held_firing(turn_id, result.reason, result.detail))
    raise ScheduleFailed(f"the turn ended as {result.status}")
