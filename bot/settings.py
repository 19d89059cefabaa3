"""Settings from the environment (and a ``.env`` file)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent import DEFAULT_MODEL, AnthropicSettings, ConfigError, Effort, database_path

__all__ = ["Settings", "load_settings"]

SLACK_API_URL = "https://slack.com/api/"
MIN_TOKEN_LENGTH = 24
PRINCIPAL = re.compile(r"[A-Za-z0-9._@-]{1,64}")


class Settings(BaseSettings):
    """Everything the bot reads from its environment. Secrets stay `SecretStr`."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_api_url: str = SLACK_API_URL
    """Base URL of Slack's Web API; tests point it at a local fake."""
    slack_client_id: str | None = None
    """With the client secret and the state secret: install in many workspaces (OAuth)."""
    slack_client_secret: SecretStr | None = None
    slack_state_secret: SecretStr | None = None
    """Signs the OAuth ``state``: any long random string, the same on every replica."""
    slack_redirect_uri: str | None = None
    """The OAuth redirect URL, when the app lists more than one (``.../slack/oauth_redirect``)."""
    slack_authorize_url: str | None = None
    """Where ``/slack/install`` sends a person; unset, Slack's own. Tests point it at a fake."""
    replace_in_flight: bool = True
    """A newer message in a thread supersedes the thread's unfinished reply."""
    port: int = 3000
    """Where ``POST /slack/events`` (HTTP mode) and ``GET /healthz`` (every mode) are served."""
    database_url: str = "sqlite:///data/bot.db"
    lease_seconds: float = 30.0
    """How long a session stays a process's to write unless renewed: a replica that
    froze (not one that died, which is seen at once) loses its sessions after it."""
    api_tokens: SecretStr | None = None
    """A JSON object of bearer token to principal id; unset, the API serves loopback only."""
    event_log_retention_hours: float = 168.0
    """How long the API's event log keeps each event for clients that reconnect."""
    bot_config: Path | None = None
    """A TOML file of channel policies and schedules."""
    history_retention_days: float | None = None
    """How long an ended turn's text is kept; then it is deleted and its identity,
    status, timestamps and usage stay. Unset: kept for good."""
    compact_keep_turns: int | None = None
    """Keep this many turns of a thread word for word and summarise the older ones, in
    batches of as many. Unset: every turn stays live."""

    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    """Read by the SDK too; set here so a ``.env`` file works as well as the environment."""
    anthropic_model: str = DEFAULT_MODEL
    anthropic_max_tokens: int = 16_000
    anthropic_thinking: bool | None = None
    """Unset: the least thinking the model offers (off where it can be turned off)."""
    anthropic_thinking_budget: int | None = None
    """Tokens of thinking per reply, on the models that still take a budget; unset lets
    the model decide (adaptive thinking)."""
    anthropic_effort: Effort | None = None
    """``low`` to ``max``: how much the model thinks and writes; unset is the API's default."""
    anthropic_cache_ttl: Literal["5m", "1h"] = "5m"
    anthropic_context_budget: int | None = 150_000
    anthropic_read_timeout: float = 60.0
    anthropic_step_timeout: float = 600.0
    anthropic_max_retries: int = 2

    @field_validator(
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "slack_client_id",
        "slack_client_secret",
        "slack_state_secret",
        "anthropic_api_key",
        "api_tokens",
        "anthropic_thinking",
        "anthropic_thinking_budget",
        "anthropic_effort",
        mode="before",
    )
    @classmethod
    def _unset_when_blank(cls, value: object) -> object:
        # a secret read from a file often ends in a newline; a blank one is no secret
        if isinstance(value, str):
            value = value.strip()
            return value or None
        return value

    @field_validator("anthropic_model", mode="before")
    @classmethod
    def _default_model_when_blank(cls, value: object) -> object:
        # ANTHROPIC_MODEL= in a .env template means "not chosen", as for the secrets
        if isinstance(value, str) and not value.strip():
            return DEFAULT_MODEL
        return value.strip() if isinstance(value, str) else value

    def problems(self) -> list[str]:
        """Every reason the bot cannot start with these settings, each naming its setting.

        Messages name settings, never their values when they are secret.
        """
        found: list[str] = []
        try:
            database_path(self.database_url)
        except ConfigError as exc:
            found.append(str(exc))
        try:
            self.anthropic()
        except ConfigError as exc:
            found.append(str(exc))
        found += self._slack_problems()
        if not 0 < self.port < 65536:
            found.append(f"PORT must be a TCP port (1-65535), got {self.port}")
        parts = urlsplit(self.slack_api_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            found.append(
                f"SLACK_API_URL must be an http(s) URL such as {SLACK_API_URL}, "
                f"got {self.slack_api_url!r}"
            )
        if self.bot_config is not None:
            found += _config_file_problems(self.bot_config)
        try:
            self.api_principals()
        except ConfigError as exc:
            found.append(str(exc))
        if not self.lease_seconds >= 1:
            found.append("LEASE_SECONDS must be at least 1 second")
        if not self.event_log_retention_hours > 0:
            found.append("EVENT_LOG_RETENTION_HOURS must be a positive number of hours")
        if self.history_retention_days is not None and not self.history_retention_days > 0:
            found.append("HISTORY_RETENTION_DAYS must be a positive number of days")
        if self.compact_keep_turns is not None and self.compact_keep_turns < 1:
            found.append("COMPACT_KEEP_TURNS must be 1 or more")
        return found

    def api_principals(self) -> dict[str, str]:
        """Who each API bearer token speaks for; empty when API_TOKENS is unset.

        Raises:
            ConfigError: API_TOKENS is not a JSON object of long tokens to principal ids
                (the message never quotes a token).
        """
        if self.api_tokens is None:
            return {}
        try:
            parsed = json.loads(self.api_tokens.get_secret_value())
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or not parsed:
            raise ConfigError(
                "API_TOKENS must be a JSON object of bearer token to principal id, such as "
                '{"<a long random token>": "ana"}'
            )
        for number, (token, principal) in enumerate(parsed.items(), start=1):
            if not isinstance(principal, str) or not PRINCIPAL.fullmatch(principal):
                raise ConfigError(
                    f"API_TOKENS: the principal of token {number} must be 1-64 letters, "
                    "digits or . _ @ -"
                )
            if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
                # The message names no principal: if token and principal were swapped in the
                # JSON, naming the principal would print the token.
                raise ConfigError(
                    f"API_TOKENS: token {number} must be at least "
                    f"{MIN_TOKEN_LENGTH} characters with no spaces (python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))' makes one)"
                )
        return dict(parsed)

    @property
    def installs_by_oauth(self) -> bool:
        """Whether the app is installed in many workspaces through OAuth (not one bot token)."""
        return self.slack_client_id is not None or self.slack_client_secret is not None

    def _oauth_problems(self) -> list[str]:
        found = []
        if self.slack_bot_token is not None:
            found.append(
                "set SLACK_BOT_TOKEN (one workspace) or SLACK_CLIENT_ID and "
                "SLACK_CLIENT_SECRET (installs in many, through OAuth), not both"
            )
        for name, value in (
            ("SLACK_CLIENT_ID", self.slack_client_id),
            ("SLACK_CLIENT_SECRET", self.slack_client_secret),
            ("SLACK_STATE_SECRET", self.slack_state_secret),
        ):
            if value is None:
                found.append(f"{name} is needed to install through OAuth (Basic Information)")
        state = self.slack_state_secret
        if state is not None and len(state.get_secret_value()) < MIN_TOKEN_LENGTH:
            found.append(
                f"SLACK_STATE_SECRET must be at least {MIN_TOKEN_LENGTH} characters "
                "(python -c 'import secrets; print(secrets.token_urlsafe(32))' makes one)"
            )
        if self.slack_signing_secret is None:
            found.append(
                "SLACK_SIGNING_SECRET is needed to install through OAuth: Slack sends the "
                "installs and the events over HTTP"
            )
        if self.slack_app_token is not None:
            found.append(
                "SLACK_APP_TOKEN (Socket Mode) and OAuth installs do not go together here: "
                "people install over HTTP, so the events come that way too; unset it"
            )
        return found

    def _slack_problems(self) -> list[str]:
        if self.installs_by_oauth:
            return self._oauth_problems()
        bot, signing, app = self.slack_bot_token, self.slack_signing_secret, self.slack_app_token
        if not (bot or signing or app):
            return []
        found = []
        if bot is None:
            found.append(
                "SLACK_BOT_TOKEN is missing: the bot cannot post without it "
                "(OAuth & Permissions, xoxb-...)"
            )
        elif not bot.get_secret_value().startswith("xoxb-"):
            found.append("SLACK_BOT_TOKEN must be a bot token (it starts with xoxb-)")
        if signing is None and app is None:
            found.append(
                "SLACK_SIGNING_SECRET (HTTP events) or SLACK_APP_TOKEN (Socket Mode) is "
                "needed beside SLACK_BOT_TOKEN: without one, no event can be verified"
            )
        if app is not None and not app.get_secret_value().startswith("xapp-"):
            found.append("SLACK_APP_TOKEN must be an app-level token (it starts with xapp-)")
        return found

    @property
    def has_slack(self) -> bool:
        """Whether any Slack credential is set."""
        return self.installs_by_oauth or any(
            (self.slack_bot_token, self.slack_signing_secret, self.slack_app_token)
        )

    def anthropic(self) -> AnthropicSettings:
        """The settings of the Claude model, checked.

        Raises:
            ConfigError: A setting the API would refuse.
        """
        settings = AnthropicSettings(
            model=self.anthropic_model,
            api_key=self.anthropic_api_key.get_secret_value() if self.anthropic_api_key else None,
            base_url=self.anthropic_base_url,
            max_tokens=self.anthropic_max_tokens,
            thinking=self.anthropic_thinking,
            thinking_budget=self.anthropic_thinking_budget,
            effort=self.anthropic_effort,
            cache_ttl=self.anthropic_cache_ttl,
            context_budget=self.anthropic_context_budget,
            read_timeout=self.anthropic_read_timeout,
            step_timeout=self.anthropic_step_timeout,
            max_retries=self.anthropic_max_retries,
        )
        settings.check()
        return settings


def _config_file_problems(path: Path) -> list[str]:
    from bot.config_file import load_bot_config  # pydantic models of the file: only when named

    try:
        load_bot_config(path)
    except ConfigError as exc:
        return str(exc).splitlines()
    return []


def load_settings() -> Settings:
    """Read the settings, and check them all at once.

    Raises:
        ConfigError: Every problem found, one per line, each naming its setting.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        # pydantic's own text quotes the input: name the setting and what is wrong only
        lines = [f"{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("\n".join(lines)) from None
    problems = settings.problems()
    if problems:
        raise ConfigError("\n".join(problems))
    return settings
