"""The shapes of the bodies Slack sends, as far as Bolt and this app rely on them.

Bolt indexes a body without checking it (``payload["authorizations"][0]``,
``len(payload["actions"])``...), so a signed body of the wrong shape made it
answer 500 with a traceback. It is checked here first and refused with a 400
that says what is wrong. Anything not named is let through as it is: Slack adds
fields, and this app must not refuse them.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["MalformedBody", "check_body"]

Object = dict[str, Any]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _Event(_Shape):
    type: str
    user: str | Object | None = None
    channel: str | Object | None = None
    team: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    text: str | None = None


class _Action(_Shape):
    action_id: str
    block_id: str | None = None
    value: str | None = None


class _Envelope(_Shape):
    """An Events API envelope, or an interactivity payload: the fields Bolt reads."""

    type: str
    team_id: str | None = None
    enterprise_id: str | None = None
    api_app_id: str | None = None
    event_id: str | None = None
    authorizations: list[Object] | None = None
    enterprise: str | Object | None = None
    team: str | Object | None = None
    user: str | Object | None = None
    channel: str | Object | None = None
    container: Object | None = None
    message: Object | None = None
    view: Object | None = None
    event: _Event | None = None
    actions: list[_Action] | None = None


class MalformedBody(ValueError):
    """A signed body that is not what Slack sends; its message says what is wrong."""


def check_body(body: str, content_type: str) -> None:
    """Check a signed request's body before Bolt reads it.

    Events come as a JSON object; interactivity as a form whose ``payload`` is a
    JSON object; slash commands as a plain form.

    Raises:
        MalformedBody: It is none of those, or a field Bolt reads has the wrong type.
    """
    if content_type == "application/x-www-form-urlencoded":
        try:
            form = parse_qs(body, strict_parsing=True)
        except ValueError:
            raise MalformedBody("the form cannot be read") from None
        payloads = form.get("payload")
        if payloads is None:
            return  # a slash command: Bolt reads its fields as strings
        if len(payloads) != 1:
            raise MalformedBody("more than one payload")
        _check_json(payloads[0])
        return
    _check_json(body)


def _check_json(text: str) -> None:
    try:
        found = json.loads(text)
    except ValueError:
        raise MalformedBody("the body is not JSON") from None
    if not isinstance(found, dict):
        raise MalformedBody("the body is not a JSON object")
    try:
        _Envelope.model_validate(found)
    except ValidationError as exc:
        # name the fields only: pydantic's own text quotes the values
        fields = sorted({_field(e["loc"]) for e in exc.errors()})
        raise MalformedBody(f"unexpected {', '.join(fields)}") from None


def _field(location: tuple[int | str, ...]) -> str:
    """``event.user`` for pydantic's ``('event', 'user', 'str')``: without the union's arm."""
    names = [str(p) for p in location if not (isinstance(p, str) and p in _UNION_ARMS)]
    return ".".join(names)


_UNION_ARMS = frozenset({"str", "dict[str,any]", "list[dict[str,any]]"})
