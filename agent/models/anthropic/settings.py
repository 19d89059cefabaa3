"""How to call Claude: the settings of `AnthropicModel`, kept apart from the SDK.

Reading or checking them does not import the SDK, which takes a second to load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agent.errors import ConfigError
from agent.models.anthropic.rules import Effort, RequestShape, request_shape

__all__ = ["DEFAULT_MODEL", "AnthropicSettings"]

DEFAULT_MODEL = "claude-sonnet-5-5"


@dataclass(frozen=True, slots=True, kw_only=True)
class AnthropicSettings:
    """How to call Claude. Validated when the model is built."""

    model: str = DEFAULT_MODEL
    api_key: str | None = field(default=None, repr=False)
    """Without it the SDK looks in ``ANTHROPIC_API_KEY``. Kept out of ``repr``, so out of logs."""
    base_url: str | None = None
    """Without it the SDK looks in ``ANTHROPIC_BASE_URL``, then uses Anthropic's own."""
    max_tokens: int = 16_000
    thinking: bool | None = None
    """True to think, False not to (refused where the model always thinks); None for the
    least the model offers: off where it can be turned off. Thinking blocks are stored
    and sent back as the API requires."""
    thinking_budget: int | None = None
    """Tokens of thinking per reply (manual thinking, on the models that still have it);
    without it the model decides (adaptive)."""
    effort: Effort | None = None
    """``output_config.effort``: how much the model thinks and writes; None is the API's default."""
    cache_ttl: Literal["5m", "1h"] = "5m"
    context_budget: int | None = 150_000
    """Input tokens a request may hold; past it an older stretch of the thread is left out."""
    read_timeout: float = 60.0
    """Seconds the stream may stay silent (the API pings while it thinks)."""
    step_timeout: float = 600.0
    """Seconds one try of a model step may take in all: counting tokens, sending the
    request, the SDK's own retries and the whole stream."""
    max_retries: int = 2
    """The SDK's own retries of a request the API refused for a passing reason."""
    max_retry_wait: float = 30.0
    """The longest the SDK waits before a retry, whatever ``retry-after`` asks."""

    def shape(self) -> RequestShape:
        """The thinking and effort fields of every request, and what the model would refuse."""
        return request_shape(
            self.model,
            thinking=self.thinking,
            budget=self.thinking_budget,
            effort=self.effort,
            max_tokens=self.max_tokens,
        )

    def check(self) -> None:
        """Refuse settings the API would refuse on every request.

        Raises:
            ConfigError: Naming each problem, and each setting involved.
        """
        problems: list[str] = []
        key = self.api_key
        if key is not None and (not key or any(c.isspace() or not c.isprintable() for c in key)):
            # the SDK would put it in a header as is: it fails there, after retries,
            # as a "connection error" whose cause quotes the key
            problems.append("the API key is empty or holds spaces or line breaks")
        if not self.model or self.model != self.model.strip():
            problems.append(
                f"ANTHROPIC_MODEL={self.model!r} is blank or padded with spaces: name a model "
                f"such as {DEFAULT_MODEL}, or unset it for that one"
            )
        if self.max_tokens < 1:
            problems.append("ANTHROPIC_MAX_TOKENS must be positive")
        if self.thinking_budget is not None and not (
            1024 <= self.thinking_budget < self.max_tokens
        ):
            problems.append(
                "ANTHROPIC_THINKING_BUDGET must be at least 1024 and less than ANTHROPIC_MAX_TOKENS"
            )
        problems += self.shape().problems
        if self.context_budget is not None and self.context_budget < 1_000:
            problems.append("ANTHROPIC_CONTEXT_BUDGET must be at least 1000 tokens")
        if self.read_timeout <= 0 or self.step_timeout <= 0:
            problems.append("ANTHROPIC_READ_TIMEOUT and ANTHROPIC_STEP_TIMEOUT must be positive")
        if problems:
            raise ConfigError("Anthropic settings: " + "; ".join(problems))
