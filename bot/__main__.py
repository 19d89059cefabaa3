"""``python -m bot``: run the bot; with no Slack credentials, the web console and the API."""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import UTC, datetime

from agent import ConfigError
from bot import texts
from bot.config_file import load_bot_config
from bot.schedules import next_firing
from bot.settings import Settings, load_settings


def list_schedules(settings: Settings) -> int:
    """``python -m bot schedules``: each schedule, and when it fires next."""
    config = load_bot_config(settings.bot_config)
    if not config.schedules:
        print("No schedules: BOT_CONFIG names none." if settings.bot_config else texts.NO_CONFIG)
        return 0
    now = datetime.now(UTC)
    for schedule in config.schedules:
        due = next_firing(schedule, now)
        when = f"{due:%Y-%m-%d %H:%M %Z}" if due else "never"
        print(
            f"{schedule.name}: {schedule.cron!r} ({schedule.timezone}) into {schedule.channel}; "
            f"next {when}"
        )
    return 0


def list_policies(settings: Settings) -> int:
    """``python -m bot policies``: what turns in each configured channel run under."""
    from bot.serve import describe_policies

    try:
        print("\n".join(asyncio.run(describe_policies(settings))))
    except ConfigError as exc:
        print(f"Cannot list the policies: {exc}", file=sys.stderr)
        return 2
    return 0


def fire_schedule(settings: Settings, name: str) -> int:
    """``python -m bot run-schedule NAME``: fire it now, post its reply, say how it went."""
    if not settings.has_slack:
        print(f"Cannot run {name}: {texts.SCHEDULES_NEED_SLACK}", file=sys.stderr)
        return 2
    from bot.serve import run_schedule
    from bot.slack.firing import ScheduleFailed

    # the engine's notes show (what it waits for: another process in the schedule's session)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("agent").setLevel(logging.INFO)
    try:
        print(asyncio.run(run_schedule(settings, name)))
    except ConfigError as exc:
        print(f"Cannot run {name}: {exc}", file=sys.stderr)
        return 2
    except ScheduleFailed as exc:
        print(f"Schedule {name} failed: {exc}", file=sys.stderr)
        return 1
    return 0


def held_turns(settings: Settings, args: list[str]) -> int:
    """``python -m bot turns --held [--retry TURN | --drop TURN]``."""
    from agent import ConflictError, UnknownTurnError
    from bot.serve import held_turns_command

    options = dict(zip(args[1::2], args[2::2], strict=False))
    if args[:1] != ["--held"] or len(args) not in (1, 3) or set(options) - {"--retry", "--drop"}:
        print(TURNS_USAGE, file=sys.stderr)
        return 2
    try:
        lines = asyncio.run(
            held_turns_command(settings, retry=options.get("--retry"), drop=options.get("--drop"))
        )
    except (UnknownTurnError, ConflictError) as exc:
        print(f"Cannot do that: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


TURNS_USAGE = "Usage: python -m bot turns --held [--retry TURN | --drop TURN]"


def list_feedback(settings: Settings, args: list[str]) -> int:
    """``python -m bot feedback [--since DAYS]``: what people said of the replies."""
    import time

    from bot.feedback_report import report_feedback

    since: float | None = None
    if args:
        try:
            [flag, days] = args
            since = float(days)
        except ValueError:
            flag = ""
        if flag != "--since" or since is None or not 0 < since < 100_000:
            print(FEEDBACK_USAGE, file=sys.stderr)
            return 2
    try:
        lines = asyncio.run(report_feedback(settings, since_days=since, now=time.time()))
    except ConfigError as exc:
        print(f"Cannot list the feedback: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


FEEDBACK_USAGE = "Usage: python -m bot feedback [--since DAYS]"

USAGE = """\
Usage: python -m bot                    serve Slack, or (with no Slack credentials) the web console
       python -m bot chat [LINE...]     chat in this terminal
       python -m bot schedules          each schedule and its next firing
       python -m bot run-schedule NAME  fire a schedule now
       python -m bot policies           what turns in each channel run under
       python -m bot turns --held       turns held after killing the process; --retry/--drop TURN
       python -m bot feedback           what people said of the replies; --since DAYS"""


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    try:
        settings = load_settings()
    except ConfigError as exc:
        problems = "\n".join(f"  - {line}" for line in str(exc).splitlines())
        print(f"Cannot start; fix these settings first:\n{problems}", file=sys.stderr)
        return 2
    if args[:1] == ["schedules"]:
        return list_schedules(settings)
    if args[:1] == ["policies"]:
        return list_policies(settings)
    if args[:1] == ["turns"]:
        return held_turns(settings, args[1:])
    if args[:1] == ["feedback"]:
        return list_feedback(settings, args[1:])
    if args[:1] == ["run-schedule"]:
        if len(args) != 2:
            print("Usage: python -m bot run-schedule NAME", file=sys.stderr)
            return 2
        return fire_schedule(settings, args[1])
    if args[:1] == ["chat"]:
        from bot.serve import run_terminal

        try:
            asyncio.run(run_terminal(settings, args[1:] or None))
        except ConfigError as exc:
            print(f"Cannot start: {exc}", file=sys.stderr)
            return 2
        return 0
    if args:
        print(USAGE, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        from bot.serve import serve_local, serve_slack

        asyncio.run(serve_slack(settings) if settings.has_slack else serve_local(settings))
    except ConfigError as exc:
        print(f"Cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
