"""Installing the app in many workspaces: Slack's OAuth flow, as Bolt runs it.

With ``SLACK_CLIENT_ID``, ``SLACK_CLIENT_SECRET`` and ``SLACK_STATE_SECRET`` set (and
no ``SLACK_BOT_TOKEN``: `bot.settings` refuses both, so the mode never changes
silently), ``GET /slack/install`` sends a person to Slack to approve the app, and
``GET /slack/oauth_redirect`` takes Slack's answer: Bolt trades its ``code`` for the
workspace's bot token (``oauth.v2.access``) and keeps it (`bot.slack.installations`).

The ``state`` Bolt sends along and checks on the way back (against a cookie in the
same browser, too) is signed with ``SLACK_STATE_SECRET`` and expires after ten
minutes, so every replica can check it without a table; one is taken once per
process.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable

from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from bot.settings import Settings
from bot.slack.installations import StoreInstallations

__all__ = ["BOT_SCOPES", "STATE_SECONDS", "SignedStates", "oauth_settings", "oauth_settings_of"]

logger = logging.getLogger("bot.slack")

BOT_SCOPES = (
    "app_mentions:read",
    "assistant:write",
    "channels:history",
    "channels:read",
    "chat:write",
    "commands",
    "files:read",
    "groups:history",
    "groups:read",
    "im:history",
    "im:read",
    "mpim:history",
    "mpim:read",
    "users:read",
)
"""What the app asks each workspace for: manifest.yml's bot scopes (a test keeps them equal)."""
STATE_SECONDS = 600


class SignedStates(AsyncOAuthStateStore):
    """OAuth ``state`` values signed with a secret: ``<expiry>.<nonce>.<signature>``."""

    def __init__(
        self, secret: str, *, seconds: int = STATE_SECONDS, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = hashlib.sha256(secret.encode()).digest()
        self._seconds = seconds
        self._clock = clock
        self._taken: dict[str, int] = {}
        """Nonces consumed here, with their expiry (forgotten once expired)."""

    @property
    def logger(self) -> logging.Logger:
        """The bot's Slack logger."""
        return logger

    async def async_issue(self, *args: object, **kwargs: object) -> str:
        """A new state, good for `STATE_SECONDS`."""
        body = f"{int(self._clock()) + self._seconds}.{secrets.token_urlsafe(16)}"
        return f"{body}.{self._sign(body)}"

    async def async_consume(self, state: str) -> bool:
        """Whether ``state`` is one of ours, unexpired and not taken before."""
        body, _, signature = state.rpartition(".")
        expiry, _, nonce = body.partition(".")
        if not (expiry.isdigit() and nonce and hmac.compare_digest(signature, self._sign(body))):
            return False
        now = int(self._clock())
        self._taken = {n: e for n, e in self._taken.items() if e >= now}
        if int(expiry) < now or nonce in self._taken:
            return False
        self._taken[nonce] = int(expiry)
        return True

    def _sign(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()


def oauth_settings_of(settings: Settings, installations: StoreInstallations) -> AsyncOAuthSettings:
    """`oauth_settings` from the bot's settings (``SLACK_CLIENT_ID``...)."""
    secret, state = settings.slack_client_secret, settings.slack_state_secret
    client_id = settings.slack_client_id
    if client_id is None or secret is None or state is None:  # Settings.problems says so first
        raise ValueError("OAuth needs SLACK_CLIENT_ID, SLACK_CLIENT_SECRET and SLACK_STATE_SECRET")
    return oauth_settings(
        client_id=client_id,
        client_secret=secret.get_secret_value(),
        state_secret=state.get_secret_value(),
        installations=installations,
        redirect_uri=settings.slack_redirect_uri,
        authorization_url=settings.slack_authorize_url,
    )


def oauth_settings(
    *,
    client_id: str,
    client_secret: str,
    state_secret: str,
    installations: StoreInstallations,
    redirect_uri: str | None = None,
    authorization_url: str | None = None,
) -> AsyncOAuthSettings:
    """Bolt's OAuth settings: bot scopes only, tokens kept in the bot's database."""
    return AsyncOAuthSettings(
        client_id=client_id,
        client_secret=client_secret,
        scopes=list(BOT_SCOPES),
        redirect_uri=redirect_uri,
        authorization_url=authorization_url,
        installation_store=installations,
        installation_store_bot_only=True,
        state_store=SignedStates(state_secret),
        state_expiration_seconds=STATE_SECONDS,
    )
