"""The composition root: each way of running the bot is put together, and taken apart, here.

Each entry point builds what it needs on one `contextlib.AsyncExitStack`, in
order, and the stack takes it all down in the reverse order, however far the
start got: the listener stops first, then the scheduler, the Slack channel
(which gives replies in flight a few seconds), the runtime, the event log, the
store, the model's connections and the HTTP session last. `bot.slack` and
`bot.web` never import each other; what joins them (the console and the API
served beside Slack) is decided here.

The Slack side is imported only inside the functions that run it: Bolt and
slack_sdk take a noticeable share of a start, and the local console needs neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent import ConfigError, SessionStore, describe_database
from bot import texts
from bot.config_file import BotConfig, load_bot_config
from bot.engine import Engine, open_database, open_engine, pruning
from bot.offline import recall, remember
from bot.policies import SOURCE, PolicyBook, check_channel_policies
from bot.schedules import Firing, ScheduleRunner, firing_now
from bot.settings import Settings
from bot.terminal import chat
from bot.web.api.surface import SOURCE as API_SOURCE
from bot.web.api.surface import Api, api_for, is_api_session
from bot.web.app import listening, mount_web, web_application
from bot.web.health import add_health_check

if TYPE_CHECKING:
    from bot.slack.channel import SlackChannel
    from bot.slack.run import SlackConnection

__all__ = ["describe_policies", "run_schedule", "run_terminal", "serve_local", "serve_slack"]


async def serve_slack(settings: Settings) -> None:
    """Serve Slack (and the console and the API beside it) until SIGTERM or Ctrl+C.

    Raises:
        ConfigError: A token Slack refuses, a port that is taken, or a policy or
            model the bot cannot run with.
    """
    from bot.slack.firing import fire, has_fired
    from bot.slack.run import connected, schedule_team
    from bot.slack.tools import THREAD_TOOLS

    stop = _stop_on_signals()
    async with contextlib.AsyncExitStack() as stack:
        slack = await stack.enter_async_context(connected(settings))
        config = load_bot_config(settings.bot_config)
        serve_api = bool(settings.api_principals())
        if not serve_api:
            print(texts.API_NEEDS_TOKENS, flush=True)
        engine, channel = await _open_slack_bot(
            stack, settings, config, slack, serving_api=serve_api
        )
        api = None
        if engine.log is not None:
            api = api_for(
                settings, engine.runtime, engine.agent, engine.log, unavailable=THREAD_TOOLS
            )
        await stack.enter_async_context(_said_on_a_clean_stop(texts.STOPPING_SLACK))

        async def fire_firing(firing: Firing) -> None:
            await fire(channel, engine.runtime, schedule_team(slack, firing.schedule), firing)

        async def has_fired_firing(firing: Firing) -> bool:
            team = schedule_team(slack, firing.schedule)
            return await has_fired(channel, engine.runtime, team, firing)

        schedules = ScheduleRunner(config.schedules, fire_firing, has_run=has_fired_firing)
        stack.callback(schedules.stop)
        # Before the runtime starts: a resumed turn may end at once, and its reply must
        # still reach its thread.
        taken_up = await channel.resume_replies()
        if taken_up:
            print(f"Taking up {taken_up} reply(ies) a stopped process left unfinished.", flush=True)
        _say_resumed(await engine.runtime.start())
        await _take_slack_events(stack, settings, channel, slack, api, engine.store)
        await stack.enter_async_context(pruning(engine.log))
        schedules.start()
        if config.schedules:
            print(f"Keeping {len(config.schedules)} schedule(s).", flush=True)
        channel.spawn(_caught_up(schedules), name="schedules: catch up")
        await stop.wait()


async def serve_local(settings: Settings) -> None:
    """Serve the console and the API, with no Slack, until SIGTERM or Ctrl+C.

    With no ``API_TOKENS`` it listens on loopback only and the person at this
    machine is the attested speaker; with tokens it listens on every interface
    and each token speaks for its principal.

    Raises:
        ConfigError: The port is taken, or a policy or model the bot cannot run with.
    """
    stop = _stop_on_signals()
    config = load_bot_config(settings.bot_config)
    async with contextlib.AsyncExitStack() as stack:
        engine = await stack.enter_async_context(
            open_engine(settings, surfaces=config.surfaces, serving=[API_SOURCE], log=True)
        )
        assert engine.log is not None
        api = api_for(settings, engine.runtime, engine.agent, engine.log)
        _say_resumed(await engine.runtime.start())
        await stack.enter_async_context(_said_on_a_clean_stop(texts.STOPPING_LOCAL))
        # loopback only, unless tokens say who is asking
        host = "127.0.0.1" if api.auth.is_local else "0.0.0.0"
        app = web_application(api, engine.store)
        await stack.enter_async_context(listening(app, host, settings.port))
        await stack.enter_async_context(pruning(engine.log))
        address = f"http://{host}:{settings.port}/"
        where = describe_database(settings.database_url)
        print(texts.local_mode(address, api.model, api.offline, where), flush=True)
        await stop.wait()


async def run_schedule(settings: Settings, name: str) -> str:
    """Fire the schedule ``name`` now and post its reply, as its cron would; what happened.

    The runtime is not started: the server's resumes the other turns; this one
    runs only its own.

    Raises:
        ConfigError: No such schedule, or Slack refused the token.
        ScheduleFailed: The turn failed, or Slack refused its reply.
    """
    from bot.slack.firing import fire_by_hand
    from bot.slack.run import connected, schedule_team

    config = load_bot_config(settings.bot_config)
    schedule = config.schedule(name)
    async with contextlib.AsyncExitStack() as stack:
        slack = await stack.enter_async_context(connected(settings))
        engine, channel = await _open_slack_bot(stack, settings, config, slack)
        firing = firing_now(schedule, datetime.now(UTC))
        team = schedule_team(slack, schedule)
        return await fire_by_hand(channel, engine.runtime, team, firing)


async def run_terminal(settings: Settings, given: list[str] | None) -> None:
    """Chat in the terminal with the configured agent, on the configured database.

    Raises:
        ConfigError: A model the bot cannot run with.
    """
    # nobody can answer an approval in a terminal: the tool that asks for one is left out
    async with open_engine(settings, [remember, recall]) as engine:
        where = describe_database(settings.database_url)
        if settings.anthropic_api_key is not None:
            print(texts.terminal_with_claude(settings.anthropic_model, where))
        else:
            print(texts.NEEDS_CREDENTIALS)
            print(texts.offline_intro(where))
        await chat(engine.runtime, engine.agent.name, given)


async def describe_policies(settings: Settings) -> list[str]:
    """The effective policy of Slack turns: the default, then each channel that has one.

    Raises:
        ConfigError: A policy names a tool the agent does not have.
    """
    from bot.slack.tools import listed_slack_tools

    config = load_bot_config(settings.bot_config)
    tools = listed_slack_tools()
    async with open_engine(settings, tools, surfaces=config.surfaces, check_access=False) as engine:
        book = PolicyBook(engine.agent, config, engine.store)
        lines = [f"Policies of {SOURCE} turns (agent {engine.agent.name}):"]
        for view in await book.describe_all():
            lines += ["", *texts.policy_lines(view, in_slack=False)]
        return lines


async def _open_slack_bot(
    stack: contextlib.AsyncExitStack,
    settings: Settings,
    config: BotConfig,
    slack: SlackConnection,
    *,
    serving_api: bool = False,
) -> tuple[Engine, SlackChannel]:
    """On ``stack``: the engine with the Slack tools, and the channel that shows its turns.

    With ``serving_api`` the engine also logs the API's sessions (and only those:
    a Slack turn pays nothing for the log).
    """
    from bot.slack.run import showing, slack_channel
    from bot.slack.tools import slack_tools

    if slack.me is None:  # installed through OAuth: each schedule names its workspace
        unplaced = [s.name for s in config.schedules if s.team is None]
        if unplaced:
            raise ConfigError(texts.schedules_need_team(unplaced))
    engine = await stack.enter_async_context(
        open_engine(
            settings,
            slack_tools(slack.workspaces, config.approvals),
            surfaces=config.surfaces,
            serving=[SOURCE, API_SOURCE] if serving_api else [SOURCE],
            check=lambda agent: check_channel_policies(agent, config),
            log=serving_api,
            log_only=is_api_session,
        )
    )
    if slack.installations is not None:
        slack.installations.attach(engine.store)
    policies = PolicyBook(engine.agent, config, engine.store)
    channel = slack_channel(engine.runtime, slack, settings, policies)
    return engine, await stack.enter_async_context(showing(channel))


async def _take_slack_events(
    stack: contextlib.AsyncExitStack,
    settings: Settings,
    channel: SlackChannel,
    slack: SlackConnection,
    api: Api | None,
    store: SessionStore,
) -> None:
    """Take events from Slack, serve ``/healthz`` and the API, until ``stack`` closes."""
    from bot.slack.app import bolt_app
    from bot.slack.http import web_app
    from bot.slack.oauth import oauth_settings_of
    from bot.slack.run import socket_mode

    signing = settings.slack_signing_secret
    oauth = None
    if slack.installations is not None:
        oauth = oauth_settings_of(settings, slack.installations)
    bolt = bolt_app(
        channel, slack.client, signing.get_secret_value() if signing else "", oauth=oauth
    )
    if settings.slack_app_token is not None:
        app_token = settings.slack_app_token.get_secret_value()
        await stack.enter_async_context(socket_mode(bolt, slack.client, app_token))
        # no event comes over HTTP, but a platform or a proxy still asks /healthz on PORT
        await stack.enter_async_context(
            listening(web_application(api, store), "0.0.0.0", settings.port)
        )
        print(texts.health_check_on(settings.port), flush=True)
        if api is not None:
            print(texts.api_beside_slack(settings.port), flush=True)
        return
    assert signing is not None
    app = web_app(bolt, signing.get_secret_value())
    add_health_check(app, store)
    if api is not None:
        mount_web(app, api)
    # every interface: Slack (or the proxy in front) must reach it
    await stack.enter_async_context(listening(app, "0.0.0.0", settings.port))
    print(f"Serving Slack events on http://0.0.0.0:{settings.port}/slack/events", flush=True)
    if api is not None:
        print(texts.api_beside_slack(settings.port), flush=True)


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM (a deploy) or SIGINT (Ctrl+C)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


@contextlib.asynccontextmanager
async def _said_on_a_clean_stop(line: str) -> AsyncIterator[None]:
    """Print ``line`` when the block ends without an error (an error says why it ended)."""
    yield
    print(line, flush=True)


def _say_resumed(resumed: int) -> None:
    if resumed:
        print(f"Resumed {resumed} unfinished turn(s) from their last checkpoint.", flush=True)


async def _caught_up(schedules: ScheduleRunner) -> None:
    ran = await schedules.catch_up()
    if ran:
        print(f"Ran {ran} schedule firing(s) that fell due while the bot was down.", flush=True)


async def held_turns_command(
    settings: Settings, *, retry: str | None, drop: str | None
) -> list[str]:
    """``python -m bot turns --held``: list the held turns, or retry or drop one.

    Raises:
        UnknownTurnError: ``retry`` or ``drop`` names no held turn.
        ConflictError: The held turn's session waits for an answer (a retry).
    """
    from agent import drop_held, held_turns, retry_held

    store = await open_database(settings)
    try:
        if retry is not None:
            new_id = await retry_held(store, retry)
            return [
                f"Turn {retry} is queued again as {new_id}; a running bot runs it within "
                "seconds, or the bot runs it at its next start."
            ]
        if drop is not None:
            held = await drop_held(store, drop)
            return [f"Turn {drop} of {held.key} is dropped; it stays interrupted."]
        lines = [
            f"{h.key.agent} {h.key.session_id} {h.record.turn_id}: {h.detail}"
            for h in await held_turns(store)
        ]
        return lines or ["No held turns."]
    finally:
        await store.close()
