"""Block Kit for a request a turn waits on, drawn from its schema; then how it was settled.

A request is shown by its schema: a boolean (or no schema) as Approve / Deny,
an ``enum`` as one button per option, anything else (a string, a number) as an
Answer button that opens a modal with an input. Every card also offers
Withdraw, which only an admin may use.

The buttons carry the request's whole address (session, turn, request id) in
their ``value``, so a click is settled from the payload alone, in any process,
after any restart; an option's button carries its index in the ``enum``, read
against the request the turn waits on, never against the payload. Limits are
Slack's: a button ``value`` holds 2,000 characters, its text 75, an actions
block 25 elements, section text 3,000, a modal's ``private_metadata`` 3,000 and
its title 24.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from agent import InputRequest, JsonValue, PolicyAnswerer, UserAnswerer

__all__ = [
    "ANSWER",
    "ANSWER_BLOCK",
    "ANSWER_INPUT",
    "ANSWER_VIEW",
    "APPROVE",
    "CHOOSE",
    "DENY",
    "RESET_SHORTCUT",
    "RETRY",
    "STOP",
    "WITHDRAW",
    "Decision",
    "answer_view",
    "approval_blocks",
    "decided_blocks",
    "expired_blocks",
    "is_yes_no",
    "options_of",
    "read_decision",
    "read_view_address",
    "retried_blocks",
    "retry_blocks",
    "shown_answer",
    "stamp",
    "stop_blocks",
    "who_may_answer",
    "withdrawn_blocks",
    "working_blocks",
]

APPROVE = "turn_approve"
DENY = "turn_deny"
CHOOSE = re.compile(r"turn_choose:[0-9]{1,2}")
"""One option of an ``enum``: ``turn_choose:<index>`` (action ids are unique in a block)."""
ANSWER = "turn_answer"
"""Opens the modal that takes a typed answer."""
WITHDRAW = "turn_withdraw"
STOP = "turn_stop"
RETRY = "turn_retry"
"""Asks a failed or interrupted turn again (the person who asked, admins)."""
ANSWER_VIEW = "turn_answer_view"
"""The ``callback_id`` of the modal a typed answer is submitted with."""
ANSWER_BLOCK = "answer"
ANSWER_INPUT = "value"
RESET_SHORTCUT = "thread_reset"
"""The ``callback_id`` of the message shortcut that starts a thread over (manifest.yml)."""

MAX_SECTION_CHARS = 3_000
MAX_BUTTON_TEXT = 75
MAX_OPTIONS = 24
"""An actions block holds 25 elements; one is Withdraw."""
MAX_INPUT_CHARS = 3_000


@dataclass(frozen=True, slots=True)
class Decision:
    """A click on a request's button, read off its payload."""

    session_id: str
    turn_id: str
    input_id: str
    action: str
    """``approve``, ``deny``, ``choose``, ``answer`` (open the modal) or ``withdraw``."""
    option: int | None = None
    """For ``choose``: the option's index in the request's ``enum``."""

    @property
    def approved(self) -> bool:
        """Whether the click was on Approve."""
        return self.action == "approve"


def is_yes_no(request: InputRequest) -> bool:
    """Whether a request is shown as Approve / Deny: no schema, or a boolean."""
    schema = request.schema
    return schema is None or (schema.get("type") == "boolean" and "enum" not in schema)


def options_of(request: InputRequest) -> list[JsonValue] | None:
    """The ``enum`` a request is answered from with one button each; None for any other."""
    schema = request.schema or {}
    options = schema.get("enum")
    if isinstance(options, list) and 0 < len(options) <= MAX_OPTIONS:
        return options
    return None


def approval_blocks(session_id: str, turn_id: str, request: InputRequest) -> list[dict[str, Any]]:
    """The prompt, the buttons its schema calls for, Withdraw, and who may answer until when."""
    address: dict[str, Any] = {"s": session_id, "t": turn_id, "i": request.id}
    value = _value(address)
    options = options_of(request)
    elements: list[dict[str, Any]]
    if is_yes_no(request):
        elements = [
            _button("Approve", APPROVE, value, style="primary"),
            _button("Deny", DENY, value),
        ]
    elif options is not None:
        elements = [
            _button(_label(option), f"turn_choose:{n}", _value({**address, "o": n}))
            for n, option in enumerate(options)
        ]
    else:
        elements = [_button("Answer…", ANSWER, value, style="primary")]
    elements.append(_button("Withdraw", WITHDRAW, value))
    waiting = f"Waiting for {who_may_answer(request)}"
    if request.expires_at is not None:
        waiting += f" until {_stamp(request.expires_at)}; then it expires and the turn goes on"
    return [
        _section(request.prompt),
        {"type": "actions", "block_id": f"ask:{turn_id}:{request.id}"[:255], "elements": elements},
        _context(waiting + ". An admin may withdraw it."),
    ]


