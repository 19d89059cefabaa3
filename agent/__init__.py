"""The durable turn engine: a turn is a checkpointed, replayable process.

Nothing here knows Slack. The engine depends on three seams only
(`SessionStore`, `EventSink`, `Model`); the SQLite store, the memory store,
Claude (`AnthropicModel`) and the scripted model are implementations of them.
Import what you need from this package: its submodules are laid out by layer
and may move.

Layout, from the bottom up (each layer imports only those below it)::

    _json, errors   JSON values and the error tree
    core/           pure values and rules: transcript, model exchange, events,
                    requests for input, policies, turn records, stored rows
    ports           the seams, as Protocols
    definition/     what an agent is: Agent, tools, how its policies resolve
    engine/         runs turns: runtime, sessions, the turn loop, leases, event log
    stores/         SessionStore implementations (memory, SQLite); never the engine
    models/         Model implementations (Claude); never the engine

Glossary:
    session
        One conversation of one agent, addressed by `SessionKey` (agent name,
        session id). Its turns run one at a time, in the order they were admitted.
    turn
        One input admitted to a session and everything the agent does to answer
        it: model calls and tool calls, each a *step*.
    step
        A unit of work whose result is checkpointed (committed with the
        transcript message it produced) so a replay skips it.
    replay
        Running a turn again from its checkpoints after a crash or an answer:
        committed steps are read back, not redone.
    delegation
        A call hands a task to another mounted agent (``ctx.delegate``, or a tool
        made by `delegate_tool`): the *child* is a turn of its own session
        (``<parent session>/<call id>``), recorded on the call, its events shown
        to the parent's watchers, its requests waited on by the parent too.
    suspended
        The state of a turn waiting for a person. A tool asked with
        ``ctx.request_input`` (the `InputRequired` signal); the turn's status is
        ``"suspended"``, its result is `Suspended`, `AgentSession.suspended()`
        returns it and `AgentSession.pending()` the open `InputRequest`. An
        answer, given with ``resume``, or an expiry settles the request (see
        `StoredAnswer`).
    cancel, replace, reset
        A cancel stops a turn at its next checkpoint boundary; ``replace`` cancels
        a session's unfinished turns in favour of a new one; a reset archives the
        session's history under its *generation* and starts it fresh.
    lease
        The right, held by one process at a time, to write a session; every
        write is fenced by it.
    surface policy
        What an operator declares per source (``slack``) and per place (a
        channel): instructions and denied tools, fixed on the turn as its
        `TurnPolicy` when it is admitted.
"""

from typing import TYPE_CHECKING, Any

from agent._json import JsonValue
from agent.core.delegation import ParentLink
from agent.core.events import (
    ActionCompleted,
    ActionProgress,
    ActionRequested,
    InputRequested,
    MessageCompleted,
    MessageDelta,
    ReasoningDelta,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
    TurnInterrupted,
    TurnStarted,
    TurnSteered,
    is_terminal,
)
from agent.core.feedback import Feedback, Rating
from agent.core.hitl import (
    EXPIRED,
    AnswerCheck,
    ChildRequest,
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
    Attachment,
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
from agent.core.steering import Steered, Steering
from agent.core.turns import (
    INTERRUPT_REASONS,
    Cancelled,
    Completed,
    Failed,
    Interrupted,
    Suspended,
    TurnInput,
    TurnRecord,
    TurnResult,
    WaitTimedOut,
)
from agent.definition.agent import Agent, RetryPolicy
from agent.definition.compacting import Compacting
from agent.definition.delegating import delegate_tool
from agent.definition.output import OUTPUT_TOOL
from agent.definition.policies import resolve_policy, warn_unmounted_surfaces
from agent.definition.tools import Tool, ToolContext, tool
from agent.engine.event_log import DEFAULT_RETENTION, EventLog, LogEntry, LogGap
from agent.engine.feedback import rate_turn
from agent.engine.grants import grant_answer
from agent.engine.holds import HeldTurn, drop_held, held_turns, retry_held
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
    ReplayIntegrityError,
    ResumeAuthorizationError,
    ResumeConflictError,
    RuntimeClosedError,
    SessionSuspendedError,
    SteerRefusedError,
    StoreError,
    ToolError,
    TurnCancelledError,
    TurnError,
    TurnFailedError,
    TurnInterruptedError,
    TurnSuspendedError,
    UnknownTurnError,
    is_replay_integrity_error,
)
from agent.models.anthropic.rules import EFFORTS, Effort
from agent.models.anthropic.settings import DEFAULT_MODEL, AnthropicSettings
from agent.ports import EventSink, InboxWakeups, Model, SessionStore, StoreHandle
from agent.stores import database_path, describe_database, open_store
from agent.stores._memory import MemoryStore
from agent.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from agent.models.anthropic._model import AnthropicModel
    from agent.stores.postgres import PostgresStore


def __getattr__(name: str) -> Any:
    # the SDK takes a second to import: a process that never calls Claude
    # (a test's child, the offline demo) should not pay for it; nor psycopg one
    # that keeps its sessions in SQLite
    if name == "AnthropicModel":
        from agent.models.anthropic import _model

        return _model.AnthropicModel
    if name == "PostgresStore":
        from agent.stores import postgres

        return postgres.PostgresStore
    raise AttributeError(f"module 'agent' has no attribute {name!r}")


__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_RETENTION",
    "EFFORTS",
    "EXPIRED",
    "INTERRUPT_REASONS",
    "OUTPUT_TOOL",
    "ActionCompleted",
    "ActionProgress",
    "ActionRequested",
    "Agent",
    "AgentError",
    "AgentRuntime",
    "AgentSession",
    "AnswerCheck",
    "AnthropicModel",
    "AnthropicSettings",
    "AssistantMessage",
    "Attachment",
    "AuthorizeAnswerError",
    "Cancelled",
    "Channel",
    "ChecksTargets",
    "ChildRequest",
    "Compacting",
    "Completed",
    "ConfigError",
    "ConflictError",
    "Effort",
    "EventLog",
    "EventSink",
    "Failed",
    "FatalToolError",
    "Feedback",
    "Grant",
    "HeldTurn",
    "InboundEvent",
    "InboxWakeups",
    "InputRequest",
    "InputRequested",
    "InputRequired",
    "Interrupted",
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
    "ParentLink",
    "PolicyAnswerer",
    "PostgresStore",
    "Rating",
    "ReasoningDelta",
    "ReplayIntegrityError",
    "ResumeAuthorizationError",
    "ResumeConflictError",
    "RetryPolicy",
    "RuntimeClosedError",
    "SQLiteStore",
    "SessionKey",
    "SessionStore",
    "SessionSuspendedError",
    "SteerRefusedError",
    "Steered",
    "Steering",
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
    "TurnInterrupted",
    "TurnInterruptedError",
    "TurnPolicy",
    "TurnRecord",
    "TurnResult",
    "TurnStarted",
    "TurnSteered",
    "TurnSuspendedError",
    "UnknownTurnError",
    "Usage",
    "UserAnswerer",
    "UserMessage",
    "WaitTimedOut",
    "database_path",
    "delegate_tool",
    "describe_database",
    "drop_held",
    "grant_answer",
    "held_turns",
    "is_replay_integrity_error",
    "is_terminal",
    "open_store",
    "rate_turn",
    "receive",
    "resolve_policy",
    "retry_held",
    "tool",
    "warn_unmounted_surfaces",
]
