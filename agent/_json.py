"""JSON values: their type, and the compact encoding of stored values (step and tool results)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JsonValue", "dumps", "loads"]

JsonValue = Any
"""Anything `json.dumps` accepts: the result of a tool, the input of a call."""


def dumps(value: Any) -> str:
    """Encode a JSON-able value compactly, keeping non-ASCII text as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(text: str) -> Any:
    """Decode what `dumps` wrote."""
    return json.loads(text)
