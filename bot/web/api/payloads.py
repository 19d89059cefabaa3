"""What the API reads and writes: request bodies, transcript messages, turn outcomes."""

from __future__ import annotations

from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent import (
    AssistantMessage,
    Cancelled,
    Completed,
    Failed,
    Interrupted,
    JsonValue,
    Message,
    Suspended,
    ThinkingBlock,
    ToolCall,
    ToolMessage,
    TriggerMessage,
    TurnResult,
    UserMessage,
)
from bot.web.api.errors import ApiError

__all__ = [
    "MAX_BODY",
    "SESSION_ID_PATTERN",
    "ResumeBody",
    "TurnBody",
    "message_json",
    "outcome_json",
    "read_body",
]

SESSION_ID_PATTERN = r"[A-Za-z0-9._:\-]{1,128}"
MAX_TEXT = 40_000
MAX_BODY = 256 * 1024

T = TypeVar("T", bound=BaseModel)


class TurnBody(BaseModel):
    """``POST .../turns``: a turn to start."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_TEXT)
    turn_id: str | None = Field(default=None, pattern=f"^{SESSION_ID_PATTERN}$")
    replace: bool = False
    wait: bool = True
    """False: answer 202 once the turn is admitted; its events come on /events."""


class ResumeBody(BaseModel):
    """``POST .../resume``: the answer to a turn's request."""

    model_config = ConfigDict(extra="forbid")

    input_id: str = Field(min_length=1, max_length=200)
    value: JsonValue


class SteerBody(BaseModel):
    """``POST .../steer``: input for the session's running turn."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_TEXT)
    steer_id: str | None = Field(default=None, pattern=f"^{SESSION_ID_PATTERN}$")
    """The same id again stores nothing more, as a turn id does for a turn."""


async def read_body(request: web.Request, model: type[T]) -> T:
    """The request's JSON body as ``model``.

    Raises:
        ApiError: 413 for a body over `MAX_BODY`, 400 for one ``model`` refuses.
    """
    # read no more than the limit, whatever the application around the API allows
    too_large = ApiError(413, "too_large", f"the body is over {MAX_BODY} bytes")
    if (request.content_length or 0) > MAX_BODY:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > MAX_BODY:
            raise too_large
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        if error["type"] == "json_invalid":
            raise ApiError(400, "invalid", "the body must be a JSON object") from None
        message = f"{field}: {error['msg']}" if field else error["msg"]
        raise ApiError(400, "invalid", message, field=field) from None


def message_json(message: Message) -> dict[str, Any]:
    """A transcript message as the API shows it."""
    if isinstance(message, UserMessage):
        return {
            "role": "user",
            "turn_id": message.turn_id,
            "text": message.text,
            "user": message.user,
        }
    if isinstance(message, TriggerMessage):
        return {
            "role": "trigger",
            "turn_id": message.turn_id,
            "text": message.text,
            "by": message.by,
        }
    if isinstance(message, AssistantMessage):
        return {
            "role": "assistant",
            "turn_id": message.turn_id,
            "text": message.text,
            # the thinking it showed: the note before each call goes with the call
            "progress": _reasoning(message),
            "tool_calls": [
                {"id": c.id, "name": c.name, "input": c.input, "note": message.note_before(c.id)}
                for c in message.tool_calls
            ],
        }
    assert isinstance(message, ToolMessage)
    return {
        "role": "tool",
        "turn_id": message.turn_id,
        "call_id": message.call_id,
        "name": message.name,
        "result": message.result,
        "is_error": message.is_error,
    }


def _reasoning(message: AssistantMessage) -> list[str]:
    """The shown thinking of a reply that introduces none of its calls."""
    blocks = message.content
    notes = {i for i in range(len(blocks) - 1) if isinstance(blocks[i + 1], ToolCall)}
    return [
        b.thinking
        for i, b in enumerate(blocks)
        if isinstance(b, ThinkingBlock) and b.thinking and i not in notes
    ]


def outcome_json(result: TurnResult) -> dict[str, Any]:
    """How a turn ended (or that it waits), as the API answers a turn it waited for."""
    outcome: dict[str, Any] = {"turn_id": result.turn_id}
    if isinstance(result, Completed):
        outcome.update(status="completed", text=result.text)
        if result.output is not None:
            outcome["output"] = result.output  # the agent's result type, validated
    elif isinstance(result, Suspended):
        others = [other.as_dict() for other in result.others]
        outcome.update(status="suspended", request=result.request.as_dict(), others=others)
    elif isinstance(result, Failed):
        outcome.update(status="failed", error=result.error, phase=result.phase)
    elif isinstance(result, Cancelled):
        outcome.update(status="cancelled", reason=result.reason)
    elif isinstance(result, Interrupted):
        outcome.update(status="interrupted", reason=result.reason, detail=result.detail)
    return outcome
