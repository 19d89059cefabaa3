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

import aiohttp
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from agent import AgentRuntime, ConfigError, open_store
from bot.agents import build_agent
from bot.config import Settings
from bot.slack.channel import SlackChannel
from bot.slack.server import bolt_app, web_app
from bot.slack.tools import slack_tools

__all__ = ["SHUTDOWN_GRACE_SECONDS", "serve_slack", "slack_client"]

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


async def _who_am_i(client: AsyncWebClient, settings: Settings) -> str:
    """The bot's user id, which also proves the token works before anything starts.

    Raises:
        ConfigError: Slack refused the token, or could not be reached.
    """
    try:
        return str((await client.auth_test())["user_id"])
    except SlackApiError as exc:
        raise ConfigError(
            f"Slack refused SLACK_BOT_TOKEN ({exc.response.get('error')}); "
            "copy the Bot User OAuth Token from the app's OAuth & Permissions page"
        ) from None
    except aiohttp.ClientError as exc:
        raise ConfigError(
            f"cannot reach Slack's Web API at {settings.slack_api_url}: {type(exc).__name__}"
        ) from None


async def _serve(
    settings: Settings, client: AsyncWebClient, bot_user_id: str, stop: asyncio.Event
) -> None:
    agent = build_agent(settings, slack_tools(client))
    store = await open_store(settings.database_url)
    runtime = AgentRuntime(store, agent)
    channel = SlackChannel(
        runtime,
        agent.name,
        client,
        bot_user_id=bot_user_id,
        replace_in_flight=settings.replace_in_flight,
    )
    try:
        await channel.resume_replies()  # first: a resumed turn may end at once
        resumed = await runtime.start()
        if resumed:
            print(f"Resumed {resumed} unfinished turn(s) from their last checkpoint.", flush=True)
        async with _serving(settings, channel, client):
            await stop.wait()
        print("Stopping: no new events; replies in flight get a few seconds.", flush=True)
        await channel.drain(grace=SHUTDOWN_GRACE_SECONDS)
    finally:
        channel.close()
        await runtime.close()
        await store.close()
        closing = getattr(agent.model, "aclose", None)
        if closing is not None:
            await closing()


@contextlib.asynccontextmanager
async def _serving(
    settings: Settings, channel: SlackChannel, client: AsyncWebClient
) -> AsyncIterator[None]:
    """Take events from Slack (HTTP or Socket Mode) for as long as the block runs."""
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
            yield
        finally:
            await handler.close_async()  # type: ignore[no-untyped-call]
        return
    assert signing is not None
    # a slow client must not hold the stop past Slack's patience (and the 10 s we promise)
    runner = web.AppRunner(
        web_app(bolt, signing.get_secret_value()), access_log=None, shutdown_timeout=2.0
    )
    await runner.setup()
    # every interface: Slack (or the proxy in front) must reach it
    await web.TCPSite(runner, "0.0.0.0", settings.port).start()
    print(f"Serving Slack events on http://0.0.0.0:{settings.port}/slack/events", flush=True)
    try:
        yield
    finally:
        await runner.cleanup()
