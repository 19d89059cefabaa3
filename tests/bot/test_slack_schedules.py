"""Schedules end to end: the commands as real processes, firings on a test clock.

``python -m bot run-schedule`` and ``python -m bot schedules`` run as child
processes against the fake Slack and the fake Messages API; the scheduler runs
in process, APScheduler keeping the time while a test clock says which firing
is due.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.schedules import Firing, Schedule, ScheduleRunner
from bot.slack.firing import fire, has_fired
from tests.bot.slack_harness import WAIT, Bot
from tests.bot.test_schedules import DAILY as CONFIG
from tests.bot.test_slack_process import bot_process, free_port
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply
from tests.fakes.slack_api import FakeSlack


async def command(
    slack: FakeSlack,
    folder: Path,
    *args: str,
    config: str = CONFIG,
    env: dict[str, str | None] | None = None,
) -> tuple[int, str]:
    """``python -m bot ARGS`` to its end: its exit code and everything it printed."""
    path = folder / "bot.toml"
    path.write_text(config)
    proc = await bot_process(
        slack,
        folder,
        free_port(),
        *args,
        stderr=asyncio.subprocess.STDOUT,
        **({"BOT_CONFIG": str(path)} | (env or {})),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), WAIT * 3)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def top_level(slack: FakeSlack) -> list[str]:
    return [m.text for m in slack.messages(slack.channel_id) if m.thread_ts is None]


async def clear_of_a_minute_boundary() -> None:
    """Wait, if need be, so that runs a few seconds apart start in one wall-clock minute."""
    second = datetime.now(UTC).second
    if second > 40:
        await asyncio.sleep(61 - second)


async def test_run_schedule_posts_the_reply_once_even_when_run_twice_in_a_minute(
    slack: FakeSlack, tmp_path: Path
):
    async with FakeAnthropic() as api:
        api.queue(Reply.text("Today: the deploy moved to Friday."))
        claude: dict[str, str | None] = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
        }

        await clear_of_a_minute_boundary()  # both runs must fire the same minute's firing
        code, said = await command(slack, tmp_path, "run-schedule", "daily", env=claude)
        again, said_again = await command(slack, tmp_path, "run-schedule", "daily", env=claude)

    assert (code, again) == (0, 0), said + said_again
    assert "Schedule daily: its reply is in C0GENERAL" in said
    assert top_level(slack) == ["Today: the deploy moved to Friday."]
    [request] = api.requests  # the second run replayed the same firing
    [opening] = request["messages"]
    assert opening["role"] == "user"  # the seed reads as a user message
    assert "Summarize today's activity in this channel." in str(opening["content"])
    assert "daily schedule's firing of" in str(opening["content"])


async def test_two_processes_firing_the_same_schedule_at_once_run_and_post_it_once(
    slack: FakeSlack, tmp_path: Path
):
    (tmp_path / "bot.toml").write_text(CONFIG)
    release = asyncio.Event()
    async with FakeAnthropic() as api:
        answer = Reply.text("Today: the deploy moved to Friday.")
        api.queue(Hang(answer, after_events=3, release=release))
        claude: dict[str, str | None] = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "BOT_CONFIG": str(tmp_path / "bot.toml"),
        }
        firing = ("run-schedule", "daily")
        await clear_of_a_minute_boundary()
        first = await bot_process(
            slack, tmp_path, free_port(), *firing, stderr=asyncio.subprocess.STDOUT, **claude
        )
        await asyncio.wait_for(api.hung.wait(), WAIT)  # the first is answering
        second = await bot_process(
            slack, tmp_path, free_port(), *firing, stderr=asyncio.subprocess.STDOUT, **claude
        )
        assert second.stdout is not None
        waited = b""
        while b"is busy in another process" not in waited:  # it says what it waits for
            line = await asyncio.wait_for(second.stdout.readline(), WAIT * 3)
            assert line, waited
            waited += line
        release.set()
        outputs = await asyncio.gather(first.communicate(), second.communicate())

    first_said = outputs[0][0].decode()
    second_said = waited.decode() + outputs[1][0].decode()
    assert (first.returncode, second.returncode) == (0, 0), first_said + second_said
    for said in (first_said, second_said):
        assert "Schedule daily: its reply is in C0GENERAL" in said
        assert "Traceback" not in said
    assert top_level(slack) == ["Today: the deploy moved to Friday."]
    assert len(api.requests) == 1  # the second waited for the first, then found it done


async def test_run_schedule_fails_clearly_for_an_unknown_name_and_a_refused_post(
    slack: FakeSlack, tmp_path: Path
):
    code, said = await command(slack, tmp_path, "run-schedule", "weekly")

    assert code == 2
    assert "Cannot run weekly: no schedule is named 'weekly' (BOT_CONFIG has: daily)" in said

    elsewhere = CONFIG.replace('channel = "C0GENERAL"', 'channel = "C0GONE"')
    code, said = await command(slack, tmp_path, "run-schedule", "daily", config=elsewhere)

    assert code == 1
    assert "Schedule daily failed: Slack refused the reply: channel_not_found" in said
    assert "Traceback" not in said


async def test_schedules_lists_each_schedule_with_its_next_firing(slack: FakeSlack, tmp_path: Path):
    no_slack: dict[str, str | None] = {"SLACK_BOT_TOKEN": None, "SLACK_SIGNING_SECRET": None}
    code, said = await command(slack, tmp_path, "schedules", env=no_slack)

    assert code == 0
    line = next(row for row in said.splitlines() if row.startswith("daily:"))
    assert "'0 9 * * 1-5' (Europe/Paris) into C0GENERAL; next 20" in line


async def test_an_invalid_schedule_stops_the_bot_naming_the_schedule_and_the_field(
    slack: FakeSlack, tmp_path: Path
):
    broken = CONFIG.replace('timezone = "Europe/Paris"', 'timezone = "Europe/Atlantis"')

    code, said = await command(slack, tmp_path, config=broken)

    assert code == 2
    assert "BOT_CONFIG: schedule 'daily': timezone: unknown time zone 'Europe/Atlantis'" in said


# -- the scheduler, on a test clock ---------------------------------------------------------

DUE = datetime(2026, 12, 1, 8, 0, 20, tzinfo=UTC)  # 09:00:20 in Paris, a Tuesday


def daily(channel: str) -> Schedule:
    return Schedule(
        name="daily", cron="0 9 * * 1-5", timezone="Europe/Paris", channel=channel, prompt="p"
    )


async def never_ran(firing: Firing) -> bool:
    return False


def runner_for(bot: Bot, now: datetime) -> ScheduleRunner:
    async def fire_firing(firing: Firing) -> None:
        await fire(bot.channel, bot.runtime, bot.slack.team_id, firing)

    async def has_run(firing: Firing) -> bool:
        return await has_fired(bot.channel, bot.runtime, bot.slack.team_id, firing)

    schedules = [daily(bot.slack.channel_id)]
    return ScheduleRunner(schedules, fire_firing, has_run=has_run, clock=lambda: now)


async def test_a_schedule_fires_on_time_and_two_schedulers_post_once(bot: Bot):
    first, second = runner_for(bot, DUE), runner_for(bot, DUE)  # a second replica too
    first.start()
    second.start()
    try:
        soon = datetime.now(UTC) + timedelta(seconds=0.2)
        first.fire_soon("daily", soon)  # APScheduler keeps the time; the clock says 09:00
        second.fire_soon("daily", soon)

        deadline = asyncio.get_running_loop().time() + WAIT
        while asyncio.get_running_loop().time() < deadline:
            if top_level(bot.slack):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # time for a second post, were there one
    finally:
        first.stop()
        second.stop()

    [posted] = top_level(bot.slack)
    assert posted.startswith("done: {'channel': '#general'")  # it read the period
    shared = daily(bot.slack.channel_id).session(bot.slack.team_id)
    session = bot.runtime.session("bot", f"{shared}@20261201T0800Z")  # the firing's own
    assert [t.turn_id for t in await session.turns()] == ["schedule:daily:2026-12-01T08:00Z"]


async def test_a_missed_firing_runs_once_within_the_grace_and_is_skipped_after_it(
    bot: Bot, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.WARNING, logger="bot.schedules"):
        assert await runner_for(bot, DUE + timedelta(hours=2)).catch_up() == 0  # two hours late
    assert (
        "schedule daily: the firing of 2026-12-01 09:00 CET was missed by more than 0:05:00;"
        " skipped" in caplog.text
    )
    assert top_level(bot.slack) == []
    caplog.clear()

    assert await runner_for(bot, DUE + timedelta(minutes=4)).catch_up() == 1  # four minutes late
    assert len(top_level(bot.slack)) == 1
    with caplog.at_level(logging.WARNING, logger="bot.schedules"):
        # restarts soon after and hours later: it ran, so there is nothing to run or to report
        assert await runner_for(bot, DUE + timedelta(minutes=4, seconds=30)).catch_up() == 0
        assert await runner_for(bot, DUE + timedelta(hours=2)).catch_up() == 0
    assert "missed" not in caplog.text
    assert len(top_level(bot.slack)) == 1


async def test_a_summary_reads_the_channel_since_the_last_firing_with_links(bot: Bot):
    slack = bot.slack
    before = slack.post_user_message(slack.channel_id, "yesterday's news")
    after = slack.post_user_message(slack.channel_id, "the deploy moved to Friday")
    slack.post_user_message(slack.channel_id, "why?", thread_ts=after)
    later = slack.post_user_message(slack.channel_id, "lunch at noon")
    boundary = (float(before) + float(after)) / 2  # the previous firing came between
    firing = Firing(
        daily(slack.channel_id),
        datetime(2026, 12, 1, 8, tzinfo=UTC),
        datetime.fromtimestamp(boundary, UTC),
    )

    await fire(bot.channel, bot.runtime, slack.team_id, firing)

    [summary] = [m for m in slack.messages(slack.channel_id) if m.user == slack.bot_user_id]
    read = summary.text
    assert "yesterday's news" not in read  # only the period since the last firing
    assert read.index("the deploy moved to Friday") < read.index("lunch at noon")  # in order
    thread_link = (
        f"https://fake-team.slack.com/archives/{slack.channel_id}/p{after.replace('.', '')}"
    )
    assert f"'link': '{thread_link}', 'replies': 1" in read
    assert later.replace(".", "") in read


async def test_a_summary_slack_stops_reading_midway_keeps_what_it_read(bot: Bot):
    slack = bot.slack
    start = slack.post_user_message(slack.channel_id, "the day starts")
    for n in range(60):
        slack.post_user_message(slack.channel_id, f"note {n:02}")
    # a page read, then the limit of an app Slack allows one read a minute, retries and all
    slack.fail_next(
        "conversations.history", "ratelimited", status=429, retry_after=0, times=4, after=1
    )
    firing = Firing(
        daily(slack.channel_id),
        datetime(2026, 12, 1, 8, tzinfo=UTC),
        datetime.fromtimestamp(float(start), UTC),
    )

    await fire(bot.channel, bot.runtime, slack.team_id, firing)

    said = "".join(m.words for m in slack.messages(slack.channel_id) if m.user == slack.bot_user_id)
    assert "Slack's rate limit stopped the read after the newest 50 messages" in said
    assert "'note 59'" in said  # the newest page, kept
    assert "'note 10'" in said
    assert "'note 09'" not in said  # the older page, which Slack refused
    assert "next_cursor': None" not in said


async def test_a_firing_still_running_holds_the_next_one_back(
    bot: Bot, caplog: pytest.LogCaptureFixture
):
    running, release, fired = asyncio.Event(), asyncio.Event(), []

    async def slow(firing: Firing) -> None:
        fired.append(firing.turn_id)
        running.set()
        await release.wait()

    runner = ScheduleRunner(
        [daily(bot.slack.channel_id)], slow, has_run=never_ran, clock=lambda: DUE
    )
    runner.start()
    try:
        runner.fire_soon("daily", datetime.now(UTC) + timedelta(seconds=0.1))
        await asyncio.wait_for(running.wait(), WAIT)
        with caplog.at_level(logging.WARNING, logger="apscheduler"):
            runner.fire_soon("daily", datetime.now(UTC) + timedelta(seconds=0.1))
            await asyncio.sleep(0.5)
    finally:
        release.set()
        runner.stop()

    assert fired == ["schedule:daily:2026-12-01T08:00Z"]
    assert "maximum number of running instances reached" in caplog.text
