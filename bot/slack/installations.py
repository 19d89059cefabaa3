"""The workspaces the app is installed in, kept in the bot's own database.

With OAuth (``SLACK_CLIENT_ID``...), each workspace that installs the app gives it a
bot token of its own. Bolt keeps them through an ``AsyncInstallationStore``; this one
writes them to the store the turns live in, on SQLite or PostgreSQL alike, so every
replica finds every workspace, and nothing else has to be backed up. They go in the
store's keyed JSON table (the one channel policies use, ``place_policies``) under a
source of their own, `SOURCE`, which no policy lookup ever reads.

The bot keeps bot tokens only (``installation_store_bot_only``): it acts as itself,
never as the person who installed it. ``app_uninstalled`` and ``tokens_revoked``
delete what they name (Bolt's token revocation listeners call the deletes here).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation

from agent import SessionStore

__all__ = ["SOURCE", "StoreInstallations"]

logger = logging.getLogger("bot.slack")

SOURCE = "slack.installations"
"""The source the installations are kept under in the keyed table (never a policy's)."""
_FIELDS = (
    "app_id",
    "enterprise_id",
    "enterprise_name",
    "team_id",
    "team_name",
    "bot_token",
    "bot_id",
    "bot_user_id",
    "bot_refresh_token",
    "bot_token_expires_at",
    "is_enterprise_install",
    "installed_at",
)


class StoreInstallations(AsyncInstallationStore):
    """Bolt's installation store, over the bot's `SessionStore`."""

    def __init__(self, store: SessionStore | None = None) -> None:
        self._kept = store
        self._lock = asyncio.Lock()

    def attach(self, store: SessionStore) -> None:
        """Keep installations in ``store`` (opened after the tools that need them are made)."""
        self._kept = store

    @property
    def _store(self) -> SessionStore:
        if self._kept is None:
            raise RuntimeError("the installations' store is not attached yet")
        return self._kept

    @property
    def logger(self) -> logging.Logger:
        """The bot's Slack logger."""
        return logger

    async def async_save(self, installation: Installation) -> None:
        """Keep a workspace's installation: its bot, replacing the one kept before."""
        await self.async_save_bot(installation.to_bot())

    async def async_save_bot(self, bot: Bot) -> None:
        """Keep a workspace's bot and its token."""
        kept: dict[str, Any] = {name: getattr(bot, name) for name in _FIELDS}
        kept["bot_scopes"] = list(bot.bot_scopes or ())
        kept["installed_at"] = float(bot.installed_at or time.time())
        key = _key(bot.enterprise_id, bot.team_id, bot.is_enterprise_install)
        async with self._lock:
            await self._store.save_place_policy(SOURCE, key, kept)
        logger.info("installed in %s", bot.team_name or bot.team_id or bot.enterprise_id)

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        """The bot of a workspace (or of its org, installed org-wide); None if not installed."""
        kept = (await self._store.place_policies(SOURCE)).get(
            _key(enterprise_id, team_id, is_enterprise_install)
        )
        if kept is None and enterprise_id is not None and not is_enterprise_install:
            # a workspace of an org the app was installed in org-wide
            kept = (await self._store.place_policies(SOURCE)).get(_key(enterprise_id, None, True))
        return Bot(**kept) if isinstance(kept, dict) else None

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        """The installation of a workspace, as its bot: no person's token is kept."""
        bot = await self.async_find_bot(
            enterprise_id=enterprise_id,
            team_id=team_id,
            is_enterprise_install=is_enterprise_install,
        )
        if bot is None:
            return None
        return Installation(
            app_id=bot.app_id,
            enterprise_id=bot.enterprise_id,
            enterprise_name=bot.enterprise_name,
            team_id=bot.team_id,
            team_name=bot.team_name,
            bot_token=bot.bot_token,
            bot_id=bot.bot_id,
            bot_user_id=bot.bot_user_id,
            bot_scopes=bot.bot_scopes,
            bot_refresh_token=bot.bot_refresh_token,
            bot_token_expires_at=bot.bot_token_expires_at,
            is_enterprise_install=bot.is_enterprise_install,
            installed_at=bot.installed_at,
            user_id=user_id or "",
        )

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        """Forget a workspace's bot (the app was uninstalled, or its tokens revoked)."""
        async with self._lock:
            for enterprise_install in (False, True):
                key = _key(enterprise_id, team_id, enterprise_install)
                await self._store.save_place_policy(SOURCE, key, None)
        logger.info("uninstalled from %s", team_id or enterprise_id)

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        """Forget a workspace's installation; a person's (``user_id``) was never kept."""
        if user_id is None:  # the bot's own: a person's tokens are never kept
            await self.async_delete_bot(enterprise_id=enterprise_id, team_id=team_id)

    async def teams(self) -> list[str]:
        """The workspaces the app is installed in, by team id."""
        kept = await self._store.place_policies(SOURCE)
        return sorted(
            str(v["team_id"]) for v in kept.values() if isinstance(v, dict) and v.get("team_id")
        )


def _key(enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None) -> str:
    """A workspace's team id; ``org:<enterprise>`` for an org-wide install.

    Keyed by the team alone: a turn knows its workspace from its session id
    (``slack:<team>:...``), never its org. The manifest leaves ``org_deploy_enabled``
    off, so Slack makes no org-wide install of this app.
    """
    if is_enterprise_install:
        return f"org:{enterprise_id or '-'}"
    return team_id or "-"
