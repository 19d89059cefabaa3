"""The Slack side of a running bot: the Web API client, who the bot is, Socket Mode, shutdown.

HTTP mode (a signing secret) serves ``POST /slack/events`` (see `bot.slack.http`);
Socket Mode (an app token) connects out instead (`socket_mode`). On SIGTERM or
SIGINT the bot stops taking events, gives replies in flight a few seconds
(`showing`), and closes the runtime: turns not yet finished stay on disk and
resume, replies included, at the next start. `bot.serve` puts these together.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from agent import AgentRuntime, ConfigError
from bot.policies import PolicyBook
from bot.schedules import Schedule
from bot.settings import Settings
from bot.slack.channel import SlackChannel
from bot.slack.envelope import MalformedBody, check_socket_payload
from bot.slack.installations import StoreInstallations
from bot.slack.workspaces import Installed, OneWorkspace, Workspaces

__all__ = [
    "REPEATABLE",
    "SHUTDOWN_GRACE_SECONDS",
    "Identity",
    "SlackConnection",
    "connected",
    "schedule_team",
    "showing",
    "slack_channel",
    "slack_client",
    "socket_mode",
    "who_am_i",
]

logger = logging.getLogger("bot.slack")

SHUTDOWN_GRACE_SECONDS = 5.0
"""How long replies in flight get after SIGTERM; the whole stop stays under 10 s."""


REPEATABLE = frozenset(
    {
        "auth.test",
        "apps.connections.open",
        "assistant.threads.setStatus",
        "chat.delete",
        "chat.stopStream",
        "chat.update",
        "conversations.history",
        "conversations.info",
        "conversations.list",
        "conversations.replies",
        "users.info",
        "views.publish",
    }
)
"""The methods a dropped connection may send again: reads, and writes that come out the
same however often they are applied (``chat.update`` sets the whole message; a second
``chat.delete`` or ``chat.stopStream`` is refused, changing nothing). ``chat.postMessage``,
``chat.startStream``, ``chat.appendStream`` and ``chat.postEphemeral`` are not in it:
sent again after Slack applied them, they post (or append) twice. Their callers look for
what the first attempt did instead (see `bot.slack.reply`)."""


class RepeatableRetryHandler(AsyncConnectionErrorRetryHandler):
    """slack_sdk's retry after a dropped connection, for the `REPEATABLE` methods only."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        method = request.url.rstrip("/").rsplit("/", 1)[-1].partition("?")[0]
        if method not in REPEATABLE:
            return False
        return await super()._can_retry_async(
            state=state, request=request, response=response, error=error
        )


def slack_client(
    settings: Settings,
    session: aiohttp.ClientSession | None = None,
    *,
    token: str | None = None,
) -> AsyncWebClient:
    """Slack's Web API with a bot token; a 429 waits as long as Slack says, then retries.

    A dropped connection is retried only for the `REPEATABLE` methods (a 429 was
    never applied, so every method retries that).

    Args:
        settings: The bot token (one workspace) and the Web API's URL.
        session: Shared by every call, so connections are reused; without one,
            slack_sdk opens (and closes) a connection per call.
        token: A workspace's bot token (OAuth installs); by default ``SLACK_BOT_TOKEN``,
            and none at all where the app installs through OAuth (the app's own client,
            whose requests Bolt gives each workspace's token).
    """
    if token is None and settings.slack_bot_token is not None:
        token = settings.slack_bot_token.get_secret_value()
    return AsyncWebClient(
        token=token,
        base_url=settings.slack_api_url,
        session=session,
        retry_handlers=[
            RepeatableRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
        ],
    )


@dataclass(frozen=True, slots=True)
class Identity:
    """The bot's own user, and the workspace it is installed in."""

    user_id: str
    team_id: str


async def who_am_i(client: AsyncWebClient, settings: Settings) -> Identity:
    """The bot's user id and workspace, which also prove the token works before anything starts.

    Raises:
        ConfigError: Slack refused the token, or could not be reached.
    """
    try:
        found = await client.auth_test()
        return Identity(str(found["user_id"]), str(found["team_id"]))
    except SlackApiError as exc:
        raise ConfigError(
            f"Slack refused SLACK_BOT_TOKEN ({exc.response.get('error')}); "
            "copy the Bot User OAuth Token from the app's OAuth & Permissions page"
        ) from None
    except aiohttp.ClientError as exc:
        raise ConfigError(
            f"cannot reach Slack's Web API at {settings.slack_api_url}: {type(exc).__name__}"
        ) from None


