"""The transactions that open and end a turn, and the tool calls a turn still owes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from agent._json import JsonValue
from agent.core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    TriggerMessage,
    UserMessage,
)
from agent.core.records import Commit, StoredMessage, StoredSession, StoredStep
from agent.core.turns import Cancelled, Failed, Interrupted, Suspended, TurnRecord, moved
from agent.engine.turn.patches import PATCHES

__all__ = [
    "CANCELLED_CALL",
    "NOT_RUN_AFTER_FAILURE",
    "closing_result",
    "ending_commit",
    "opening_commit",
    "owed_calls",
    "settled_memo",
    "settled_message",
]

NOT_RUN_AFTER_FAILURE = {"error": "not run: the turn failed before this call"}
"""The result a call gets when the turn failed before the call could run."""
CANCELLED_CALL = {"cancelled": True}
"""The result a call gets when the turn was cancelled before the call could run."""


def closing_result(ended: Cancelled | Interrupted) -> JsonValue:
    """The result each call a turn still owes gets when the turn is stopped as ``ended`` says."""
    if isinstance(ended, Cancelled):
        return CANCELLED_CALL
    return {
        "interrupted": True,
        "error": f"not finished: the turn was interrupted ({ended.detail})",
    }


def opening_commit(record: TurnRecord, index: int) -> tuple[TurnRecord, Commit]:
    """The transaction that opens a turn: its first message, and its record as running."""
    given = record.input
    message: Message
    if given.trigger == "proactive":
        message = TriggerMessage(turn_id=record.turn_id, text=given.text, by=given.by or "unknown")
    else:
        message = UserMessage(
            turn_id=record.turn_id, text=given.text, user=given.user, files=given.files
        )
    # the shape of the loop it opens under: it keeps it through every replay (see patches)
    shaped = dataclasses.replace(record, patches=PATCHES)
    opened = moved(shaped, "running", opening_index=index, runs=1)  # its first run begins
    return opened, Commit(
        messages=(StoredMessage(index, message),), turns=(opened,), status="running"
    )


def owed_calls(transcript: list[Message], turn_id: str) -> tuple[tuple[ToolCall, ...], int]:
    """The calls of the newest assistant message, if it is ``turn_id``'s, still without a result.

    Returns:
        The calls, and the transcript index of the message that made them (-1 if none).
    """
    i = len(transcript) - 1
    live_from = getattr(transcript, "base", 0)  # a compacted session holds nothing below it
    answered: set[str] = set()
    while i >= live_from and isinstance(transcript[i], ToolMessage):
        answered.add(transcript[i].call_id)  # type: ignore[union-attr]
        i -= 1
    last = transcript[i] if i >= live_from else None
    if not isinstance(last, AssistantMessage) or last.turn_id != turn_id:
        return (), -1
    return tuple(c for c in last.tool_calls if c.id not in answered), i


def settled_memo(message: ToolMessage) -> dict[str, JsonValue]:
    """The memo of a call that finished before the calls ahead of it: its result, unplaced."""
    return {"result": message.result, "is_error": message.is_error}


def settled_message(turn_id: str, call: ToolCall, memo: JsonValue) -> ToolMessage | None:
    """The result a `settled_memo` holds, as the call's tool message; None for another memo."""
    if not isinstance(memo, dict) or "result" not in memo:
        return None
    return ToolMessage(
        turn_id=turn_id,
        call_id=call.id,
        name=call.name,
        result=memo["result"],
        is_error=memo.get("is_error") is True,
    )


def ending_commit(
    state: StoredSession,
    record: TurnRecord,
    result: Failed | Cancelled | Interrupted,
    closing: JsonValue,
    *,
    own: Mapping[str, JsonValue] | None = None,
    settled: Mapping[str, JsonValue] | None = None,
) -> Commit:
    """The transaction that ends a turn early: its record, and a result for each owed call.

    Every call the turn still owes gets ``closing`` as its result, so the next model
    call gets a valid transcript (a call with no result is refused by the model's API
    from then on, which would wedge the conversation for good). A call named in
    ``own`` gets its own result instead: it ran, and its outcome is what ended the turn
    (a `FatalToolError`'s message), so later turns show the model what really happened.
    A call in ``settled`` (its `settled_memo`, by call id) finished, and its result was
    committed before the calls ahead of it: that result is placed (its step is stored
    already). By default these are the ones a suspended turn's checkpoint keeps.
    """
    own = own or {}
    if settled is None:
        settled = record.result.settled if isinstance(record.result, Suspended) else {}
    owed, at = owed_calls(state.transcript, record.turn_id)
    messages: list[StoredMessage] = []
    steps: list[StoredStep] = []
    for offset, call in enumerate(owed):
        index = len(state.transcript) + offset
        finished = settled_message(record.turn_id, call, settled.get(call.id))
        if finished is not None and call.id not in own:
            messages.append(StoredMessage(index, finished))
            continue
        message = ToolMessage(
            turn_id=record.turn_id,
            call_id=call.id,
            name=call.name,
            result=own.get(call.id, closing),
            is_error=True,
        )
        messages.append(StoredMessage(index, message))
        steps.append(
            StoredStep(f"tool:{at}:{call.id}", record.turn_id, {"message": index, "is_error": True})
        )
    ended = moved(record, result.status, result=result)
    return Commit(
        messages=tuple(messages),
        steps=tuple(steps),
        turns=(ended,),
        # A turn that never opened wrote nothing of the session, so the session's status
        # is left as it is; one that opened held the session, which is idle once it ends.
        status="idle" if record.opening_index is not None else None,
    )
