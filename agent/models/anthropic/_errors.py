"""The SDK's errors as ours, translated once: a clear sentence, never the key or the request."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2

from agent.errors import ModelError

__all__ = [
    "RetryAfterCap",
    "is_api_error",
    "late_error",
    "model_error",
    "redacted",
    "retry_after",
    "translated_errors",
]


_RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


_DETAIL_LIMIT = 500


class RetryAfterCap(anthropic.Middleware):
    """Caps how long a ``retry-after`` makes the SDK wait before its retry.

    The SDK obeys the header however large; a provider asking for an hour
    would hold the turn that long.
    """

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    async def handle_async(self, request: Any, call_next: Any) -> Any:
        response = await call_next(request)
        headers = response.http_response.headers
        asked = "retry-after" in headers or "retry-after-ms" in headers
        wait = retry_after(response.http_response)
        if asked:
            for name in ("retry-after-ms", "retry-after"):
                headers.pop(name, None)
            # a date we cannot read is as good as "long"
            headers["retry-after"] = (
                f"{min(wait if wait is not None else self._seconds, self._seconds):g}"
            )
        return response


def is_api_error(exc: anthropic.APIStatusError, error_type: str) -> bool:
    """Whether the error's body is the API's own, ``{"type": "error", "error": {"type": ...}}``."""
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("type") == error_type


def retry_after(response: Any) -> float | None:
    """Seconds the provider asked us to wait, from ``retry-after-ms`` or ``retry-after``."""
    if response is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(response.headers[name]) / scale
        except (KeyError, ValueError):
            continue
    return None


def model_error(exc: anthropic.APIError, *, secret: str | None) -> ModelError:
    """The SDK's error as ours, with the key (``secret``) taken out of its text."""
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelError("the model provider did not answer in time", retryable=True)
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelError("could not reach the model provider", retryable=True)
    if not isinstance(exc, anthropic.APIStatusError):
        return ModelError(redacted(f"the model provider's answer was unreadable: {exc}", secret))
    kind = exc.type or "error"
    # an error sent inside a stream arrives on a 200 response
    status = exc.status_code if exc.status_code >= 400 else None
    text = f"the model provider refused the request ({status or 'stream'} {kind})"
    if exc.api_message:
        text += f": {exc.api_message[:_DETAIL_LIMIT]}"
    if isinstance(exc, anthropic.AuthenticationError):
        text += "; check ANTHROPIC_API_KEY"
    elif isinstance(exc, anthropic.PermissionDeniedError):
        text += "; the API key may not use this model"
    retryable = kind in _RETRYABLE_ERROR_TYPES or (
        status is not None and (status in (408, 409, 429) or status >= 500)
    )
    return ModelError(
        redacted(text, secret), retryable=retryable, retry_after=retry_after(exc.response)
    )


def late_error(step_timeout: float) -> ModelError:
    """The error of a step that found no complete reply before its deadline."""
    return ModelError(f"no complete reply within {step_timeout:g} s", retryable=True)


def redacted(text: str, secret: str | None) -> str:
    """``text`` with the API key replaced, wherever the SDK may have quoted it."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return text


@contextlib.contextmanager
def translated_errors(*, secret: str | None, step_timeout: float) -> Iterator[None]:
    """Raise what goes wrong while a reply streams as one `ModelError`, the cause kept.

    Request-level faults were already retried by the SDK; what reaches here is
    retryable by the engine when asking again may succeed.
    """
    try:
        yield
    except anthropic.APIError as exc:
        raise model_error(exc, secret=secret) from exc
    except httpx2.HTTPError as exc:
        raise ModelError(f"the reply stream broke: {type(exc).__name__}", retryable=True) from exc
    except TimeoutError as exc:
        raise late_error(step_timeout) from exc
    except ValueError as exc:
        # the SDK could not parse a tool call's streamed input
        raise ModelError("the reply held malformed tool input", retryable=True) from exc
