"""manifest.yml against Slack's published manifest schema, and against what the bot does.

The schema is slackapi/manifest-schema's ``schemas/manifest.schema.1.0.0.json`` at
c50cfa8 (MIT, its licence beside it in tests/schemas/): the one Slack publishes for
``_metadata.major_version: 1``. It checks shapes and limits (``agent_view`` takes an
``agent_description`` of at most 300 characters and at most four prompts, each a
``title`` and ``message``); it knows no scope or event names, so the scopes each
event and method needs (from their docs.slack.dev pages) are checked here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from bot.slack.oauth import BOT_SCOPES
from bot.surface_config import DEFAULT_PROMPTS

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tests" / "schemas" / "slack-manifest.schema.1.0.0.json"

EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
    "assistant_thread_started": "assistant:write",
    "assistant_thread_context_changed": "assistant:write",
}
"""The scope each subscribed event needs (docs.slack.dev/reference/events/<event>)."""
METHOD_SCOPES = {
    "assistant.threads.setSuggestedPrompts": "assistant:write",
    "assistant.threads.setStatus": "chat:write",
    "agents.sessions.setStatus": "chat:write",
    "chat.postMessage": "chat:write",
    "chat.startStream": "chat:write",
    "conversations.replies": "channels:history",
    "conversations.info": "channels:read",
    "users.info": "users:read",
    "files.info": "files:read",
    "commands": "commands",
}
"""The scope of each method the bot calls (docs.slack.dev/reference/methods/<method>)."""


def manifest() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "manifest.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def schema_errors(candidate: dict[str, Any]) -> list[str]:
    validator = Draft7Validator(json.loads(SCHEMA.read_text()))
    return sorted(
        f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(candidate)
    )


def test_the_manifest_is_valid_under_slacks_published_schema():
    assert schema_errors(manifest()) == []


@pytest.mark.parametrize(
    ("change", "refused_at"),
    [
        (
            lambda m: m["features"]["agent_view"]["suggested_prompts"].append(
                {"title": "5", "message": "5"}
            ),
            "features/agent_view/suggested_prompts",
        ),
        (
            lambda m: m["features"]["agent_view"].update(agent_description="x" * 301),
            "features/agent_view/agent_description",
        ),
        (
            lambda m: m["features"]["agent_view"].update(assistant_description="old name"),
            "features/agent_view",
        ),
        (
            lambda m: m["settings"]["event_subscriptions"]["bot_events"].append("app_mention"),
            "settings/event_subscriptions/bot_events",
        ),
    ],
    ids=["five-prompts", "long-description", "assistant-view-field", "event-twice"],
)
def test_the_schema_refuses_what_slack_refuses(change: Any, refused_at: str):
    candidate = manifest()
    change(candidate)

    assert any(error.startswith(refused_at) for error in schema_errors(candidate))


def test_the_agent_views_prompts_are_the_ones_the_bot_sets_by_default():
    view = manifest()["features"]["agent_view"]

    assert view["suggested_prompts"] == [p.model_dump() for p in DEFAULT_PROMPTS]


def test_every_event_and_method_the_bot_uses_has_its_scope():
    declared = set(manifest()["oauth_config"]["scopes"]["bot"])
    events = manifest()["settings"]["event_subscriptions"]["bot_events"]

    missing = {e: s for e, s in EVENT_SCOPES.items() if e in events and s not in declared}
    missing |= {m: s for m, s in METHOD_SCOPES.items() if s not in declared}

    assert missing == {}
    assert set(EVENT_SCOPES) <= set(events)  # the agent surface, group DMs, DMs, mentions
    assert "agent_session_stopped" in events  # else Slack shows a Stop nobody can press


def test_an_oauth_install_asks_for_the_scopes_the_manifest_declares():
    assert sorted(manifest()["oauth_config"]["scopes"]["bot"]) == sorted(BOT_SCOPES)