@dataclass(frozen=True, slots=True)
class SlackConnection:
    """Slack's Web API as the bot, and who the bot is there."""

    client: AsyncWebClient
    """With the bot token in one workspace; with none where the app installs through OAuth."""
    me: Identity | None
    """The bot in its one workspace; None where it is installed in many."""
    workspaces: Workspaces
    installations: StoreInstallations | None = None
    """Where the workspaces' tokens are kept (OAuth); attached to the store once it opens."""


@contextlib.asynccontextmanager
async def connected(settings: Settings) -> AsyncIterator[SlackConnection]:
    """Slack's Web API, with one HTTP session for every call, open while the block runs.

    Raises:
        ConfigError: Slack refused the bot token, or could not be reached.
    """
    async with aiohttp.ClientSession() as http:
        client = slack_client(settings, http)
        if settings.installs_by_oauth:
            installations = StoreInstallations()
            workspaces = Installed(
                installations, lambda token: slack_client(settings, http, token=token)
            )
            yield SlackConnection(client, None, workspaces, installations)
            return
        me = await who_am_i(client, settings)
        one = OneWorkspace(client, team=me.team_id, bot_user_id=me.user_id)
        yield SlackConnection(client, me, one)


def schedule_team(slack: SlackConnection, schedule: Schedule) -> str:
    """The workspace a schedule posts in: its own ``team``, or the bot's one workspace's."""
    if schedule.team is not None:
        return schedule.team
    if slack.me is None:
        raise ConfigError(f"schedule {schedule.name!r}: team is needed with OAuth installs")
    return slack.me.team_id


def slack_channel(
    runtime: AgentRuntime,
    slack: SlackConnection,
    settings: Settings,
    policies: PolicyBook,
) -> SlackChannel:
    """The channel that shows the runtime's Slack turns in their threads, as ``settings`` say."""
    return SlackChannel(
        runtime,
        policies.agent.name,
        slack.client,
        bot_user_id=slack.me.user_id if slack.me else "",
        workspaces=slack.workspaces,
        replace_in_flight=settings.replace_in_flight,
        follow_ups=policies.follow_ups,
        policies=policies,
        surface=policies.surface,
    )


@contextlib.asynccontextmanager
async def showing(channel: SlackChannel) -> AsyncIterator[SlackChannel]:
    """Let ``channel`` show turns while the block runs.

    When the block ends normally, replies in flight get `SHUTDOWN_GRACE_SECONDS`
    to finish; in every case the channel then stops watching the runtime.
    """
    try:
        yield channel
        await channel.drain(grace=SHUTDOWN_GRACE_SECONDS)
    finally:
        channel.close()


class CheckedSocketModeHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler, which first checks each payload as HTTP bodies are checked.

    Bolt indexes a payload without looking, and answers one of the wrong shape
    with a 500, which is never acknowledged: Slack sends it again, up to three
    times, and each time a traceback is logged. Such a payload is acknowledged
    here, and dropped with a warning that says what is wrong, before Bolt reads it.
    """

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        try:
            check_socket_payload(req.type, req.payload)
        except MalformedBody as exc:
            logger.warning(
                "a Socket Mode %s envelope Slack does not send was acked and dropped: %s",
                str(req.type)[:40],
                exc,
            )
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        await super().handle(client, req)


@contextlib.asynccontextmanager
async def socket_mode(
    bolt: AsyncApp, client: AsyncWebClient, app_token: str
) -> AsyncIterator[None]:
    """Take Slack's events over Socket Mode while the block runs.

    Raises:
        ConfigError: Slack refused the app token.
    """
    # slack_sdk would retry a refused token forever: ask once here, and say what is wrong
    try:
        await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        raise ConfigError(
            f"Slack refused SLACK_APP_TOKEN ({exc.response.get('error')}); create an "
            "app-level token with connections:write under Basic Information"
        ) from None
    handler = CheckedSocketModeHandler(bolt, app_token)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    print("Connected to Slack in Socket Mode.", flush=True)
    try:
        yield
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
