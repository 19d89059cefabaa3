"""Block Kit for feedback on a reply: its buttons, the comment modal, the Home tab's week.

A reply whose turn completed ends with Slack's feedback buttons (a
``context_actions`` block holding one ``feedback_buttons`` element); each button
carries the turn's address and its rating in its ``value``, as a request's
buttons do (`bot.slack.blocks`), so a click is read from the payload alone. The
comment modal carries the same address in its ``private_metadata``. Limits are
Slack's: a feedback button's text and accessibility label 75 characters, its
value 2,000; a modal's title 24, its ``private_metadata`` 3,000.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent import Feedback, Rating
from bot.slack.blocks import stamp

__all__ = [
    "COMMENT_BLOCK",
    "COMMENT_INPUT",
    "FEEDBACK",
    "FEEDBACK_VIEW",
    "MAX_COMMENT_CHARS",
    "TELL_MORE",
    "Rated",
    "comment_view",
    "feedback_blocks",
    "read_comment",
    "read_rated",
    "tell_more_blocks",
    "week_blocks",
]

FEEDBACK = "turn_feedback"
"""The ``action_id`` of a reply's feedback buttons."""
TELL_MORE = "turn_feedback_more"
"""The button, in a private message, that opens the comment modal."""
FEEDBACK_VIEW = "turn_feedback_view"
"""The ``callback_id`` of the modal a comment is submitted with."""
COMMENT_BLOCK = "comment"
COMMENT_INPUT = "text"
MAX_COMMENT_CHARS = 2_000
"""As the engine keeps a comment (`agent.rate_turn`); the modal's input holds no more."""
LATEST_COMMENTS = 5
"""How many comments the Home tab shows, newest first."""
MAX_SHOWN_COMMENT = 300
MAX_VALUE_CHARS = 2_000
"""What a feedback button's ``value`` holds."""


@dataclass(frozen=True, slots=True)
class Rated:
    """A rating of one turn's reply, as a button or a modal carries it."""

    session_id: str
    turn_id: str
    rating: Rating

    def value(self) -> str:
        """The ``value`` (or ``private_metadata``) that carries it."""
        address = {"s": self.session_id, "t": self.turn_id, "r": self.rating}
        return json.dumps(address, separators=(",", ":"))


def feedback_blocks(session_id: str, turn_id: str) -> list[dict[str, Any]]:
    """What a completed turn's reply ends with: 👍 / 👎, each carrying the turn and its rating."""

    def button(emoji: str, label: str, rating: Rating) -> dict[str, Any]:
        return {
            "text": {"type": "plain_text", "text": emoji},
            "value": Rated(session_id, turn_id, rating).value(),
            "accessibility_label": label,
        }

    if len(Rated(session_id, turn_id, "good").value()) > MAX_VALUE_CHARS:
        return []  # an address too long to carry: Slack would refuse the whole message
    element = {
        "type": "feedback_buttons",
        "action_id": FEEDBACK,
        "positive_button": button("👍", "This reply was helpful", "good"),
        "negative_button": button("👎", "This reply was not helpful", "bad"),
    }
    return [
        {"type": "context_actions", "block_id": f"feedback:{turn_id}"[:255], "elements": [element]}
    ]


def read_rated(value: Any) -> Rated | None:
    """The rating a button's ``value`` (or a modal's metadata) carries; None if not ours."""
    try:
        address = json.loads(value)
        session_id, turn_id, rating = address["s"], address["t"], address["r"]
    except (KeyError, TypeError, ValueError):
        return None
    if not (isinstance(session_id, str) and isinstance(turn_id, str) and session_id and turn_id):
        return None
    if rating == "good":
        return Rated(session_id, turn_id, "good")
    if rating == "bad":
        return Rated(session_id, turn_id, "bad")
    return None


def tell_more_blocks(rated: Rated, line: str) -> list[dict[str, Any]]:
    """A private message: ``line``, and the button that opens the comment modal."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": line}},
        {
            "type": "actions",
            "block_id": f"more:{rated.turn_id}"[:255],
            "elements": [
                {
                    "type": "button",
                    "action_id": TELL_MORE,
                    "value": rated.value(),
                    "text": {"type": "plain_text", "text": "Tell us more"},
                }
            ],
        },
    ]


def comment_view(rated: Rated) -> dict[str, Any]:
    """The modal a comment on a rated reply is written in."""
    asked = "What was wrong with it?" if rated.rating == "bad" else "What was good about it?"
    return {
        "type": "modal",
        "callback_id": FEEDBACK_VIEW,
        "private_metadata": rated.value(),
        "title": {"type": "plain_text", "text": "Tell us more"},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": COMMENT_BLOCK,
                "label": {"type": "plain_text", "text": asked},
                "element": {
                    "type": "plain_text_input",
                    "action_id": COMMENT_INPUT,
                    "multiline": True,
                    "max_length": MAX_COMMENT_CHARS,
                },
            }
        ],
    }


def read_comment(view: Any) -> tuple[Rated, str] | None:
    """The rating a submitted comment modal carries, and the comment; None if not ours."""
    if not isinstance(view, dict):
        return None
    rated = read_rated(view.get("private_metadata"))
    state = view.get("state")
    values = state.get("values") if isinstance(state, dict) else None
    block = values.get(COMMENT_BLOCK) if isinstance(values, dict) else None
    field = block.get(COMMENT_INPUT) if isinstance(block, dict) else None
    text = field.get("value") if isinstance(field, dict) else None
    if rated is None:
        return None
    return rated, text if isinstance(text, str) else ""


def week_blocks(found: Sequence[Feedback]) -> list[dict[str, Any]]:
    """The Home tab's feedback section: the week's counts, then its latest comments."""
    good = sum(1 for f in found if f.rating == "good")
    bad = len(found) - good
    blocks = [_text(f"*Feedback, last 7 days:* 👍 {good} good · 👎 {bad} bad")]
    commented = [f for f in found if f.comment][:LATEST_COMMENTS]
    for f in commented:
        assert f.comment is not None
        said = _escaped(_clip(" ".join(f.comment.split()), MAX_SHOWN_COMMENT))
        mark = "👍" if f.rating == "good" else "👎"
        blocks.append(_text(f"{mark} <@{f.by}> {stamp(f.at)}: “{said}”"))
    if not found:
        blocks.append(_text("_No feedback this week._"))
    return blocks


def _text(markdown: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": markdown[:3000]}}


def _escaped(text: str) -> str:
    # a person's words, shown as mrkdwn: no mention, link or command of theirs takes effect
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
