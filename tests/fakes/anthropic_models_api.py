"""The Models API of the fake: ``GET /v1/models`` pages, from the fake's own table."""

from __future__ import annotations

from typing import Any, TypeAlias

from multidict import MultiMapping

from tests.fakes.anthropic_models import ModelRules, model_info
from tests.fakes.anthropic_rules import Refused

__all__ = ["models_page"]

Json: TypeAlias = dict[str, Any]

_LIFECYCLES = ("active", "deprecated", "retired")


def models_page(models: list[ModelRules], query: MultiMapping[str]) -> Json:
    """One page of ``GET /v1/models``, newest first, as the list reference describes it.

    The reference gives the parameters and their limits, not the messages for
    bad ones: those are pydantic's wording, or a plain sentence.
    """
    lifecycles = query.getall("lifecycle[]", []) + query.getall("lifecycle", [])
    if any(value not in _LIFECYCLES for value in lifecycles):
        raise Refused("lifecycle: Input should be 'active', 'deprecated' or 'retired'")
    # "When omitted, the list contains the active and deprecated models"
    wanted = set(lifecycles or ("active", "deprecated"))
    models = [m for m in models if m.lifecycle in wanted]
    limit = _limit(query.get("limit", "20"))
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None and before is not None:
        raise Refused("after_id and before_id cannot both be set")
    ids = [m.id for m in models]
    for name, cursor in (("after_id", after), ("before_id", before)):
        if cursor is not None and cursor not in ids:
            raise Refused(f"{name}: {cursor} is not a model in this list")
    if before is not None:
        end = ids.index(before)
        page, has_more = models[max(0, end - limit) : end], end > limit
    else:
        start = ids.index(after) + 1 if after is not None else 0
        page, has_more = models[start : start + limit], start + limit < len(models)
    return {
        "data": [model_info(m) for m in page],
        "has_more": has_more,
        "first_id": page[0].id if page else None,
        "last_id": page[-1].id if page else None,
    }


def _limit(value: str) -> int:
    try:
        limit = int(value)
    except ValueError:
        raise Refused("limit: Input should be a valid integer") from None
    if limit < 1:
        raise Refused("limit: Input should be greater than or equal to 1")
    if limit > 1000:
        raise Refused("limit: Input should be less than or equal to 1000")
    return limit
