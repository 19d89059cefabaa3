"""``python -m bot`` with Slack credentials: serve Slack until SIGTERM, then stop cleanly.

HTTP mode (a signing secret) serves ``POST /slack/events`` and ``GET /healthz``
on ``$PORT``; Socket Mode (an app token) connects out instead. On SIGTERM or
SIGINT it stops taking events, gives replies in flight a few seconds, and
closes the runtime: turns not yet finished stay on disk and resume, replies
included, at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    AgentRuntime,
    Cancelled,
    Completed,
    ConfigError,
    Failed,
    Suspended,
    TurnRecord,
    open_store,
    warn_unmounted_surfaces,
)
from bot import texts
from bot.agent_factory import build_agent, check_model
from bot.config_file import BotConfig, load_bot_config
from bot.policies import SOURCE, PolicyBook, check_channel_policies
from bot.schedules import Firing, ScheduleRunner, firing_now
from bot.settings import Settings
from bot.slack.app import bolt_app
from bot.slack.channel import SlackChannel
from bot.slack.firing import fire, has_fired
from bot.slack.http import web_app
from bot.slack.tools import THREAD_TOOLS, slack_tools
from bot.web.api import SOURCE as API_SOURCE
from bot.web.api import Api, is_api_session
from bot.web.app import listening, mount_web, web_application
from bot.web.serve import api_for, event_log_for, pruning

__all__ = [
    "SHUTDOWN_GRACE_SECONDS",
    "ScheduleFailed",
    "run_schedule",
    "serve_slack",
    "slack_client",
]

logger = logging.getLogger("bot.slack")

SHUTDOWN_GRACE_SECONDS = 5.0
"""How long replies in flight get after SIGTERM; the whole stop stays under 10 s."""


def slack_client(
    settings: Settings, session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    """Slack's Web API with the bot token; a 429 waits as long as Slack says, then retries.

    Args:
        settings: The bot token and the Web API's URL.
        session: Shared by every call, so connections are reused; without one,
            slack_sdk opens (and closes) a connection per call.
    """
    assert settings.slack_bot_token is not None
    return AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url,
        session=session,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
        ],
    )


async def serve_slack(settings: Settings) -> None:
    """Serve Slack until the process is asked to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with aiohttp.ClientSession() as http:
        client = slack_client(settings, http)
        await _serve(settings, client, await _who_am_i(client, settings), stop)


@dataclass(frozen=True, slots=True)
class _Identity:
    user_id: str
    team_id: str


async def _who_am_i(client: AsyncWebClient, settings: Settings) -> _Identity:
    """The bot's user id and workspace, which also prove the token works before anything starts.

    Raises:
        ConfigError: Slack refused the token, or could not be reached.
    """
    try:
        found = await client.auth_test()
        return _Identity(str(found["user_id"]), str(found["team_id"]))
    except SlackApiError as exc:
        raise ConfigError(
            f"Slack refused SLACK_BOT_TOKEN ({exc.response.get('error')}); "
            "copy the Bot User OAuth Token from the app's OAuth & Permissions page"
        ) from None
    except aiohttp.ClientError as exc:
        raise ConfigError(
            f"cannot reach Slack's Web API at {settings.slack_api_url}: {type(exc).__name__}"
        ) from None


@contextlib.asynccontextmanager
async def _engine(
    settings: Settings,
    config: BotConfig,
    client: AsyncWebClient,
    me: _Identity,
    *,
    serve_api: bool = False,
) -> AsyncIterator[tuple[SlackChannel, Api | None]]:
    """The agent, its runtime on the store, the Slack channel showing its turns, and the API.

    The API (with its event log) comes only with ``serve_api``. On leaving, replies
    in flight get a few seconds, then everything is closed: turns not yet finished
    stay on disk for the next start.
    """
    agent = build_agent(settings, slack_tools(client), surfaces=config.surfaces)
    warn_unmounted_surfaces(agent, [SOURCE, API_SOURCE] if serve_api else [SOURCE])
    check_channel_policies(agent, config)  # before the store: a refusal leaves nothing open
    await check_model(agent)
    store = await open_store(settings.database_url)
    runtime = AgentRuntime(store, agent)
    api = None
    if serve_api:
        # only the API's sessions are logged: a Slack turn pays nothing for it
        log = event_log_for(settings, runtime, only=is_api_session)
        api = api_for(settings, runtime, agent, log, unavailable=THREAD_TOOLS)
    channel = SlackChannel(
        runtime,
        agent.name,
        client,
        bot_user_id=me.user_id,
        replace_in_flight=settings.replace_in_flight,
        policies=PolicyBook(agent, config, store),
    )
    try:
        yield channel, api
        await channel.drain(grace=SHUTDOWN_GRACE_SECONDS)
    finally:
        channel.close()
        await runtime.close()
        if api is not None:
            await api.log.close()
        await store.close()
        closing = getattr(agent.model, "aclose", None)
        if closing is not None:
            await closing()


