"""Settings from the environment (and a ``.env`` file)."""

from __future__ import annotations

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Everything the bot reads from its environment. Secrets stay `SecretStr`."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    anthropic_api_key: SecretStr | None = None
    database_url: str = "sqlite:///data/bot.db"

    @property
    def has_slack(self) -> bool:
        """Whether any Slack credential is set."""
        return any((self.slack_bot_token, self.slack_signing_secret, self.slack_app_token))
