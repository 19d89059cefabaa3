"""The policies Slack turns run under: the file's, and what admins changed from Slack.

``BOT_CONFIG`` gives the policy of the ``slack`` source and of some channels; a
workspace admin may change a channel's from Slack (``/agent-policy``), and that
change is kept in the database, on top of the file's, from the next turn on.
The source and the channel of a turn come from the signed event, never from
what a message says.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

from agent import Agent, ConfigError, SessionStore, SurfacePolicy, TurnPolicy, resolve_policy
from bot.config_file import BotConfig, FollowUps
from bot.surface_config import AgentSurface

__all__ = ["SOURCE", "ChannelPolicy", "PolicyBook", "PolicyChange", "check_channel_policies"]

SOURCE = "slack"
MAX_INSTRUCTIONS = 4000
"""The longest instructions a channel may be given from Slack, in characters."""


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """One change an admin asked for, from ``/agent-policy``."""

    action: Literal["deny", "allow", "instructions", "mode", "reset"]
    value: str | None = None
    """The tool, the instructions (None clears them), or the mode."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelPolicy:
    """What turns in one channel run under, and where each part of it comes from."""

    channel: str | None
    """None for the source's default (a channel nobody configured, a DM)."""
    policy: TurnPolicy
    offered: tuple[str, ...]
    """The agent's tools less the denied ones, as the model sees them."""
    prompt: tuple[str, ...]
    """How the system prompt is built, part by part, in words."""
    from_file: bool
    changed_by: str | None = None
    """Who last changed it from Slack, when someone did."""
    changed_at: float | None = None


