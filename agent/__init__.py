"""The durable turn engine: a turn is a checkpointed, replayable process.

Nothing here knows Slack. The engine depends on three seams only
(`SessionStore`, `EventSink`, `Model`); the SQLite store, the memory store
and the scripted model are implementations of them.
"""

from agent._memory_store import MemoryStore
from agent._sqlite_store import SQLiteStore
from agent.definition import Agent
from agent.errors import (
    AgentError,
    ConfigError,
    FatalToolError,
    ModelError,
    RuntimeClosedError,
    StoreError,
    ToolError,
    TurnCancelledError,
    TurnError,
    TurnFailedError,
    TurnSuspendedError,
    UnknownTurnError,
)
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
from agent.ports import EventSink, Model, SessionKey, SessionStore, StoreHandle
from agent.runtime import AgentRuntime
from agent.session import AgentSession
from agent.store import open_store
from agent.tools import Tool, ToolContext, tool
from agent.turns import Cancelled, Completed, Failed, Suspended, TurnInput, TurnRecord, TurnResult

__all__ = [
    "ActionCompleted",
    "ActionRequested",
    "Agent",
    "AgentError",
    "AgentRuntime",
    "AgentSession",
    "AssistantMessage",
    "Cancelled",
    "Completed",
    "ConfigError",
    "EventSink",
    "Failed",
    "FatalToolError",
    "InputRequested",
    "MemoryStore",
    "Message",
    "MessageCompleted",
    "MessageDelta",
    "Model",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "ReasoningDelta",
    "RuntimeClosedError",
    "SQLiteStore",
    "SessionKey",
    "SessionStore",
    "StoreError",
    "StoreHandle",
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
    "TriggerMessage",
    "TurnCancelled",
    "TurnCancelledError",
    "TurnCompleted",
    "TurnError",
    "TurnEvent",
    "TurnFailed",
    "TurnFailedError",
    "TurnInput",
    "TurnRecord",
    "TurnResult",
    "TurnStarted",
    "TurnSuspendedError",
    "UnknownTurnError",
    "Usage",
    "UserMessage",
    "open_store",
    "tool",
]
