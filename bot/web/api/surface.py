"""The API as a surface of the agent: what it serves, and how the settings make one.

The API's sessions are the engine's ``http:<id>`` sessions, so no API call can
reach a Slack thread. Its turns run under the agent's ``http`` source policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field

from agent import Agent, AgentRuntime, EventLog, SessionKey, TurnPolicy, resolve_policy
from bot.offline import DEMO_MODEL_NAME
from bot.settings import Settings
from bot.web.auth import ApiAuth

__all__ = ["SESSION_PREFIX", "SOURCE", "Api", "api_for", "is_api_session"]

SOURCE = "http"
SESSION_PREFIX = "http:"


@dataclass(frozen=True, slots=True, kw_only=True)
class Api:
    """What the API serves: one agent's sessions on a runtime, and their event log."""

    runtime: AgentRuntime
    agent: str
    log: EventLog
    auth: ApiAuth
    policy: TurnPolicy
    """What the API's turns run under (the agent's ``http`` source policy)."""
    model: str
    """What answers, as people should read it."""
    offline: bool
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set as the server shuts down: every event stream ends, so none outlives the stop."""


def api_for(
    settings: Settings,
    runtime: AgentRuntime,
    agent: Agent,
    log: EventLog,
    *,
    unavailable: tuple[str, ...] = (),
) -> Api:
    """What the API serves for ``agent`` under these settings.

    Args:
        settings: The bot's settings.
        runtime: Runs the API's turns.
        agent: The agent that answers.
        log: The event log the API's streams read.
        unavailable: Tools of the agent that cannot work in an API turn (they need a
            Slack thread): denied there, so the model is not offered them.
    """
    offline = settings.anthropic_api_key is None
    policy = resolve_policy(agent, SOURCE)
    policy = dataclasses.replace(
        policy, deny_tools=tuple(dict.fromkeys(policy.deny_tools + unavailable))
    )
    return Api(
        runtime=runtime,
        agent=agent.name,
        log=log,
        auth=ApiAuth(settings.api_principals()),
        policy=policy,
        model=DEMO_MODEL_NAME if offline else settings.anthropic_model,
        offline=offline,
    )


def is_api_session(key: SessionKey) -> bool:
    """Whether ``key`` is one of the API's sessions."""
    return key.session_id.startswith(SESSION_PREFIX)
