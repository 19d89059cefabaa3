"""The durable turn engine: a turn is a checkpointed, replayable process.

Nothing here knows Slack. The engine depends on three seams only
(`SessionStore`, `EventSink`, `Model`); the SQLite store, the memory store,
Claude (`AnthropicModel`) and the scripted model are implementations of them.
"""

from typing import TYPE_CHECKING, Any

from agent._json import JsonValue
from agent.core.events import (
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
    is_terminal,
)
from agent.core.hitl import (
    EXPIRED,
    AnswerCheck,
    Grant,
    InboundEvent,
    InputRequest,
    InputRequired,
    PolicyAnswerer,
    StoredAnswer,
    UserAnswerer,
)
from agent.core.messages import (
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
from agent.core.model import ModelReply, ModelRequest, TextDelta, ThinkingDelta, ToolSpec
from agent.core.policy import SurfacePolicy, TurnPolicy
from agent.core.records import SessionKey
from agent.core.turns import (
    Cancelled,
    Completed,
    Failed,
    Suspended,
    TurnInput,
    TurnRecord,
    TurnResult,
)
from agent.definition.agent import Agent, ModelRetry
from agent.definition.policies import resolve_policy, warn_unmounted_surfaces
from agent.definition.tools import Tool, ToolContext, tool
from agent.engine.event_log import DEFAULT_RETENTION, EventLog, LogEntry, LogGap
from agent.engine.grants import grant_answer
from agent.engine.proactive import Channel, ChecksTargets, Trigger, receive
from agent.engine.runtime import AgentRuntime
from agent.engine.session import AgentSession
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
from agent.models.anthropic.rules import EFFORTS, Effort
from agent.models.anthropic.settings import DEFAULT_MODEL, AnthropicSettings
from agent.ports import EventSink, Model, SessionStore, StoreHandle
from agent.stores import database_path, open_store
from agent.stores._memory import MemoryStore
from agent.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from agent.models.anthropic._model import AnthropicModel

_LOADED_ON_USE = frozenset({"AnthropicModel"})


def __getattr__(name: str) -> Any:
    # the SDK takes a second to import: a process that never calls Claude
    # (a test's child, the offline demo) should not pay for it
    if name in _LOADED_ON_USE:
        from agent.models.anthropic import _model

        return getattr(_model, name)
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
    "JsonValue",
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
    "StoredAnswer",
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
    "database_path",
    "grant_answer",
    "is_terminal",
    "open_store",
    "receive",
    "resolve_policy",
    "tool",
    "warn_unmounted_surfaces",
]
