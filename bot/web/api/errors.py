"""Errors the API answers with: a status, a short code, a sentence, and the field at fault.

Every error a handler raises (the API's own, the router's 404 and 405, the
engine's) leaves the API as the same JSON shape, through `errors_as_json`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from agent import (
    AgentError,
    AuthorizeAnswerError,
    ConflictError,
    InvalidAnswerError,
    ResumeAuthorizationError,
    RuntimeClosedError,
    SessionSuspendedError,
    UnknownTurnError,
)

__all__ = ["ApiError", "error_response", "errors_as_json"]

logger = logging.getLogger("bot.web")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """A request the API refuses; the message is shown to the client as it is."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


def error_response(error: ApiError) -> web.Response:
    """``{"error": {"status", "code", "message", "field"?}}`` with the error's status."""
    body: dict[str, object] = {"status": error.status, "code": error.code, "message": str(error)}
    if error.field is not None:
        body["field"] = error.field
    return web.json_response({"error": body}, status=error.status)


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every error of ``handler`` as ``{"error": {...}}``, with a status that fits it."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc)
    except web.HTTPException as exc:  # the router's own 404 and 405, in our shape
        if exc.status < 400:
            raise
        return error_response(ApiError(exc.status, "not_found", exc.reason))
    except ResumeAuthorizationError as exc:
        return error_response(ApiError(403, "forbidden", str(exc)))
    except SessionSuspendedError:
        return error_response(
            ApiError(
                409,
                "waiting_for_answer",
                "this session waits for an answer to a request: answer it or cancel its turn first",
            )
        )
    except (ConflictError, InvalidAnswerError, AuthorizeAnswerError, UnknownTurnError) as exc:
        status, code = _status_of(exc)
        return error_response(ApiError(status, code, str(exc)))
    except RuntimeClosedError:
        return error_response(ApiError(503, "unavailable", "the bot is stopping; try again"))
    except AgentError as exc:
        logger.warning("%s %s failed: %s", request.method, request.path, exc)
        return error_response(ApiError(500, "internal", str(exc)))
    except Exception:
        logger.exception("%s %s failed", request.method, request.path)
        return error_response(ApiError(500, "internal", "the bot failed on this request"))


def _status_of(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, UnknownTurnError):
        return 404, "not_found"
    if isinstance(exc, InvalidAnswerError):
        return 400, "invalid_answer"
    if isinstance(exc, AuthorizeAnswerError):
        return 500, "answer_not_applied"
    return 409, "conflict"