def answer_view(request: InputRequest, address: dict[str, Any]) -> dict[str, Any]:
    """The modal a typed answer to ``request`` is given in; ``address`` rides in its metadata."""
    kind = (request.schema or {}).get("type")
    hint = {"integer": "A whole number", "number": "A number"}.get(str(kind), "Your answer")
    return {
        "type": "modal",
        "callback_id": ANSWER_VIEW,
        "private_metadata": json.dumps(address, separators=(",", ":")),
        "title": {"type": "plain_text", "text": "Answer the request"},
        "submit": {"type": "plain_text", "text": "Answer"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            _section(request.prompt),
            {
                "type": "input",
                "block_id": ANSWER_BLOCK,
                "label": {"type": "plain_text", "text": hint},
                "element": {
                    "type": "plain_text_input",
                    "action_id": ANSWER_INPUT,
                    "max_length": MAX_INPUT_CHARS,
                    "multiline": kind not in ("integer", "number"),
                },
            },
        ],
    }


def read_view_address(view: dict[str, Any]) -> dict[str, Any] | None:
    """The address a submitted answer modal carries; None for a view this app did not open."""
    try:
        address = json.loads(view["private_metadata"])
        if not all(isinstance(address.get(k), str) for k in ("s", "t", "i")):
            return None
        return address if isinstance(address, dict) else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def decided_blocks(prompt: str, *, by: str, verdict: str, at: float | None = None) -> list[Any]:
    """The prompt, with the buttons replaced by how (``verdict``), by whom and when it ended."""
    return [_section(prompt), _context(f"{verdict} by <@{by}> {_stamp(at)}")]


def shown_answer(value: JsonValue) -> str:
    """How an answer is named on its card: Approved, Denied, or the value itself."""
    if value is True:
        return "Approved"
    if value is False:
        return "Denied"
    text = value if isinstance(value, str) else json.dumps(value)
    return f"Answered “{_clip(text, 200)}”"


def expired_blocks(prompt: str) -> list[Any]:
    """The prompt, with the buttons replaced by a note that nobody answered in time."""
    return [_section(prompt), _context("Expired: nobody answered in time")]


def withdrawn_blocks(prompt: str, *, by: str) -> list[Any]:
    """The prompt, with the buttons replaced by who withdrew it."""
    return [_section(prompt), _context(f"Withdrawn by <@{by}> {_stamp(None)}")]


def stop_blocks(session_id: str, turn_id: str) -> list[dict[str, Any]]:
    """A Stop button for a running turn (a stream takes no blocks: see `working_blocks`)."""
    value = _value({"s": session_id, "t": turn_id, "i": ""})
    return [
        {
            "type": "actions",
            "block_id": f"stop:{turn_id}"[:255],
            "elements": [_button("Stop", STOP, value, style="danger")],
        }
    ]


def retry_blocks(session_id: str, turn_id: str, line: str) -> list[dict[str, Any]]:
    """The message under a reply that did not finish: ``line``, and a Retry button."""
    value = _value({"s": session_id, "t": turn_id, "i": ""})
    return [
        _context(line),
        {
            "type": "actions",
            "block_id": f"retry:{turn_id}"[:255],
            "elements": [_button("Retry", RETRY, value, style="primary")],
        },
    ]


def retried_blocks(line: str) -> list[Any]:
    """The same message once its Retry was taken: who took it, and no button."""
    return [_context(line)]


def working_blocks(session_id: str, turn_id: str, line: str) -> list[dict[str, Any]]:
    """The message a thread shows while its turn is at work: ``line``, and the Stop button."""
    return [_context(line), *stop_blocks(session_id, turn_id)]


def read_decision(action: dict[str, Any]) -> Decision | None:
    """The decision a button click carries; None for a value this app did not write."""
    try:
        address = json.loads(action["value"])
        action_id = str(action["action_id"])
        option: int | None = None
        if action_id == APPROVE:
            kind = "approve"
        elif action_id == DENY:
            kind = "deny"
        elif CHOOSE.fullmatch(action_id):
            kind, option = "choose", int(address["o"])
        elif action_id in (ANSWER, WITHDRAW, STOP, RETRY):
            kind = action_id.removeprefix("turn_")
        else:
            return None
        return Decision(
            session_id=str(address["s"]),
            turn_id=str(address["t"]),
            input_id=str(address["i"]),
            action=kind,
            option=option,
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def who_may_answer(request: InputRequest) -> str:
    """The people a request waits for, as Slack shows them."""
    answerers = request.answerers
    if isinstance(answerers, UserAnswerer):
        return f"<@{answerers.user}>"
    if isinstance(answerers, PolicyAnswerer):
        return f"someone the {answerers.policy} policy allows"
    return "anyone in this conversation"


def stamp(at: float | None) -> str:
    """A date Slack shows in the reader's own time zone (the fallback is for old clients)."""
    return _stamp(at)


def _stamp(at: float | None) -> str:
    when = int(at if at is not None else time.time())
    fallback = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when))
    return f"<!date^{when}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _value(address: dict[str, Any]) -> str:
    return json.dumps(address, separators=(",", ":"))


def _label(option: JsonValue) -> str:
    return _clip(option if isinstance(option, str) else json.dumps(option), MAX_BUTTON_TEXT)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, MAX_SECTION_CHARS)}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _button(label: str, action_id: str, value: str, *, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": action_id,
        "value": value,
        "text": {"type": "plain_text", "text": label},
    }
    if style is not None:
        button["style"] = style
    return button
