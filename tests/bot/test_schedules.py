"""Schedules in BOT_CONFIG: what a valid one is, and what a firing is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agent import ConfigError
from bot.config_file import load_bot_config
from bot.schedules import Schedule, due_firing, firing_now, next_firing

DAILY = """
[[schedules]]
name = "daily"
cron = "0 9 * * 1-5"
timezone = "Europe/Paris"
channel = "C0GENERAL"
prompt = "Summarize today's activity in this channel."
"""


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bot.toml"
    path.write_text(text)
    return path


def test_a_schedule_is_read_from_the_config_file(tmp_path):
    config = load_bot_config(config_file(tmp_path, DAILY))

    [daily] = config.schedules
    assert (daily.name, daily.channel, daily.timezone) == ("daily", "C0GENERAL", "Europe/Paris")
    assert daily.session("T0TEAM") == "slack:T0TEAM:C0GENERAL:schedule:daily"
    assert load_bot_config(None).schedules == ()


def test_weekdays_are_read_as_crontab_reads_them_sunday_being_zero():
    # APScheduler 3 alone would read 1-5 as Tuesday to Saturday
    weekdays = Schedule(name="w", cron="0 9 * * 1-5", channel="C0GENERAL", prompt="p")
    sundays = Schedule(name="s", cron="0 9 * * 0", channel="C0GENERAL", prompt="p")
    sunday_too = Schedule(name="t", cron="0 9 * * 7", channel="C0GENERAL", prompt="p")
    saturday = datetime(2026, 12, 5, 12, tzinfo=UTC)  # a Saturday

    assert next_firing(weekdays, saturday) == datetime(2026, 12, 7, 9, tzinfo=UTC)  # Monday
    assert next_firing(sundays, saturday) == datetime(2026, 12, 6, 9, tzinfo=UTC)
    assert next_firing(sunday_too, saturday) == datetime(2026, 12, 6, 9, tzinfo=UTC)


BAD = {
    "bad cron": ('cron = "0 9 * *"', "schedule 'daily': cron: five fields"),
    "bad weekday": ('cron = "0 9 * * 9"', "schedule 'daily': cron: weekday '9'"),
    "zero step": ('cron = "0 9 * * */0"', "schedule 'daily': cron: weekday '*/0'"),
    "bad day name": ('cron = "0 9 * * mon-fry"', "schedule 'daily': cron: weekday 'mon-fry'"),
    "unknown zone": ('timezone = "Mars/Olympus"', "schedule 'daily': timezone: unknown time"),
    "bad channel": ('channel = "#general"', "schedule 'daily': channel: a channel id"),
    "empty prompt": ('prompt = ""', "schedule 'daily': prompt:"),
    "unknown field": ('colour = "blue"', "schedule 'daily': colour: not a field of a schedule"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_schedule_is_refused_naming_the_schedule_and_the_field(tmp_path, case):
    line, said = BAD[case]
    key = line.split(" = ")[0]
    kept = [row for row in DAILY.strip().splitlines() if not row.startswith(f"{key} ")]
    text = "\n".join([*kept, line])

    with pytest.raises(ConfigError) as refused:
        load_bot_config(config_file(tmp_path, text))

    assert said in str(refused.value)
    assert str(refused.value).startswith("BOT_CONFIG: ")


def test_a_missing_channel_and_a_duplicate_name_are_named(tmp_path):
    no_channel = DAILY.replace('channel = "C0GENERAL"\n', "")
    twice = DAILY + DAILY.replace('cron = "0 9 * * 1-5"', 'cron = "0 17 * * *"')

    with pytest.raises(ConfigError, match="schedule 'daily': channel: missing"):
        load_bot_config(config_file(tmp_path, no_channel))
    with pytest.raises(ConfigError, match="schedule 'daily': name: used twice"):
        load_bot_config(config_file(tmp_path, twice))


def test_a_firing_is_named_by_its_schedule_and_due_minute_wherever_it_runs():
    daily = Schedule(
        name="daily", cron="0 9 * * *", timezone="Europe/Paris", channel="C0GENERAL", prompt="p"
    )
    due = datetime(2026, 12, 1, 9, tzinfo=ZoneInfo("Europe/Paris"))

    # on time, 40 s late, and 4 minutes late (a slow restart): one and the same firing
    seen = [
        due_firing(daily, due + late, timedelta(minutes=5))
        for late in (timedelta(0), timedelta(seconds=40), timedelta(minutes=4))
    ]

    assert {f.turn_id for f in seen if f} == {"schedule:daily:2026-12-01T08:00Z"}
    first = seen[0]
    assert first is not None
    assert first.previous == due - timedelta(days=1)
    assert "since=" in first.seed()
    assert due_firing(daily, due + timedelta(minutes=6), timedelta(minutes=5)) is None
    assert due_firing(daily, due - timedelta(seconds=1), timedelta(minutes=5)) is None


def test_a_frequent_schedule_finds_its_last_firing_without_walking_a_year():
    every_minute = Schedule(name="m", cron="* * * * *", channel="C0GENERAL", prompt="p")
    yearly = Schedule(name="y", cron="0 0 1 1 *", channel="C0GENERAL", prompt="p")
    now = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)

    minute = due_firing(every_minute, now, timedelta(minutes=5))
    new_year = firing_now(yearly, now)

    assert minute is not None
    assert (minute.at, minute.previous) == (
        now.replace(second=0),
        datetime(2026, 12, 1, 7, 59, tzinfo=UTC),
    )
    assert new_year.previous == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "now", "due"),
    [
        ("30 2 * * *", "2024-10-27T01:31", "2024-10-27T01:30Z"),  # 02:30, the second time
        ("30 2 * * *", "2024-10-28T01:31", "2024-10-28T01:30Z"),  # the day after the fold
        ("0 * * * *", "2024-10-27T01:01", "2024-10-27T01:00Z"),
        ("0 * * * *", "2024-10-27T03:01", "2024-10-27T03:00Z"),
    ],
)
def test_the_night_clocks_go_back_names_each_firing_and_never_hangs(cron, now, due):
    # APScheduler 3 answers the same time forever when asked from inside the repeated hour
    paris = Schedule(name="t", cron=cron, timezone="Europe/Paris", channel="C0GENERAL", prompt="p")
    at = datetime.fromisoformat(now).replace(tzinfo=UTC)

    firing = due_firing(paris, at, timedelta(minutes=5))

    assert firing is not None
    assert firing.turn_id == f"schedule:t:{due}"
    assert firing.previous is not None
    assert firing.previous < firing.at


@pytest.mark.parametrize(
    ("weekdays", "monday_to_sunday"),
    [
        ("1-5", [True] * 5 + [False] * 2),
        ("0,6", [False] * 5 + [True] * 2),
        ("sun-sat", [True] * 7),
        ("mon,3", [True, False, True, False, False, False, False]),
        ("*/2", [False, True, False, True, False, True, True]),  # sun, tue, thu, sat
        ("5-7", [False] * 4 + [True] * 3),
    ],
)
def test_weekday_fields_read_as_crontab_reads_them(weekdays, monday_to_sunday):
    schedule = Schedule(name="w", cron=f"0 9 * * {weekdays}", channel="C0GENERAL", prompt="p")
    monday = datetime(2026, 11, 30, tzinfo=UTC)

    fires = [
        next_firing(schedule, monday + timedelta(days=n)) == monday + timedelta(days=n, hours=9)
        for n in range(7)
    ]

    assert fires == monday_to_sunday


def test_a_day_of_the_month_with_a_weekday_is_refused_rather_than_read_otherwise(tmp_path):
    both = DAILY.replace('cron = "0 9 * * 1-5"', 'cron = "0 9 1 * 1"')

    with pytest.raises(ConfigError, match="a day of the month or a weekday, not both"):
        load_bot_config(config_file(tmp_path, both))
