"""Which agent the bot runs: Claude when there is a key, the offline one when not."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from agent import Agent, Compacting, Model, SurfacePolicy, Tool
from bot.offline import LOCAL_TOOLS, offline_model
from bot.settings import Settings

__all__ = ["AGENT_NAME", "INSTRUCTIONS_FOLDER", "build_agent"]

AGENT_NAME = "bot"

INSTRUCTIONS_FOLDER = Path(__file__).with_name("instructions")
"""The bot's instructions: ``instructions.md``, and ``instructions.slack.md`` for Slack turns."""


def build_agent(
    settings: Settings,
    tools: Sequence[Tool] | None = None,
    surfaces: Mapping[str, SurfacePolicy] | None = None,
) -> Agent:
    """Claude with the bot's tools when ``ANTHROPIC_API_KEY`` is set, else the offline agent.

    Args:
        settings: The bot's settings.
        tools: The agent's tools: the Slack tools when it serves Slack; by default the
            local ones (notes, and an approval to try).
        surfaces: The policy of each source (``BOT_CONFIG``'s ``[surfaces.*]``).

    Raises:
        ConfigError: An Anthropic setting the API would refuse, or a policy naming a
            tool the agent does not have.
    """
    model: Model
    if settings.anthropic_api_key is None:
        model = offline_model()
    else:
        from agent import AnthropicModel  # the SDK takes a second to import: only when used

        model = AnthropicModel(settings.anthropic())
    return Agent.from_folder(
        INSTRUCTIONS_FOLDER,
        name=AGENT_NAME,
        model=model,
        tools=list(tools) if tools is not None else LOCAL_TOOLS,
        surfaces=dict(surfaces or {}),
        history_retention=(
            settings.history_retention_days * 86_400
            if settings.history_retention_days is not None
            else None
        ),
        compacting=(
            Compacting(keep_turns=settings.compact_keep_turns, every=settings.compact_keep_turns)
            if settings.compact_keep_turns is not None
            else None
        ),
    )