class PolicyBook:
    """Looks up and changes the policies of the bot's Slack turns.

    Raises:
        ConfigError: At construction, a channel's policy in the file names a tool the
            agent does not have, or replaces the prompt with no instructions.
    """

    def __init__(self, agent: Agent, config: BotConfig, store: SessionStore) -> None:
        check_channel_policies(agent, config)
        self.agent = agent
        self._config = config
        self._store = store
        self._changing = asyncio.Lock()
        """One change at a time: each reads what is kept, then writes it back."""

    @property
    def admins(self) -> tuple[str, ...]:
        """Users the file lets change policies, besides the workspace's admins."""
        return self._config.admins

    @property
    def follow_ups(self) -> FollowUps:
        """How a follow-up in a thread with a turn at work is taken, by channel (the file's)."""
        return self._config.follow_ups

    @property
    def surface(self) -> AgentSurface:
        """The words of the agent surface: greeting, suggested prompts, loading lines."""
        return self._config.agent_surface

    async def for_channel(self, channel: str | None) -> TurnPolicy:
        """The policy a turn in ``channel`` starts under now."""
        stored = await self._stored() if channel else {}
        return resolve_policy(
            self.agent, SOURCE, place=channel, refined=self._refined(channel, stored)
        )

    def _refined(
        self, channel: str | None, stored: dict[str, tuple[SurfacePolicy, dict[str, Any]]]
    ) -> SurfacePolicy | None:
        """The file's policy of ``channel`` with what was changed from Slack on top."""
        if channel is None:
            return None
        kept = stored.get(channel)
        return _layer(self._config.channels.get(channel), kept[0] if kept else None)

    async def _stored(self) -> dict[str, tuple[SurfacePolicy, dict[str, Any]]]:
        found: dict[str, tuple[SurfacePolicy, dict[str, Any]]] = {}
        for channel, kept in (await self._store.place_policies(SOURCE)).items():
            if isinstance(kept, dict):
                policy = SurfacePolicy.model_validate(kept.get("policy") or {})
                found[channel] = (policy, kept)
        return found

    async def change(self, channel: str, change: PolicyChange, *, by: str) -> ChannelPolicy:
        """Apply ``change`` to the channel's policy kept in the database; what it is now.

        Raises:
            ConfigError: The change names a tool the agent does not have, or a mode
                that is neither ``overlay`` nor ``replace``.
        """
        async with self._changing:
            stored = (await self._stored()).get(channel)
            current = stored[0] if stored else SurfacePolicy()
            if change.action == "reset":
                await self._store.save_place_policy(SOURCE, channel, None)
                return await self.describe(channel)
            updated = self._changed(channel, current, change)
            kept = {"policy": updated.model_dump(exclude_unset=True), "by": by, "at": time.time()}
            await self._store.save_place_policy(SOURCE, channel, kept)
            return await self.describe(channel)

    def _changed(self, channel: str, current: SurfacePolicy, change: PolicyChange) -> SurfacePolicy:
        """``current`` (what Slack changed so far) with ``change`` on top.

        Slack only narrows what the file allows: ``allow`` takes back a deny made from
        Slack, never one the operator wrote in BOT_CONFIG.
        """
        value = change.value
        if change.action in ("deny", "allow"):
            if value is None or value not in self.agent.tools_by_name:
                tools = ", ".join(sorted(self.agent.tools_by_name))
                raise ConfigError(f"there is no tool {value!r} (the tools are: {tools})")
            deny = set(current.deny_tools)
            if change.action == "deny":
                deny.add(value)
            else:
                if value in self._file_denies(channel):
                    raise ConfigError(
                        f"{value} is denied here by BOT_CONFIG; only the file can allow it"
                    )
                deny.discard(value)
            return current.model_copy(update={"deny_tools": tuple(sorted(deny))})
        if change.action == "mode":
            if value not in ("overlay", "replace"):
                raise ConfigError(f"the mode is overlay or replace, not {value!r}")
            updated = current.model_copy(update={"mode": value})
        else:
            if value is not None and len(value) > MAX_INSTRUCTIONS:
                raise ConfigError(f"instructions are at most {MAX_INSTRUCTIONS} characters")
            updated = current.model_copy(update={"instructions": value})
        layered = _layer(self._config.channels.get(channel), updated)
        if layered is not None and layered.mode == "replace" and not layered.instructions:
            raise ConfigError("mode replace needs instructions to replace the prompt with")
        return updated

    def _file_denies(self, channel: str) -> set[str]:
        surface = self.agent.surfaces.get(SOURCE, SurfacePolicy())
        in_file = self._config.channels.get(channel, SurfacePolicy())
        return (set(surface.deny_tools) - set(in_file.allow_tools)) | set(in_file.deny_tools)

    async def describe(self, channel: str | None) -> ChannelPolicy:
        """The channel's effective policy, with where each part comes from."""
        return self._described(channel, await self._stored() if channel else {})

    def _described(
        self, channel: str | None, stored: dict[str, tuple[SurfacePolicy, dict[str, Any]]]
    ) -> ChannelPolicy:
        refined = self._refined(channel, stored)
        policy = resolve_policy(self.agent, SOURCE, place=channel, refined=refined)
        meta = stored[channel][1] if channel in stored else {}
        by, at = meta.get("by"), meta.get("at")
        return ChannelPolicy(
            channel=channel,
            policy=policy,
            offered=tuple(n for n in self.agent.tools_by_name if n not in policy.deny_tools),
            prompt=self._prompt_parts(refined),
            from_file=channel in self._config.channels,
            changed_by=by if isinstance(by, str) else None,
            changed_at=float(at) if isinstance(at, int | float) else None,
        )

    async def describe_all(self) -> list[ChannelPolicy]:
        """The source's default, then every channel the file or an admin gave a policy."""
        stored = await self._stored()  # read once for every channel, not once per channel
        channels = sorted(set(self._config.channels) | set(stored))
        return [self._described(c, stored) for c in [None, *channels]]

    def _prompt_parts(self, refined: SurfacePolicy | None) -> tuple[str, ...]:
        surface = self.agent.surfaces.get(SOURCE, SurfacePolicy())
        overlay = self.agent.source_instructions(SOURCE)
        parts = ["base instructions (instructions.md)"]
        if overlay is not None:
            origin = (
                "BOT_CONFIG" if surface.instructions is not None else f"instructions.{SOURCE}.md"
            )
            described = f"the {SOURCE} instructions ({origin})"
            parts = [described] if surface.mode == "replace" else [*parts, described]
        if refined is not None and refined.instructions is not None:
            described = f"the channel's instructions: {_quoted(refined.instructions)}"
            parts = [described] if refined.mode == "replace" else [*parts, described]
        return tuple(parts)


def check_channel_policies(agent: Agent, config: BotConfig) -> None:
    """Refuse a channel policy of the file that ``agent`` cannot follow.

    Raises:
        ConfigError: It names a tool the agent does not have, or replaces the prompt
            with no instructions; the message names the channel and the field.
    """
    for channel, policy in config.channels.items():
        where = f"BOT_CONFIG channels.{channel}"
        agent.check_surface(where, policy)
        if policy.mode == "replace" and not policy.instructions:
            raise ConfigError(f"{where}: mode 'replace' needs instructions to replace with")


def _layer(below: SurfacePolicy | None, above: SurfacePolicy | None) -> SurfacePolicy | None:
    """The file's channel policy with what was changed from Slack on top.

    Slack's denies add to the file's; the file's allows stand (Slack keeps none);
    instructions set from Slack take the place of the file's for the channel.
    """
    if above is None:
        return below
    if below is None:
        return above.model_copy(update={"allow_tools": ()})
    deny = set(below.deny_tools) | set(above.deny_tools)
    allow = set(below.allow_tools) - deny
    instructions, mode = below.instructions, below.mode
    if above.instructions is not None or "mode" in above.model_fields_set:
        instructions = above.instructions if above.instructions is not None else instructions
        mode = above.mode
    return SurfacePolicy(
        deny_tools=tuple(sorted(deny)),
        allow_tools=tuple(sorted(allow)),
        instructions=instructions,
        mode=mode,
    )


def _quoted(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return f"“{flat if len(flat) <= limit else flat[: limit - 1] + '…'}”"
