"""The engine's shape: what it may import, and what it exports."""

from __future__ import annotations

import ast
from pathlib import Path

import agent

AGENT_DIR = Path(agent.__file__).parent
FORBIDDEN = ("slack_bolt", "slack_sdk", "bot")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_agent_imports_nothing_of_slack_or_the_bot():
    offenders = {
        str(path.relative_to(AGENT_DIR)): sorted(imported_modules(path) & set(FORBIDDEN))
        for path in AGENT_DIR.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_public_names_are_pinned():
    assert sorted(agent.__all__) == sorted(
        [
            "DEFAULT_MODEL", "DEFAULT_RETENTION", "EventLog", "LogEntry", "LogGap",
            "EFFORTS", "Effort",
            "ActionCompleted", "ActionRequested", "Agent", "AgentError",
            "AgentRuntime", "AnthropicModel", "AnthropicSettings",
            "AgentSession", "AssistantMessage", "Cancelled", "Completed", "ConfigError",
            "Attachment",
            "Feedback", "Rating", "rate_turn",
            "EventSink", "Failed", "FatalToolError", "InputRequested", "LeaseLostError",
                "MemoryStore", "Message",
            "MessageCompleted", "MessageDelta", "Model", "ModelError", "ModelReply",
            "ModelRequest", "RetryPolicy", "ReasoningDelta", "RuntimeClosedError", "SQLiteStore",
            "SessionKey", "SessionStore",
            "StoreError", "StoreHandle", "Suspended", "TextBlock", "TextDelta", "ThinkingBlock",
            "ThinkingDelta", "Tool", "ToolCall", "ToolContext", "ToolError", "ToolMessage",
            "ToolSpec", "TriggerMessage", "TurnCancelled", "TurnCancelledError", "TurnCompleted",
            "TurnError", "TurnEvent", "TurnFailed", "TurnFailedError", "TurnInput", "TurnRecord",
            "TurnResult", "TurnStarted", "TurnSuspendedError", "UnknownTurnError", "Usage",
            "UserMessage", "open_store", "tool",
            "AuthorizeAnswerError", "ConflictError", "InvalidAnswerError",
            "ResumeAuthorizationError", "ResumeConflictError", "SessionSuspendedError", "EXPIRED",
            "AnswerCheck", "Grant", "Interrupted", "TurnInterrupted",
            "TurnInterruptedError", "HeldTurn", "drop_held", "held_turns", "retry_held",
            "InboundEvent", "InputRequest", "InputRequired", "PolicyAnswerer", "UserAnswerer",
            "grant_answer",
            "Channel", "ChecksTargets", "Trigger", "receive",
            "SurfacePolicy", "TurnPolicy", "resolve_policy", "warn_unmounted_surfaces",
            "JsonValue", "StoredAnswer", "database_path", "is_terminal",
            "PostgresStore", "describe_database", "InboxWakeups",
            "INTERRUPT_REASONS", "WaitTimedOut", "ActionProgress", "OUTPUT_TOOL", "Compacting",
            "SteerRefusedError", "Steered", "Steering", "TurnSteered",
            "ReplayIntegrityError", "is_replay_integrity_error",
            "ChildRequest", "ParentLink", "delegate_tool",
        ]
    )  # fmt: skip
    for name in agent.__all__:
        assert hasattr(agent, name), name
