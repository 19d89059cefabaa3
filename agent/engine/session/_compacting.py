"""Compaction's plan and its summary: which turns go, and what stands for them.

The worker plans a compaction when a turn ends (`plan_compaction`), has the
model write the summary in a task of its own (`summarise`), so no turn waits on
it, and commits it between turns. The commit moves only turns that had ended
and messages below the first kept turn, so turns admitted meanwhile are not
touched; the store refuses it if one of its turns is in play again.
"""

from __future__ import annotations

import json

from agent.core.messages import (
    AssistantMessage,
    Message,
    ToolMessage,
    TriggerMessage,
    UserMessage,
)
from agent.core.model import ModelReply, ModelRequest
from agent.core.records import SessionKey, StoredSession
from agent.core.retention import EXPIRED_NOTICE
from agent.core.transcript import Compaction
from agent.definition.agent import Agent
from agent.definition.compacting import Compacting

__all__ = ["SUMMARY_STEP", "plan_compaction", "plan_expiry", "summarise"]

SUMMARY_STEP = "summary"
"""The ``step`` of a summary request, for a model (or a test's script) to tell it apart."""

SUMMARY_INSTRUCTIONS = (
    "You keep the memory of a long conversation between people and an assistant. "
    "Write a summary of the conversation below that lets the assistant carry on "
    "without it: who asked for what, what was decided, done and promised, facts and "
    "names that may matter later, and what is still open. Keep what an earlier "
    "summary says unless the conversation since overrides it. Plain prose or short "
    "lists, no preamble, at most about 400 words."
)


def plan_compaction(state: StoredSession, compacting: Compacting) -> tuple[int, int] | None:
    """The turns (up to a sequence number) and messages (below an index) to compact now.

    None when fewer than ``every`` turns beyond the kept ones have ended, or an old
    one is still in play (suspended, say: it is compacted once it ends).
    """
    turns = sorted(state.turns.values(), key=lambda t: t.seq)
    older, kept = turns[: -compacting.keep_turns], turns[-compacting.keep_turns :]
    if len(older) < compacting.every:
        return None
    if not all(t.is_ended for t in older):
        return None
    openings = [t.opening_index for t in kept if t.opening_index is not None]
    base = min(openings, default=len(state.transcript))
    if base <= state.transcript.base:
        return None
    return older[-1].seq, base


def plan_expiry(state: StoredSession, before: float, at: float) -> Compaction | None:
    """The compaction that moves out, expired, the oldest turns that ended before ``before``.

    Only a run of ended turns from the oldest on: a turn still in play keeps the turns
    after it live. No summary stands for them, only a notice that they expired (an
    earlier summary is of older turns still, so it expires with them). A summary whose
    oldest turn ended before ``before`` gives way to the notice even when no live turn
    is due.
    """
    turns = sorted(state.turns.values(), key=lambda t: t.seq)
    moving = 0
    for record in turns:
        ended_at = record.ended_at if record.is_ended else None
        if ended_at is None or ended_at >= before:
            break
        moving += 1
    summary_expired = state.summary_since is not None and state.summary_since < before
    if not moving and not summary_expired:
        return None
    openings = [t.opening_index for t in turns[moving:] if t.opening_index is not None]
    return Compaction(
        through=turns[moving - 1].seq if moving else state.compacted_through,
        base=min(openings, default=len(state.transcript)),
        summary=EXPIRED_NOTICE,
        generation=state.generation,
        expire_at=at,
    )


async def summarise(
    agent: Agent, key: SessionKey, state: StoredSession, through: int, base: int
) -> Compaction:
    """Have the agent's model summarise what a compaction moves out, with the earlier summary.

    Raises:
        ModelError: The model failed; nothing is compacted this time.
        ValueError: The model's summary was empty.
    """
    compacting = agent.compacting
    assert compacting is not None
    moving = state.transcript[state.transcript.base : base]
    text = _rendered(moving, state.summary, compacting.message_chars)
    request = ModelRequest(
        system=SUMMARY_INSTRUCTIONS,
        messages=[UserMessage(turn_id=f"compaction:{through}", text=text)],
        agent=key.agent,
        session_id=key.session_id,
        turn_id=f"compaction:{through}",
        step=SUMMARY_STEP,
    )
    reply: ModelReply | None = None
    async for event in agent.model.stream(request):
        if isinstance(event, ModelReply):
            reply = event
    summary = reply.text.strip() if reply is not None else ""
    if not summary:
        raise ValueError("the model wrote an empty summary")
    ended = [t.ended_at for t in state.turns.values() if t.seq <= through and t.ended_at]
    since = min([*ended, *([state.summary_since] if state.summary_since else [])], default=None)
    return Compaction(
        through=through, base=base, summary=summary, generation=state.generation, since=since
    )


def _rendered(messages: list[Message], earlier: str | None, limit: int) -> str:
    """The conversation as plain text: a request with no tools cannot carry tool blocks."""
    lines = [f"Earlier summary:\n{earlier}\n"] if earlier else []
    lines.append("The conversation:")
    for message in messages:
        if isinstance(message, UserMessage):
            who = f"Person {message.user}" if message.user else "Person"
            lines.append(f"{who}: {_cut(message.text, limit)}")
        elif isinstance(message, TriggerMessage):
            lines.append(f"Started by {message.by}: {_cut(message.text, limit)}")
        elif isinstance(message, AssistantMessage):
            if message.text:
                lines.append(f"Assistant: {_cut(message.text, limit)}")
            for call in message.tool_calls:
                asked = _cut(json.dumps(call.input, ensure_ascii=False), limit)
                lines.append(f"Assistant called {call.name}: {asked}")
        elif isinstance(message, ToolMessage):
            outcome = "failed" if message.is_error else "returned"
            result = _cut(json.dumps(message.result, ensure_ascii=False), limit)
            lines.append(f"{message.name} {outcome}: {result}")
    return "\n".join(lines)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"
