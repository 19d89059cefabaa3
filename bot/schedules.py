"""Schedules: cron firings that start turns nobody typed (a daily summary, say).

Declared in the ``BOT_CONFIG`` TOML file::

    [[schedules]]
    name = "daily"                 # unique
    cron = "0 9 * * 1-5"           # five-field cron, as crontab reads it
    timezone = "Europe/Paris"      # optional, default UTC
    channel = "C0123456789"        # where the reply is posted
    prompt = "Summarize today's activity in this channel."

A firing is named by its schedule and its scheduled minute, and that name is
its turn id: a restart in the same minute, a catch-up after a misfire, or a
second process firing too all replay one turn, which the channel delivers once.
APScheduler keeps the time; this module decides what a firing is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "CHANNEL_ID",
    "Firing",
    "Schedule",
    "ScheduleRunner",
    "due_firing",
    "firing_now",
    "next_firing",
]

logger = logging.getLogger("bot.schedules")

MISFIRE_GRACE = timedelta(minutes=5)
"""A firing this late still runs (once); a later one is skipped, and logged."""
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{2,}")
"""A channel's id as Slack shows it under About (public C…, private G…)."""


class Schedule(BaseModel):
    """One ``[[schedules]]`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    cron: str
    timezone: str = "UTC"
    channel: str
    prompt: str = Field(min_length=1)
    team: str | None = None
    """The workspace of ``channel``: needed where the app is installed in many (OAuth)."""

    @field_validator("name")
    @classmethod
    def _named(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError("lower-case letters, digits, - and _ (it names turns and sessions)")
        return name

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, zone: str) -> str:
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {zone!r} (an IANA name: Europe/Paris)") from None
        return zone

    @field_validator("channel")
    @classmethod
    def _channel_id(cls, channel: str) -> str:
        if not CHANNEL_ID.fullmatch(channel):
            raise ValueError("a channel id (C0123456789), as Slack shows it under About")
        return channel

    @model_validator(mode="after")
    def _valid_cron(self) -> Schedule:
        try:
            self.trigger()
        except ValueError as exc:
            raise ValueError(f"cron: {exc}") from None
        return self

    def trigger(self) -> CronTrigger:
        """The schedule as APScheduler's trigger, with crontab's weekdays (0 is Sunday)."""
        fields = self.cron.split()
        if len(fields) != 5:
            raise ValueError(f"five fields (minute hour day month weekday), not {len(fields)}")
        minute, hour, day, month, weekday = fields
        if day != "*" and weekday != "*":
            # crontab fires on either; APScheduler only on both: refuse rather than surprise
            raise ValueError("a day of the month or a weekday, not both (crontab reads either)")
        return CronTrigger(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=_crontab_weekdays(weekday),
            timezone=ZoneInfo(self.timezone),
        )

    def session(self, team: str) -> str:
        """The session every firing of this schedule belonged to before firings had their own.

        Kept so that a firing made by an older bot is still found (see `Firing.session`).
        """
        return f"slack:{team}:{self.channel}:schedule:{self.name}"


@dataclass(frozen=True, slots=True)
class Firing:
    """One firing of a schedule, at its scheduled time."""

    schedule: Schedule
    at: datetime
    """When it was due (in UTC), not when it ran."""
    previous: datetime | None
    """The schedule's firing before it, if the cron has one within a year."""

    @property
    def turn_id(self) -> str:
        """``schedule:<name>:<due minute, UTC>``: the same firing is the same turn anywhere."""
        return f"schedule:{self.schedule.name}:{self.at.astimezone(UTC):%Y-%m-%dT%H:%MZ}"

    def session(self, team: str) -> str:
        """The firing's own session: ``<the schedule's>@<due minute, UTC>``.

        Each firing has its own, so that a request one firing waits on (an approval
        nobody gave) never holds a later firing: firings sharing a session queued
        behind it and failed. A firing needs nothing of the one before: its seed
        names the period to cover, and the channel's notes are the channel's.
        """
        return f"{self.schedule.session(team)}@{self.at.astimezone(UTC):%Y%m%dT%H%MZ}"

    @property
    def by(self) -> str:
        """What the transcript says started the turn."""
        return f"schedule:{self.schedule.name}"

    def seed(self) -> str:
        """The prompt, with when this firing is and the period since the last one."""
        zone = ZoneInfo(self.schedule.timezone)
        when = f"This is the {self.schedule.name} schedule's firing of {_shown(self.at, zone)}."
        if self.previous is None:
            return f"{self.schedule.prompt}\n\n({when})"
        since = f"{self.previous.timestamp():.6f}"
        return (
            f"{self.schedule.prompt}\n\n({when} The previous firing was at "
            f"{_shown(self.previous, zone)}: the period to cover is since then; read_channel "
            f"takes since={since} for it.)"
        )


def due_firing(schedule: Schedule, now: datetime, within: timedelta) -> Firing | None:
    """The schedule's latest firing at or before ``now``, if it is no older than ``within``."""
    trigger = schedule.trigger()
    latest = _latest_before(trigger, now, now - within)
    if latest is None:
        return None
    before = latest.astimezone(UTC) - timedelta(seconds=1)
    return Firing(schedule, latest, _latest_before(trigger, before))


def firing_now(schedule: Schedule, now: datetime) -> Firing:
    """A firing asked for by hand, due this minute; it covers the time since the last one."""
    at = now.astimezone(UTC).replace(second=0, microsecond=0)
    return Firing(schedule, at, _latest_before(schedule.trigger(), at - timedelta(seconds=1)))


def next_firing(schedule: Schedule, now: datetime) -> datetime | None:
    """When the schedule fires next."""
    found: datetime | None = schedule.trigger().get_next_fire_time(None, now)
    return found