async def _serve(
    settings: Settings, client: AsyncWebClient, me: _Identity, stop: asyncio.Event
) -> None:
    config = load_bot_config(settings.bot_config)
    serve_api = bool(settings.api_principals())
    if not serve_api:
        print(texts.API_NEEDS_TOKENS, flush=True)
    async with _engine(settings, config, client, me, serve_api=serve_api) as (channel, api):
        runtime = channel.runtime

        async def fire_firing(firing: Firing) -> None:
            await fire(channel, runtime, me.team_id, firing)

        async def has_fired_firing(firing: Firing) -> bool:
            return await has_fired(channel, runtime, me.team_id, firing)

        schedules = ScheduleRunner(config.schedules, fire_firing, has_run=has_fired_firing)
        try:
            await channel.resume_replies()  # first: a resumed turn may end at once
            resumed = await runtime.start()
            if resumed:
                print(
                    f"Resumed {resumed} unfinished turn(s) from their last checkpoint.", flush=True
                )
            async with _serving(settings, channel, client, api), pruning(api.log if api else None):
                schedules.start()
                if config.schedules:
                    print(f"Keeping {len(config.schedules)} schedule(s).", flush=True)
                channel.spawn(_caught_up(schedules), name="schedules: catch up")
                await stop.wait()
        finally:
            schedules.stop()
        print("Stopping: no new events; replies in flight get a few seconds.", flush=True)


class ScheduleFailed(Exception):
    """A schedule fired by hand did not deliver its reply; the message says why."""


async def run_schedule(settings: Settings, name: str) -> str:
    """Fire the schedule ``name`` now and post its reply, as its cron would; what happened.

    The runtime is not started: the server's resumes the other turns; this one
    runs only its own.

    Raises:
        ConfigError: No such schedule, or Slack refused the token.
        ScheduleFailed: The turn failed, or Slack refused its reply.
    """
    config = load_bot_config(settings.bot_config)
    schedule = config.schedule(name)
    async with aiohttp.ClientSession() as http:
        client = slack_client(settings, http)
        me = await _who_am_i(client, settings)
        async with _engine(settings, config, client, me) as (channel, _):
            firing = firing_now(schedule, datetime.now(UTC))
            try:
                turn_id = await fire(channel, channel.runtime, me.team_id, firing)
            except SlackApiError as exc:
                error = exc.response.get("error")
                raise ScheduleFailed(f"Slack refused the reply: {error}") from None
            session = channel.runtime.session(channel.agent, schedule.session(me.team_id))
            [record] = [t for t in await session.turns() if t.turn_id == turn_id]
            return _outcome(schedule.name, schedule.channel, record)


def _outcome(name: str, channel: str, record: TurnRecord) -> str:
    """What a firing by hand came to, in a line; a turn that did not answer raises."""
    result = record.result
    if isinstance(result, Completed):
        return f"Schedule {name}: its reply is in {channel} (turn {record.turn_id})."
    if isinstance(result, Suspended):
        return f"Schedule {name}: waiting in {channel} for an approval (turn {record.turn_id})."
    if isinstance(result, Failed):
        raise ScheduleFailed(f"the turn failed: {result.error}")
    if isinstance(result, Cancelled):
        raise ScheduleFailed(f"the turn was cancelled ({result.reason})")
    raise ScheduleFailed(f"the turn is still {record.status}")


async def _caught_up(schedules: ScheduleRunner) -> None:
    ran = await schedules.catch_up()
    if ran:
        print(f"Ran {ran} schedule firing(s) that fell due while the bot was down.", flush=True)


@contextlib.asynccontextmanager
async def _serving(
    settings: Settings, channel: SlackChannel, client: AsyncWebClient, api: Api | None
) -> AsyncIterator[None]:
    """Take events from Slack (HTTP or Socket Mode), and serve the API, while the block runs."""
    signing = settings.slack_signing_secret
    bolt = bolt_app(channel, client, signing.get_secret_value() if signing else "")
    if settings.slack_app_token is not None:
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        app_token = settings.slack_app_token.get_secret_value()
        try:  # slack_sdk retries a refused token forever: ask once, and say so
            await client.apps_connections_open(app_token=app_token)
        except SlackApiError as exc:
            raise ConfigError(
                f"Slack refused SLACK_APP_TOKEN ({exc.response.get('error')}); create an "
                "app-level token with connections:write under Basic Information"
            ) from None
        handler = AsyncSocketModeHandler(bolt, app_token)
        await handler.connect_async()  # type: ignore[no-untyped-call]
        print("Connected to Slack in Socket Mode.", flush=True)
        try:
            if api is None:
                yield
            else:
                async with listening(web_application(api), "0.0.0.0", settings.port):
                    print(texts.api_beside_slack(settings.port), flush=True)
                    yield
        finally:
            await handler.close_async()  # type: ignore[no-untyped-call]
        return
    assert signing is not None
    app = web_app(bolt, signing.get_secret_value())
    if api is not None:
        mount_web(app, api)
    # every interface: Slack (or the proxy in front) must reach it
    async with listening(app, "0.0.0.0", settings.port):
        print(f"Serving Slack events on http://0.0.0.0:{settings.port}/slack/events", flush=True)
        if api is not None:
            print(texts.api_beside_slack(settings.port), flush=True)
        yield
