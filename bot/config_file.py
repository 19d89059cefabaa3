"""The ``BOT_CONFIG`` TOML file: schedules, surface policies, who administers the bot.

::

    admins = ["U0123456789"]       # may change channel policies, besides workspace admins

    [[schedules]]
    name = "daily"
    cron = "0 9 * * 1-5"
    channel = "C0123456789"
    prompt = "Summarize today's activity in this channel."

    [surfaces.slack]               # every Slack turn
    deny_tools = []

    [channels.C0123456789]         # turns in one channel: refines the source's
    deny_tools = ["post_message"]
    instructions = "This is #support: answer in two sentences at most."
    mode = "overlay"               # or "replace": the channel's text is the whole prompt

    [approvals]                    # an approval nobody answers expires, and the turn goes on
    hours = 24                     # the default
    channels = { C0123456789 = 2 } # hours, by channel (where the approval is asked)

    [follow_ups]                   # a message in a thread whose reply is still being written
    mode = "replace"               # supersedes it (the default), "steer"s it, or "queue"s
    channels = { C0123456789 = "steer" }

    [agent_surface]                # the greeting, prompts and loading lines (bot.surface_config)
    greeting = "Hi! Ask me about this workspace."

A file with a mistake stops the bot at start, one line per problem, each naming
where it is (``schedule 'daily': cron``, ``channels.C0123456789.mode``).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agent import ConfigError, SurfacePolicy
from bot.schedules import CHANNEL_ID, Schedule
from bot.surface_config import AgentSurface

__all__ = ["Approvals", "BotConfig", "FollowUpMode", "FollowUps", "load_bot_config"]

DEFAULT_APPROVAL_HOURS = 24.0

_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_NOT_A_FIELD = {
    "schedules": "not a field of a schedule",
    "surfaces": "not a field of a policy",
    "channels": "not a field of a policy",
    "approvals": "not a setting of approvals",
    "follow_ups": "not a setting of follow-ups",
    "agent_surface": "not a setting of the agent surface",
}
"""What a misspelt field inside an entry is called, by the entry's table; at the top level,
a misspelt setting."""


V = TypeVar("V")


def _by_channel_id(channels: dict[str, V]) -> dict[str, V]:
    """``channels`` itself, once each of its keys is known to be a channel id."""
    for channel in channels:
        if not CHANNEL_ID.fullmatch(channel):
            raise ValueError(f"{channel!r} is not a channel id (C0123456789)")
    return channels


class Approvals(BaseModel):
    """How long an approval waits for its answer before it expires, by channel."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hours: float = Field(default=DEFAULT_APPROVAL_HOURS, gt=0)
    channels: dict[str, float] = {}
    """Hours, by the id of the channel where the approval is asked."""

    @field_validator("channels")
    @classmethod
    def _hours_by_channel(cls, channels: dict[str, float]) -> dict[str, float]:
        for channel, hours in _by_channel_id(channels).items():
            if not hours > 0:
                raise ValueError(f"{channel}: {hours} hours: an approval must wait some time")
        return channels

    def ttl(self, channel: str | None) -> float:
        """Seconds an approval asked in ``channel`` waits (the default outside a channel)."""
        return 3600.0 * self.channels.get(channel or "", self.hours)


FollowUpMode = Literal["replace", "steer", "queue"]
"""How a message in a thread whose reply is still being written is taken: it supersedes
that reply (``replace``), is added to the turn at work (``steer``), or waits its turn."""


