"""Compact JSON for stored values (step results, tool results)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dumps", "loads"]


def dumps(value: Any) -> str:
    """Encode a JSON-able value compactly, keeping non-ASCII text as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(text: str) -> Any:
    """Decode what `dumps` wrote."""
    return json.loads(text)
