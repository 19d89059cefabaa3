"""Block Kit for a request a turn waits on: Approve / Deny, then who decided and when.

The buttons carry the request's whole address (session, turn, request id) in
their ``value``, so a click is settled from the payload alone, in any process,
after any restart. Limits are Slack's: a button ``value`` holds 2,000
characters, section text 3,000.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from agent import InputRequest, PolicyAnswerer, UserAnswerer

__all__ = [
    "APPROVE",
    "DENY",
    "Decision",
    "approval_blocks",
    "decided_blocks",
    "expired_blocks",
    "read_decision",
    "who_may_answer",
]

APPROVE = "turn_approve"
DENY = "turn_deny"
MAX_SECTION_CHARS = 3_000


@dataclass(frozen=True, slots=True)
class Decision:
    """A click on Approve or Deny, read off its payload."""

    session_id: str
    turn_id: str
    input_id: str
    approved: bool


def approval_blocks(session_id: str, turn_id: str, request: InputRequest) -> list[dict[str, Any]]:
    """The prompt, and Approve (primary) / Deny buttons addressed to ``request``."""
    address = json.dumps({"s": session_id, "t": turn_id, "i": request.id}, separators=(",", ":"))
    return [
        _section(request.prompt),
        {
            "type": "actions",
            "block_id": f"ask:{turn_id}:{request.id}"[:255],
            "elements": [
                _button("Approve", APPROVE, address, style="primary"),
                _button("Deny", DENY, address),
            ],
        },
        _context(f"Waiting for {who_may_answer(request)}"),
    ]


def decided_blocks(prompt: str, *, by: str, approved: bool, at: float | None = None) -> list[Any]:
    """The prompt, with the buttons replaced by who decided and when."""
    when = int(at if at is not None else time.time())
    verdict = "Approved" if approved else "Denied"
    fallback = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when))
    # Slack shows the date in the reader's own time zone; the fallback is for old clients
    stamp = f"<!date^{when}^{{date_short_pretty}} at {{time}}|{fallback}>"
    return [_section(prompt), _context(f"{verdict} by <@{by}> {stamp}")]


def expired_blocks(prompt: str) -> list[Any]:
    """The prompt, with the buttons replaced by a note that nobody answered in time."""
    return [_section(prompt), _context("Expired: nobody answered in time")]


def read_decision(action: dict[str, Any]) -> Decision | None:
    """The decision a button click carries; None for a value this app did not write."""
    try:
        address = json.loads(action["value"])
        return Decision(
            session_id=str(address["s"]),
            turn_id=str(address["t"]),
            input_id=str(address["i"]),
            approved=action["action_id"] == APPROVE,
        )
    except (KeyError, TypeError, ValueError):
        return None


def who_may_answer(request: InputRequest) -> str:
    """The people a request waits for, as Slack shows them."""
    answerers = request.answerers
    if isinstance(answerers, UserAnswerer):
        return f"<@{answerers.user}>"
    if isinstance(answerers, PolicyAnswerer):
        return f"someone the {answerers.policy} policy allows"
    return "anyone in this conversation"


def _section(text: str) -> dict[str, Any]:
    if len(text) > MAX_SECTION_CHARS:
        text = text[: MAX_SECTION_CHARS - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


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
