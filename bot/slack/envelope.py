"""The shapes of the bodies Slack sends, as far as Bolt and this app rely on them.

Bolt indexes a body without checking it (``payload["authorizations"][0]``,
``body["actions"][0]``, ``body["view"]["type"]``...), so a signed body of the
wrong shape made it answer 500 with a traceback. It is checked here first and
refused with a 400 that says what is wrong. Anything not named is let through
as it is: Slack adds fields, and this app must not refuse them. Every payload
of ``tests/bot/slack_payloads`` (real ones, from Slack's SDK test suites and
docs) passes.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar
from urllib.parse import parse_qs, parse_qsl

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

__all__ = [
    "MAX_DEPTH",
    "MalformedBody",
    "check_body",
    "check_payload",
    "check_socket_payload",
    "command_fields",
]

Object = dict[str, Any]

MAX_DEPTH = 64
"""How deep a body may nest; Slack's deepest (a modal's rich text state) is about 15."""


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


_S = TypeVar("_S", bound=_Shape)


class _Id(_Shape):
    """A user, team, channel or enterprise given as an object: Bolt reads its ``id``."""

    id: str | None = None


class _Addressed(_Shape):
    """The fields Bolt reads to know the workspace, user, channel and thread of a payload.

    Bolt looks for them in the body, then in ``event``, ``authorizations[0]``,
    ``message``, ``previous_message``, ``item`` and ``assistant_thread``.
    """

    enterprise: str | _Id | None = None
    team: str | _Id | None = None
    user: str | _Id | None = None
    channel: str | _Id | None = None
    enterprise_id: str | None = None
    team_id: str | None = None
    user_id: str | None = None
    channel_id: str | None = None
    user_team: str | None = None
    thread_ts: str | None = None
    ts: str | None = None
    message: _Addressed | None = None
    previous_message: _Addressed | None = None
    item: _Addressed | None = None
    assistant_thread: _Addressed | None = None


class _Event(_Addressed):
    type: str
    subtype: str | None = None
    text: str | None = None
    bot_id: str | None = None
    channel_type: str | None = None

    @model_validator(mode="after")
    def _names_its_assistant_thread(self) -> _Event:
        # Bolt builds its assistant helpers for these before any listener runs, and
        # raises (a 500) for one without the thread's channel and ts
        if self.type in _ASSISTANT_THREAD_EVENTS:
            thread = self.assistant_thread
            if thread is None or not (thread.channel_id and thread.thread_ts):
                raise ValueError(f"{self.type} without assistant_thread.channel_id and thread_ts")
        return self


_ASSISTANT_THREAD_EVENTS = frozenset(
    {"assistant_thread_started", "assistant_thread_context_changed"}
)


class _Action(_Shape):
    action_id: str | None = None
    """Every block action has one; a legacy attachment button (``interactive_message``)
    has a ``name`` instead."""
    block_id: str | None = None
    name: str | None = None
    value: str | None = None


class _View(_Shape):
    type: str | None = None
    callback_id: str | None = None
    team_id: str | None = None
    app_installed_team_id: str | None = None


class _Envelope(_Addressed):
    """An Events API envelope, or an interactivity payload: the fields Bolt reads."""

    type: str
    api_app_id: str | None = None
    event_id: str | None = None
    callback_id: str | None = None
    action_id: str | None = None
    command: str | None = None
    response_url: str | None = None
    response_urls: list[Object] | None = None
    authorizations: list[_Addressed] | None = None
    container: Object | None = None
    view: _View | None = None
    event: _Event | None = None
    actions: list[_Action] | None = None


class _Command(_Addressed):
    """A slash command: over HTTP a plain form; over Socket Mode the same fields as an object."""

    command: str
    text: str | None = None
    api_app_id: str | None = None
    response_url: str | None = None
    trigger_id: str | None = None


class MalformedBody(ValueError):
    """A signed body that is not what Slack sends; its message says what is wrong."""


def check_body(body: str, content_type: str) -> None:
    """Check a signed request's body before Bolt reads it.

    Events come as a JSON object; interactivity as a form whose ``payload`` is a
    JSON object; slash commands as a plain form.

    Raises:
        MalformedBody: It is none of those, or a field Bolt reads has the wrong type.
    """
    if not body:
        raise MalformedBody("the body is empty")
    form = _form(body, content_type)
    if form is not None:
        payloads = form.get("payload")
        if payloads is None:
            return  # a slash command: Bolt reads its fields as strings
        if len(payloads) != 1:
            raise MalformedBody("more than one payload")
        body = payloads[0]
    try:
        found = json.loads(body)
    except RecursionError:
        raise MalformedBody(f"nested deeper than {MAX_DEPTH}") from None
    except ValueError:
        raise MalformedBody("the body is not JSON") from None
    check_payload(found)


def command_fields(body: str, content_type: str) -> dict[str, str] | None:
    """A slash command's fields, if ``body`` (checked by `check_body`) is a slash command's form.

    Bolt must be given them read here: its ``parse_body`` takes any form whose text
    contains ``payload`` for interactivity, and reads a command such as
    ``/agent-policy show payload`` as ``{}``. A form is interactivity only when it
    has a ``payload`` field; a slash command's text is percent-encoded in its
    ``text`` field, so it cannot add one.
    """
    form = _form(body, content_type)
    if form is None or "payload" in form:
        return None
    return dict(parse_qsl(body, keep_blank_values=True))  # as Bolt reads a form: the last wins


def _form(body: str, content_type: str) -> dict[str, list[str]] | None:
    """The fields of a form body, or None for JSON, as Bolt tells them apart.

    Raises:
        MalformedBody: A form that cannot be read.
    """
    # as in ``slack_bolt.request.internals.parse_body``
    if content_type == "application/json" or body.startswith("{"):
        return None
    try:
        return parse_qs(body, strict_parsing=True)
    except ValueError:
        raise MalformedBody("the form cannot be read") from None


def check_payload(found: object) -> None:
    """Check a parsed payload (an HTTP body's, or a Socket Mode envelope's) before Bolt reads it.

    Raises:
        MalformedBody: It is not an object, nests too deep, or a field Bolt reads is
            missing or has the wrong type.
    """
    envelope = _validate(_Envelope, found)
    missing = _missing(envelope)
    if missing:
        raise MalformedBody(f"missing {missing}")


def check_socket_payload(kind: str, payload: object) -> None:
    """Check a Socket Mode envelope's payload before Bolt reads it.

    A ``slash_commands`` envelope carries the command's fields as an object (what
    HTTP posts as a form); ``events_api`` and ``interactive`` carry what HTTP posts
    as JSON or as the ``payload`` field (docs.slack.dev/apis/events-api/using-socket-mode).

    Raises:
        MalformedBody: As `check_payload` says; a command without a ``command``, or
            a field Bolt reads of the wrong type.
    """
    if kind != "slash_commands":
        check_payload(payload)
        return
    _validate(_Command, payload)


def _validate(shape: type[_S], found: object) -> _S:
    """``found`` read as ``shape``: an object, not too deep, the fields Bolt reads as they must be.

    What is missing or of the wrong type is named, by field.
    """
    if not isinstance(found, dict):
        raise MalformedBody("the body is not a JSON object")
    if _depth(found) > MAX_DEPTH:
        raise MalformedBody(f"nested deeper than {MAX_DEPTH}")
    try:
        return shape.model_validate(found)
    except ValidationError as exc:
        # name the fields only: pydantic's own text quotes the values
        errors = exc.errors()
        absent = sorted({_field(e["loc"]) for e in errors if e["type"] == "missing"})
        wrong = sorted({_field(e["loc"]) for e in errors if e["type"] != "missing"})
        said = [f"missing {', '.join(absent)}"] if absent else []
        said += [f"unexpected {', '.join(wrong)}"] if wrong else []
        raise MalformedBody("; ".join(said)) from None


def _missing(envelope: _Envelope) -> str | None:
    """What a payload of its type lacks that Bolt indexes without looking."""
    kind, actions = envelope.type, envelope.actions
    if kind == "block_actions" and actions is not None:
        if not actions:
            return "actions.0"
        nameless = [str(n) for n, a in enumerate(actions) if a.action_id is None]
        if nameless:
            return ", ".join(f"actions.{n}.action_id" for n in nameless)
    if kind == "interactive_message" and envelope.callback_id is not None and not actions:
        return "actions.0"
    view = envelope.view
    if kind == "view_submission" and view and view.callback_id is not None and view.type is None:
        return "view.type"
    # a step from apps' edit or save: Bolt reads its workflow_step for every listener
    stepping = kind == "workflow_step_edit" and envelope.callback_id is not None
    stepping |= kind == "view_submission" and view is not None and view.type == "workflow_step"
    if stepping and "workflow_step" not in (envelope.model_extra or {}):
        return "workflow_step"
    return None


def _depth(found: object) -> int:
    """How deep ``found`` nests, counted without recursion (an object of scalars is 1)."""
    deepest, stack = 0, [(found, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _field(location: tuple[int | str, ...]) -> str:
    """``event.user`` for pydantic's ``('event', 'user', 'str')``: without the union's arm."""
    names = [str(p) for p in location if not (isinstance(p, str) and p in _UNION_ARMS)]
    return ".".join(names)


_UNION_ARMS = frozenset({"str", "_Id", "_Addressed", "dict[str,any]", "list[dict[str,any]]"})
