"""Which client speaks for the bot in a workspace: one token, or one per installation.

One workspace (``SLACK_BOT_TOKEN``) has one client for everything. Installed through
OAuth, each workspace has a bot token and bot user of its own, kept by
`bot.slack.installations`; the client of a thread, a tool call or a schedule is its
workspace's, found by the team id every Slack session id starts with
(``slack:<team>:...``). Clients are made once per token and kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from agent import ToolError
from bot.slack.installations import StoreInstallations

logger = logging.getLogger("bot.slack")

__all__ = [
    "RECHECK_SECONDS",
    "Installed",
    "NotInstalled",
    "OneWorkspace",
    "Workspace",
    "Workspaces",
]

RECHECK_SECONDS = 60.0
"""How long a workspace's token is used before the store is asked again (another replica
may have seen the app uninstalled, or installed again with a new token)."""


class NotInstalled(ToolError):
    """The app is not installed in that workspace (any more)."""


@dataclass(frozen=True, slots=True)
class Workspace:
    """The bot in one workspace: its client, and its own user id there."""

    team: str
    client: AsyncWebClient
    bot_user_id: str


class Workspaces(Protocol):
    """The bot's workspaces, by team id."""

    async def get(self, team: str | None) -> Workspace:
        """The bot in ``team`` (None: the only one, where there is only one).

        Raises:
            NotInstalled: The app is not installed there.
        """
        ...

    def forget(self, team: str) -> None:
        """Drop what is known of ``team``: the app was uninstalled there."""
        ...


class OneWorkspace:
    """The one workspace of ``SLACK_BOT_TOKEN``: every team id gets its client."""

    def __init__(self, client: AsyncWebClient, *, team: str, bot_user_id: str) -> None:
        self._only = Workspace(team, client, bot_user_id)

    async def get(self, team: str | None) -> Workspace:
        """The only workspace, whatever ``team`` says (Slack Connect shares its channels)."""
        return self._only

    def forget(self, team: str) -> None:
        """Nothing to forget: the token is the environment's."""


class Installed:
    """The workspaces that installed the app through OAuth.

    Args:
        installations: Where the bot tokens are kept.
        client_for: Makes the client of a bot token (sharing one HTTP session).
    """

    def __init__(
        self,
        installations: StoreInstallations,
        client_for: Callable[[str], AsyncWebClient],
    ) -> None:
        self._installations = installations
        self._client_for = client_for
        self._known: dict[str, tuple[Workspace, float]] = {}
        """By team id, with when it was last read from the store."""

    async def get(self, team: str | None) -> Workspace:
        """The bot in ``team``, as installed there (read again after `RECHECK_SECONDS`)."""
        if team is None:
            raise NotInstalled("this conversation names no workspace")
        known = self._known.get(team)
        if known is not None and time.monotonic() - known[1] < RECHECK_SECONDS:
            return known[0]
        bot = await self._installations.async_find_bot(enterprise_id=None, team_id=team)
        if bot is None:
            self._known.pop(team, None)
            raise NotInstalled(f"the app is not installed in the workspace {team}")
        if known is not None and known[0].client.token == bot.bot_token:
            workspace = known[0]
        else:
            workspace = Workspace(team, self._client_for(bot.bot_token), bot.bot_user_id)
        self._known[team] = (workspace, time.monotonic())
        return workspace

    def forget(self, team: str) -> None:
        """Drop what is known of ``team`` (the app was uninstalled there, or its tokens revoked)."""
        self._known.pop(team, None)


def register_uninstalls(bolt: AsyncApp, workspaces: Workspaces) -> None:
    """Forget a workspace that uninstalled the app (``app_uninstalled``) or revoked its token.

    ``tokens_revoked`` lists the revoked tokens' owners: only the bot's matter here
    (a person's was never kept). With one workspace (``SLACK_BOT_TOKEN``) nothing is
    kept: the log says the token no longer works.
    """

    async def on_uninstalled(body: dict[str, Any]) -> None:
        await _forget(bolt, workspaces, body, why="the app was uninstalled")

    async def on_tokens_revoked(body: dict[str, Any]) -> None:
        event = body.get("event") or {}
        tokens = event.get("tokens") if isinstance(event, dict) else None
        if isinstance(tokens, dict) and tokens.get("bot"):
            await _forget(bolt, workspaces, body, why="its bot token was revoked")

    bolt.event("app_uninstalled")(on_uninstalled)
    bolt.event("tokens_revoked")(on_tokens_revoked)


async def _forget(
    bolt: AsyncApp, workspaces: Workspaces, body: dict[str, Any], *, why: str
) -> None:
    team, enterprise = body.get("team_id"), body.get("enterprise_id")
    store = bolt.installation_store
    if store is None:
        logger.warning("%s from workspace %s: SLACK_BOT_TOKEN no longer works", why, team)
        return
    await store.async_delete_all(enterprise_id=enterprise, team_id=team)
    if isinstance(team, str):
        workspaces.forget(team)
    logger.info("workspace %s forgotten: %s", team, why)
