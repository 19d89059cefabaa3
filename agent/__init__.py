"""The durable turn engine: a turn is a checkpointed, replayable process.

Nothing here knows Slack. The engine depends on three seams only
(`SessionStore`, `EventSink`, `Model`); the SQLite store, the memory store,
Claude (`AnthropicModel`) and the scripted model are implementations of them.
"""

from typing import TYPE_CHECKING, Any

from agent._anthropic_rules import EFFORTS, Effort
from agent._anthropic_settings import DEFAULT_MODEL, AnthropicSettings
from agent._memory_store import MemoryStore
from agent._sqlite_store import SQLiteStore
from agent.definition import Agent, ModelRetry
from agent.errors import (
    AgentError,
    AuthorizeAnswerError,
    ConfigError,
    ConflictError,
    FatalToolError,
    InvalidAnswerError,
    LeaseLostError,
    ModelError,
    ResumeAuthorizationError,
    ResumeConflictError,
    RuntimeClosedError,
    SessionSuspendedError,
    StoreError,
    ToolError,
    TurnCancelledError,
    TurnError,
    TurnFailedError,
    TurnSuspendedError,
    UnknownTurnError,
)
from agent.event_log import DEFAULT_RETENTION, EventLog, LogEntry, LogGap
from agent.events import (
    ActionCompleted,
    ActionRequested,
    InputRequested,
    MessageCompleted,
    MessageDelta,
    ReasoningDelta,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
    TurnStarted,
)
from agent.hitl import (
    EXPIRED,
    AnswerCheck,
    Grant,
    InboundEvent,
    InputRequest,
    InputRequired,
    PolicyAnswerer,
    UserAnswerer,
    grant_answer,
)
from agent.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolMessage,
    TriggerMessage,
    Usage,
    UserMessage,
)
from agent.model import ModelReply, ModelRequest, TextDelta, ThinkingDelta, ToolSpec
from agent.policy import SurfacePolicy, TurnPolicy, resolve_policy, warn_unmounted_surfaces
from agent.ports import EventSink, Model, SessionKey, SessionStore, StoreHandle
from agent.proactive import Channel, ChecksTargets, Trigger, receive
from agent.runtime import AgentRuntime
from agent.session import AgentSession
from agent.store import open_store
from agent.tools import Tool, ToolContext, tool
from agent.turns import Cancelled, Completed, Failed, Suspended, TurnInput, TurnRecord, TurnResult

if TYPE_CHECKING:
    from agent._anthropic import AnthropicModel

_LOADED_ON_USE = frozenset({"AnthropicModel"})


def __getattr__(name: str) -> Any:
    # the SDK takes a second to import: a process that never calls Claude
    # (a test's child, the offline demo) should not pay for it
    if name in _LOADED_ON_USE:
        from agent import _anthropic

        return getattr(_anthropic, name)
    raise AttributeError(f"module 'agent' has no attribute {name!r}")


__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_RETENTION",
    "EFFORTS",
    "EXPIRED",
    "ActionCompleted",
    "ActionRequested",
    "Agent",
    "AgentError",
    "AgentRuntime",
    "AgentSession",
    "AnswerCheck",
    "AnthropicModel",
    "AnthropicSettings",
    "AssistantMessage",
    "AuthorizeAnswerError",
    "Cancelled",
    "Channel",
    "ChecksTargets",
    "Completed",
    "ConfigError",
    "ConflictError",
    "Effort",
    "EventLog",
    "EventSink",
    "Failed",
    "FatalToolError",
    "Grant",
    "InboundEvent",
    "InputRequest",
    "InputRequested",
    "InputRequired",
    "InvalidAnswerError",
    "LeaseLostError",
    "LogEntry",
    "LogGap",
    "MemoryStore",
    "Message",
    "MessageCompleted",
    "MessageDelta",
    "Model",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "ModelRetry",
    "PolicyAnswerer",
    "ReasoningDelta",
    "ResumeAuthorizationError",
    "ResumeConflictError",
    "RuntimeClosedError",
    "SQLiteStore",
    "SessionKey",
    "SessionStore",
    "SessionSuspendedError",
    "StoreError",
    "StoreHandle",
    "SurfacePolicy",
    "Suspended",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolMessage",
    "ToolSpec",
    "Trigger",
    "TriggerMessage",
    "TurnCancelled",
    "TurnCancelledError",
    "TurnCompleted",
    "TurnError",
    "TurnEvent",
    "TurnFailed",
    "TurnFailedError",
    "TurnInput",
    "TurnPolicy",
    "TurnRecord",
    "TurnResult",
    "TurnStarted",
    "TurnSuspendedError",
    "UnknownTurnError",
    "Usage",
    "UserAnswerer",
    "UserMessage",
    "grant_answer",
    "open_store",
    "receive",
    "resolve_policy",
    "tool",
    "warn_unmounted_surfaces",
]
