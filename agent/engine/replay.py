"""A turn's committed history, folded back into the events its run emitted.

Used to replay a turn to a subscriber who arrives late. Live deltas and
``turn.started`` are not folded (they were never stored).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent.core.events import (
    ActionCompleted,
    ActionRequested,
    InputRequested,
    MessageCompleted,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
    TurnInterrupted,
    TurnSteered,
)
from agent.core.messages import AssistantMessage, ToolCall, ToolMessage, Usage, UserMessage
from agent.core.records import SessionKey, StoredSession
from agent.core.turns import (
    Cancelled,
    Completed,
    Failed,
    Interrupted,
    Suspended,
    TurnRecord,
)

__all__ = ["fold_turn"]


def fold_turn(key: SessionKey, state: StoredSession, record: TurnRecord) -> Iterator[TurnEvent]:
    """The committed history of a turn, as the events its run emitted."""
    seq = 0
    base: dict[str, Any] = {
        "agent": key.agent,
        "session": key.session_id,
        "turn_id": record.turn_id,
    }

    def next_seq() -> int:
        nonlocal seq
        seq += 1
        return seq

    calls: dict[str, ToolCall] = {}
    start = record.opening_index if record.opening_index is not None else len(state.transcript)
    for index in range(start, len(state.transcript)):
        message = state.transcript[index]
        if message.turn_id != record.turn_id:
            break
        if isinstance(message, UserMessage) and message.steer:
            yield TurnSteered(
                **base,
                seq=next_seq(),
                steer_id=message.steer,
                text=message.text,
                by=message.user,
                index=index,
            )
        elif isinstance(message, AssistantMessage):
            calls.update((c.id, c) for c in message.tool_calls)
            if message.text:
                yield MessageCompleted(**base, seq=next_seq(), text=message.text, index=index)
        elif isinstance(message, ToolMessage):
            call = calls.get(message.call_id)
            yield ActionRequested(
                **base,
                seq=next_seq(),
                call_id=message.call_id,
                name=message.name,
                input=call.input if call else {},
            )
            error = message.result.get("error") if message.is_error else None
            yield ActionCompleted(
                **base,
                seq=next_seq(),
                call_id=message.call_id,
                name=message.name,
                result=message.result,
                error=error,
            )
    ending = None if record.is_unfinished else record.result
    if isinstance(ending, Completed):
        yield TurnCompleted(
            **base,
            seq=next_seq(),
            text=ending.text,
            usage=ending.usage or Usage(),
            output=ending.output,
        )
    elif isinstance(ending, Failed):
        yield TurnFailed(
            **base, seq=next_seq(), error=ending.error, phase=ending.phase, step=ending.step
        )
    elif isinstance(ending, Cancelled):
        yield TurnCancelled(**base, seq=next_seq(), reason=ending.reason)
    elif isinstance(ending, Interrupted):
        yield TurnInterrupted(**base, seq=next_seq(), reason=ending.reason, detail=ending.detail)
    elif isinstance(ending, Suspended):
        # the calls that asked have no result yet, but their run showed them before
        for asking in ending.requests:
            waiting = calls.get(asking.call_id)
            if waiting is not None:
                yield ActionRequested(
                    **base,
                    seq=next_seq(),
                    call_id=waiting.id,
                    name=waiting.name,
                    input=waiting.input,
                )
        others = [other.as_dict() for other in ending.others]
        yield InputRequested(
            **base, seq=next_seq(), request=ending.request.as_dict(), others=others
        )
