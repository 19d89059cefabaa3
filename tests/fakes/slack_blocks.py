"""Slack's refusals, and the Block Kit and stream-chunk limits the fake Slack checks.

Limits as Slack documents them (Block Kit reference): a message holds at most 50
blocks; section text 3,000 characters, 10 fields; a header 150; 25 elements per
actions block, 10 per context; a markdown block 12,000; buttons' text 75,
``action_id`` 255, ``value`` 2,000, ``url`` 3,000; feedback buttons (in a
``context_actions`` block only, 5 elements) the same text and value limits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

__all__ = [
    "MAX_BLOCKS",
    "MAX_MARKDOWN_CHARS",
    "Refusal",
    "check_markdown",
    "checked_blocks",
    "checked_chunks",
]

Json: TypeAlias = dict[str, Any]

MAX_MARKDOWN_CHARS = 12_000
"""``markdown_text`` on posts and on each stream call (docs.slack.dev chat.*Stream)."""
MAX_BLOCKS = 50
MAX_VIEW_BLOCKS = 100

_BLOCK_TYPES = frozenset(
    {
        "actions",
        "alert",
        "call",
        "card",
        "carousel",
        "context",
        "context_actions",
        "divider",
        "file",
        "header",
        "image",
        "input",
        "markdown",
        "plan",
        "rich_text",
        "section",
        "table",
        "task_card",
        "video",
    }
)
_TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})


class Refusal(Exception):
    """Slack's ``{"ok": false, "error": code}``, with the details Slack adds for some codes."""

    def __init__(
        self,
        error: str,
        *,
        messages: Iterable[str] = (),
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(error)
        self.error = error
        self.messages = list(messages)
        self.status = status
        self.headers = headers or {}

    def body(self) -> Json:
        body: Json = {"ok": False, "error": self.error}
        if self.error == "invalid_blocks":
            body["errors"] = self.messages
        if self.messages:
            body["response_metadata"] = {"messages": [f"[ERROR] {m}" for m in self.messages]}
        return body


def _too_long(limit: int, where: str) -> str:
    return f"must be less than {limit + 1} characters [json-pointer:{where}]"


def _text_object_errors(
    value: Any, where: str, limit: int, *, plain_only: bool = False
) -> list[str]:
    kinds = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    if not isinstance(value, dict) or value.get("type") not in kinds:
        return [f"must be a text object of type {' or '.join(kinds)} [json-pointer:{where}]"]
    text = value.get("text")
    if not isinstance(text, str) or not text:
        return [f"must be more than 0 characters [json-pointer:{where}/text]"]
    return [_too_long(limit, f"{where}/text")] if len(text) > limit else []


def _length_errors(item: Json, where: str, limits: dict[str, int]) -> list[str]:
    errors = []
    for name, limit in limits.items():
        value = item.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            errors.append(_too_long(limit, f"{where}/{name}"))
    return errors


def _confirm_errors(confirm: Any, where: str) -> list[str]:
    if not isinstance(confirm, dict):
        return [f"must be an object [json-pointer:{where}]"]
    parts = {"title": (100, True), "text": (300, False), "confirm": (30, True), "deny": (30, True)}
    errors = []
    for name, (limit, plain) in parts.items():
        errors += _text_object_errors(confirm.get(name), f"{where}/{name}", limit, plain_only=plain)
    return errors


_CONTEXT_ACTIONS_ELEMENTS = frozenset({"feedback_buttons", "icon_button"})
_FEEDBACK_FIELDS = frozenset({"type", "action_id", "positive_button", "negative_button"})
_FEEDBACK_BUTTON_FIELDS = frozenset({"text", "value", "accessibility_label"})


def _unknown_fields(item: Json, known: frozenset[str], where: str) -> list[str]:
    # Slack refuses a field its schema does not name (its exact wording was not checked)
    return [
        f"unsupported field [json-pointer:{where}/{name}]" for name in sorted(set(item) - known)
    ]


def _feedback_errors(element: Json, where: str) -> list[str]:
    """A ``feedback_buttons`` element (docs.slack.dev/reference/block-kit/block-elements/
    feedback-buttons-element): both buttons required, each a plain_text text of at most
    75, a value of at most 2,000 and an optional accessibility_label of at most 75."""
    errors = _unknown_fields(element, _FEEDBACK_FIELDS, where)
    for side in ("positive_button", "negative_button"):
        button, at = element.get(side), f"{where}/{side}"
        if not isinstance(button, dict):
            errors.append(f"must provide an object [json-pointer:{at}]")
            continue
        errors += _unknown_fields(button, _FEEDBACK_BUTTON_FIELDS, at)
        errors += _text_object_errors(button.get("text"), f"{at}/text", 75, plain_only=True)
        if not isinstance(button.get("value"), str) or not button["value"]:
            errors.append(f"must be more than 0 characters [json-pointer:{at}/value]")
        errors += _length_errors(button, at, {"value": 2000, "accessibility_label": 75})
    return errors


def _element_errors(element: Any, where: str) -> list[str]:
    if not isinstance(element, dict) or not isinstance(element.get("type"), str):
        return [f"must be an element object [json-pointer:{where}]"]
    errors = _length_errors(element, where, {"action_id": 255})
    if element["type"] == "feedback_buttons":
        return errors + _feedback_errors(element, where)
    if element["type"] != "button":
        return errors
    errors += _text_object_errors(element.get("text"), f"{where}/text", 75, plain_only=True)
    errors += _length_errors(
        element, where, {"value": 2000, "url": 3000, "accessibility_label": 75}
    )
    if element.get("style") not in (None, "primary", "danger"):
        errors.append(f"must be one of primary, danger [json-pointer:{where}/style]")
    if "confirm" in element:
        errors += _confirm_errors(element["confirm"], f"{where}/confirm")
    return errors


def _elements_errors(block: Json, where: str, most: int) -> list[str]:
    elements = block.get("elements")
    if not isinstance(elements, list) or not elements:
        return [f"must provide at least 1 item [json-pointer:{where}/elements]"]
    errors = (
        []
        if len(elements) <= most
        else [f"no more than {most} items allowed [json-pointer:{where}/elements]"]
    )
    action_ids: set[str] = set()
    for index, element in enumerate(elements):
        at = f"{where}/elements/{index}"
        if (
            block["type"] == "context"
            and isinstance(element, dict)
            and element.get("type") != "image"
        ):
            errors += _text_object_errors(element, at, 3000)
            continue
        kind = element.get("type") if isinstance(element, dict) else None
        if (block["type"] == "context_actions") != (kind in _CONTEXT_ACTIONS_ELEMENTS):
            errors.append(f"unsupported type [json-pointer:{at}/type]")  # only there, only those
            continue
        errors += _element_errors(element, at)
        action_id = element.get("action_id") if isinstance(element, dict) else None
        if action_id in action_ids:
            errors.append(f"duplicate action_id [json-pointer:{at}/action_id]")
        if isinstance(action_id, str):
            action_ids.add(action_id)
    return errors


def _section_errors(block: Json, where: str) -> list[str]:
    if "text" not in block and "fields" not in block:
        return [f"must provide text or fields [json-pointer:{where}]"]
    errors = _text_object_errors(block["text"], f"{where}/text", 3000) if "text" in block else []
    fields = block.get("fields", [])
    if not isinstance(fields, list) or len(fields) > 10:
        errors.append(f"no more than 10 items allowed [json-pointer:{where}/fields]")
    else:
        for index, item in enumerate(fields):
            errors += _text_object_errors(item, f"{where}/fields/{index}", 2000)
    if "accessory" in block:
        errors += _element_errors(block["accessory"], f"{where}/accessory")
    return errors


def _markdown_errors(block: Json, where: str) -> list[str]:
    text = block.get("text")
    if not isinstance(text, str) or not text:
        return [f"must be more than 0 characters [json-pointer:{where}/text]"]
    return (
        [_too_long(MAX_MARKDOWN_CHARS, f"{where}/text")] if len(text) > MAX_MARKDOWN_CHARS else []
    )


_BLOCK_CHECKS: dict[str, Callable[[Json, str], list[str]]] = {
    "section": _section_errors,
    "header": lambda b, w: _text_object_errors(b.get("text"), f"{w}/text", 150, plain_only=True),
    "actions": lambda b, w: _elements_errors(b, w, 25),
    "context": lambda b, w: _elements_errors(b, w, 10),
    "context_actions": lambda b, w: _elements_errors(b, w, 5),
    "markdown": _markdown_errors,
}


def _block_errors(blocks: list[Any], limit: int) -> list[str]:
    """What Slack lists under ``errors`` for ``invalid_blocks``, json-pointers included."""
    errors = []
    if len(blocks) > limit:
        errors.append(f"no more than {limit} items allowed [json-pointer:/blocks]")
    block_ids: set[str] = set()
    for index, block in enumerate(blocks):
        where = f"/blocks/{index}"
        if not isinstance(block, dict) or block.get("type") not in _BLOCK_TYPES:
            errors.append(f"unsupported type [json-pointer:{where}/type]")
            continue
        block_id = block.get("block_id")
        if block_id is not None:
            if not isinstance(block_id, str) or not 0 < len(block_id) <= 255:
                errors.append(_too_long(255, f"{where}/block_id"))
            elif block_id in block_ids:
                errors.append(f"duplicate block_id [json-pointer:{where}/block_id]")
            else:
                block_ids.add(block_id)
        check = _BLOCK_CHECKS.get(block["type"])
        if check is not None:
            errors += check(block, where)
    return errors


def checked_blocks(value: Any, *, limit: int = MAX_BLOCKS) -> tuple[Json, ...] | None:
    """The blocks, or None when none were sent; refused as Slack refuses them.

    ``limit`` is 50 for a message, 100 for a view.
    """
    if value is None:
        return None
    if not isinstance(value, list):
        raise Refusal("invalid_blocks_format")
    errors = _block_errors(value, limit)
    if errors:
        raise Refusal("invalid_blocks", messages=errors)
    return tuple(value)


def check_markdown(text: str) -> None:
    # not in the stream methods' documented errors; one project saw msg_too_long there
    if len(text) > MAX_MARKDOWN_CHARS:
        raise Refusal("msg_too_long")


def checked_chunks(value: Any) -> tuple[Json, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise Refusal("invalid_chunks")
    for chunk in value:
        kind = chunk.get("type") if isinstance(chunk, dict) else None
        if kind == "markdown_text" and isinstance(chunk.get("text"), str):
            check_markdown(chunk["text"])
        elif kind == "task_update":
            required = all(isinstance(chunk.get(name), str) for name in ("id", "title"))
            if not required or chunk.get("status") not in _TASK_STATUSES:
                raise Refusal("invalid_chunks")
        elif kind == "plan_update" and isinstance(chunk.get("title"), str):
            pass
        elif kind == "blocks" and isinstance(chunk.get("blocks"), list):
            checked_blocks(chunk["blocks"])
        else:
            raise Refusal("invalid_chunks")
    return tuple(value)
