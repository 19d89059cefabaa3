"""Which agent the bot runs: Claude when there is a key, the offline one when not."""

from __future__ import annotations

from collections.abc import Sequence

from agent import Agent, Tool
from bot.config import Settings
from bot.offline import offline_agent, remember

__all__ = ["AGENT_NAME", "INSTRUCTIONS", "SLACK_INSTRUCTIONS", "build_agent"]

AGENT_NAME = "bot"

INSTRUCTIONS = """\
You are a helpful assistant working inside a team's chat. Answer briefly and \
plainly. When a person asks you to remember something, use the remember tool.\
"""


SLACK_INSTRUCTIONS = """\
You are a helpful assistant in a team's Slack workspace, answering in a thread. \
Answer briefly and plainly, in Markdown. Messages you read show people as \
@name (U…): to mention someone, write <@U…> with their id. Use read_thread when \
the thread's earlier messages matter, and read_channel to look at a public \
channel by name (#general) or id. post_message posts to a public channel only \
after a person approves it: say what you will post and where. remember keeps a \
note for this channel and recall reads them back. When a schedule asks for a \
summary, read the channel over the period it names (read_channel with since, \
every page), then write a short summary of what matters, linking each thread \
you mention with the link its message came with.\
"""


def build_agent(settings: Settings, slack_tools: Sequence[Tool] | None = None) -> Agent:
    """Claude with the bot's tools when ``ANTHROPIC_API_KEY`` is set, else the offline agent.

    Args:
        settings: The bot's settings.
        slack_tools: The Slack tools, when the agent serves Slack.

    Raises:
        ConfigError: An Anthropic setting the API would refuse.
    """
    if settings.anthropic_api_key is None:
        return offline_agent(AGENT_NAME)
    from agent import AnthropicModel  # the SDK takes a second to import: only when used

    return Agent(
        name=AGENT_NAME,
        model=AnthropicModel(settings.anthropic()),
        instructions=SLACK_INSTRUCTIONS if slack_tools is not None else INSTRUCTIONS,
        tools=list(slack_tools) if slack_tools is not None else [remember],
    )
