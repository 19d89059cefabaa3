"""Errors the API answers with: a status, a short code, a sentence, and the field at fault."""

from __future__ import annotations

from aiohttp import web

__all__ = ["ApiError", "error_response"]


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
