"""Settings from the environment (and a ``.env`` file)."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent import DEFAULT_MODEL, AnthropicSettings

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Everything the bot reads from its environment. Secrets stay `SecretStr`."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    database_url: str = "sqlite:///data/bot.db"

    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    """Read by the SDK too; set here so a ``.env`` file works as well as the environment."""
    anthropic_model: str = DEFAULT_MODEL
    anthropic_max_tokens: int = 16_000
    anthropic_thinking: bool = False
    anthropic_thinking_budget: int | None = None
    """Tokens of thinking per reply; unset lets the model decide (adaptive thinking)."""
    anthropic_cache_ttl: Literal["5m", "1h"] = "5m"
    anthropic_context_budget: int | None = 150_000
    anthropic_read_timeout: float = 60.0
    anthropic_step_timeout: float = 600.0
    anthropic_max_retries: int = 2

    @field_validator(
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "anthropic_api_key",
        mode="before",
    )
    @classmethod
    def _unset_when_blank(cls, value: object) -> object:
        # a secret read from a file often ends in a newline; a blank one is no secret
        if isinstance(value, str):
            value = value.strip()
            return value or None
        return value

    @property
    def has_slack(self) -> bool:
        """Whether any Slack credential is set."""
        return any((self.slack_bot_token, self.slack_signing_secret, self.slack_app_token))

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
            cache_ttl=self.anthropic_cache_ttl,
            context_budget=self.anthropic_context_budget,
            read_timeout=self.anthropic_read_timeout,
            step_timeout=self.anthropic_step_timeout,
            max_retries=self.anthropic_max_retries,
        )
        settings.check()
        return settings