Fire = Callable[[Firing], Awaitable[None]]
HasRun = Callable[[Firing], Awaitable[bool]]


class ScheduleRunner:
    """Fires the schedules on the bot's event loop (APScheduler's asyncio scheduler).

    Args:
        schedules: What to fire.
        fire: Starts and delivers one firing; it must be idempotent by turn id.
        has_run: Whether a firing's turn exists already, so a start-up neither runs
            it again nor calls it missed.
        grace: How late a firing may still run.
        clock: The current time (aware); tests set it.
    """

    def __init__(
        self,
        schedules: Sequence[Schedule],
        fire: Fire,
        *,
        has_run: HasRun,
        grace: timedelta = MISFIRE_GRACE,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._schedules = tuple(schedules)
        self._fire = fire
        self._has_run = has_run
        self._grace = grace
        self._clock = clock
        self._scheduler = AsyncIOScheduler(timezone=UTC)

    def start(self) -> None:
        """Add a job per schedule and start keeping time (on the running loop)."""
        for schedule in self._schedules:
            self._scheduler.add_job(
                self.run,
                schedule.trigger(),
                args=[schedule],
                id=schedule.name,
                name=f"schedule {schedule.name}",
                misfire_grace_time=int(self._grace.total_seconds()),
                coalesce=True,  # firings missed together run once
                max_instances=1,  # a firing still running holds the next back
            )
        self._scheduler.start()

    def stop(self) -> None:
        """Stop keeping time (a firing already running goes on)."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def fire_soon(self, name: str, when: datetime) -> None:
        """Move a schedule's next run (tests, and operators in a debugger)."""
        self._scheduler.modify_job(name, next_run_time=when)

    async def catch_up(self) -> int:
        """Run each firing that fell due while the bot was down, if it is within the grace.

        A firing that ran already (before a restart, or in another process) is
        left alone; one that never ran and is older than the grace (looking a day
        back) is logged as skipped.

        Returns:
            How many firings it ran.
        """
        now, ran = self._clock(), 0
        for schedule in self._schedules:
            latest = due_firing(schedule, now, timedelta(days=1))
            if latest is None or await self._has_run(latest):
                continue
            if now - latest.at <= self._grace:
                await self._run_logged(latest)
                ran += 1
            else:
                logger.warning(
                    "schedule %s: the firing of %s was missed by more than %s; skipped",
                    schedule.name,
                    _shown(latest.at, ZoneInfo(schedule.timezone)),
                    self._grace,
                )
        return ran

    async def run(self, schedule: Schedule) -> None:
        """The job: fire the firing that is due now."""
        firing = due_firing(schedule, self._clock(), self._grace)
        if firing is None:
            logger.warning("schedule %s ran with no firing due; skipped", schedule.name)
            return
        await self._run_logged(firing)

    async def _run_logged(self, firing: Firing) -> None:
        try:
            await self._fire(firing)
        except Exception:
            logger.exception(
                "schedule %s: the firing %s failed", firing.schedule.name, firing.turn_id
            )


_LOOKBACKS = (
    timedelta(minutes=2),
    timedelta(hours=2),
    timedelta(days=2),
    timedelta(days=9),
    timedelta(days=32),
    timedelta(days=367),
)
"""Windows searched in turn for a cron's last firing: the first that holds one is walked,
so an every-minute cron walks a minute, not a year."""


def _latest_before(
    trigger: CronTrigger, now: datetime, earliest: datetime | None = None
) -> datetime | None:
    """The trigger's last fire time at or before ``now`` (and not before ``earliest``)."""
    for lookback in _LOOKBACKS:
        start = now - lookback
        if earliest is not None and start < earliest:
            start = earliest
        # all in UTC: in the hour clocks go back through, two local times compare by their
        # wall clock (fold aside), and APScheduler 3 asked from there answers the same
        # time forever
        found = _utc(trigger.get_next_fire_time(None, start))
        latest = None
        while found is not None and found <= now:
            latest = found
            found = _utc(trigger.get_next_fire_time(None, found + timedelta(seconds=1)))
            if found is not None and found <= latest:
                break  # a trigger that answers no later time would make this loop forever
        if latest is not None or (earliest is not None and start == earliest):
            return latest
    return None


def _utc(at: datetime | None) -> datetime | None:
    return at.astimezone(UTC) if at is not None else None


def _crontab_weekdays(field: str) -> str:
    """Crontab's weekday field for APScheduler 3, which counts 0 as Monday, not Sunday."""
    if field == "*":
        return field
    days: set[int] = set()
    for part in field.split(","):
        numbered = part.lower()
        for number, name in enumerate(_DAYS):
            numbered = numbered.replace(name, str(number))
        span, _, step = numbered.partition("/")
        try:
            every = int(step or 1)
            if span == "*":
                first, last = 0, 6
            elif "-" in span:
                a, _, b = span.partition("-")
                first, last = int(a), int(b)
            else:
                first = last = int(span)
                if step:
                    last = 7
        except ValueError:
            raise ValueError(f"weekday {part!r}: numbers 0-7 or names sun-sat") from None
        if not (0 <= first <= last <= 7) or every < 1:
            raise ValueError(f"weekday {part!r}: 0-7 (0 and 7 are Sunday), a step of 1 or more")
        days.update(day % 7 for day in range(first, last + 1, every))
    return ",".join(_DAYS[day] for day in sorted(days))


def _shown(at: datetime, zone: ZoneInfo | None = None) -> str:
    return f"{at.astimezone(zone) if zone else at:%Y-%m-%d %H:%M %Z}"
