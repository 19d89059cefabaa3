"""Which agent the bot runs: Claude when there is a key, the offline one when not."""

from __future__ import annotations

from agent import Agent
from bot.config import Settings
from bot.offline import offline_agent, remember

__all__ = ["AGENT_NAME", "INSTRUCTIONS", "build_agent"]

AGENT_NAME = "bot"

INSTRUCTIONS = """\
You are a helpful assistant working inside a team's chat. Answer briefly and \
plainly. When a person asks you to remember something, use the remember tool.\
"""


def build_agent(settings: Settings) -> Agent:
    """Claude with the bot's tools when ``ANTHROPIC_API_KEY`` is set, else the offline agent.

    Raises:
        ConfigError: An Anthropic setting the API would refuse.
    """
    if settings.anthropic_api_key is None:
        return offline_agent(AGENT_NAME)
    from agent import AnthropicModel  # the SDK takes a second to import: only when used

    return Agent(
        name=AGENT_NAME,
        model=AnthropicModel(settings.anthropic()),
        instructions=INSTRUCTIONS,
        tools=[remember],
    )