class FollowUps(BaseModel):
    """How a follow-up in a thread with a turn at work is taken, by channel."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: FollowUpMode | None = None
    """Everywhere but the channels named; unset, ``REPLACE_IN_FLIGHT`` decides."""
    channels: dict[str, FollowUpMode] = {}

    @field_validator("channels")
    @classmethod
    def _channel_ids(cls, channels: dict[str, FollowUpMode]) -> dict[str, FollowUpMode]:
        return _by_channel_id(channels)

    def mode_in(self, channel: str, *, replace_in_flight: bool = True) -> FollowUpMode:
        """The mode of follow-ups in ``channel``."""
        default: FollowUpMode = "replace" if replace_in_flight else "queue"
        return self.channels.get(channel, self.mode or default)


class BotConfig(BaseModel):
    """The ``BOT_CONFIG`` file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schedules: tuple[Schedule, ...] = ()
    surfaces: dict[str, SurfacePolicy] = {}
    """The policy of each source's turns (``slack``)."""
    channels: dict[str, SurfacePolicy] = {}
    """The policy of one channel's turns, by channel id; it refines its source's."""
    admins: tuple[str, ...] = ()
    """Slack user ids who may change channel policies, besides the workspace's admins."""
    approvals: Approvals = Approvals()
    """How long approvals wait for an answer."""
    follow_ups: FollowUps = FollowUps()
    """How a follow-up in a thread with a turn at work is taken."""
    agent_surface: AgentSurface = AgentSurface()
    """The greeting, suggested prompts and loading lines of the app's agent surface."""

    @field_validator("channels")
    @classmethod
    def _channel_ids(cls, channels: dict[str, SurfacePolicy]) -> dict[str, SurfacePolicy]:
        return _by_channel_id(channels)

    @field_validator("admins")
    @classmethod
    def _user_ids(cls, admins: tuple[str, ...]) -> tuple[str, ...]:
        for user in admins:
            if not _USER_ID.fullmatch(user):
                raise ValueError(f"{user!r} is not a user id (U0123456789)")
        return admins

    @model_validator(mode="after")
    def _unique_names(self) -> BotConfig:
        seen: set[str] = set()
        for schedule in self.schedules:
            if schedule.name in seen:
                raise ValueError(f"schedule {schedule.name!r}: name: used twice")
            seen.add(schedule.name)
        return self

    def schedule(self, name: str) -> Schedule:
        """The schedule called ``name``.

        Raises:
            ConfigError: There is none.
        """
        for schedule in self.schedules:
            if schedule.name == name:
                return schedule
        known = ", ".join(s.name for s in self.schedules) or "none"
        raise ConfigError(f"no schedule is named {name!r} (BOT_CONFIG has: {known})")


def load_bot_config(path: Path | None) -> BotConfig:
    """Read and check the ``BOT_CONFIG`` file (an empty config when there is none).

    Raises:
        ConfigError: One line per problem, naming where it is and the field.
    """
    if path is None:
        return BotConfig()
    try:
        with path.open("rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"BOT_CONFIG names {path}, which does not exist") from None
    except OSError as exc:
        raise ConfigError(f"BOT_CONFIG: cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"BOT_CONFIG: {path} is not valid TOML: {exc}") from None
    try:
        config = BotConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [f"BOT_CONFIG: {_where(raw, e['loc'])}{_said(e)}" for e in exc.errors()]
        raise ConfigError("\n".join(lines)) from None
    return config


def _where(raw: Any, location: tuple[int | str, ...]) -> str:
    """``schedule 'daily': cron`` for pydantic's ``('schedules', 0, 'cron')``."""
    if len(location) >= 2 and location[0] == "schedules" and isinstance(location[1], int):
        entries = raw.get("schedules") if isinstance(raw, dict) else None
        entry = entries[location[1]] if isinstance(entries, list) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        who = f"schedule {name!r}" if isinstance(name, str) else f"schedule #{location[1] + 1}"
        rest = ".".join(str(p) for p in location[2:])
        return f"{who}: {rest}: " if rest else f"{who}: "
    return f"{'.'.join(str(p) for p in location)}: " if location else ""


def _said(error: Any) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "missing":
        return "missing"
    if error["type"] == "extra_forbidden":
        return _NOT_A_FIELD.get(str(error["loc"][0]), "not a setting of BOT_CONFIG")
    return message
