"""Which requests each Claude model accepts: one table, used to build every request.

The Messages API refuses with a 400 what a model does not take, and the
models differ: Claude Sonnet 5.5 turns thinking off with ``between_tools``
and refuses ``disabled``; Opus 5.5 and the Fable models always think; the
4.7 and later models have no thinking budgets; only some take every effort
level. Sources: Anthropic's model pages, the thinking troubleshooting matrix
("Thinking support, defaults, and rejected configurations by model"), the
effort page and the errors page, as of 2026-12-01 (Fable 5.2 released
2026-11-09). No SDK import: settings are checked without loading it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = [
    "EFFORTS",
    "RULES",
    "Effort",
    "ModelRules",
    "RequestShape",
    "refused_by_capabilities",
    "request_shape",
    "rules_for",
]

log = logging.getLogger("agent.anthropic")

Effort = Literal["low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[Effort, ...] = get_args(Effort)
_UP_TO_HIGH: frozenset[Effort] = frozenset({"low", "medium", "high"})
_ALL: frozenset[Effort] = frozenset(EFFORTS)
_NO_XHIGH: frozenset[Effort] = frozenset({"low", "medium", "high", "max"})

Json = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRules:
    """What one model (a family of ids) accepts in a request."""

    name: str
    thinks_by: Literal["adaptive", "budget"] = "adaptive"
    """How thinking is turned on: adaptive (the model decides how much), or only with a
    ``budget_tokens`` (manual thinking: the 4.5 models)."""
    off: Literal["between_tools", "disabled"] | None = "disabled"
    """What turns thinking off; None where the model always thinks."""
    budgets: bool = False
    """Whether ``{"type": "enabled", "budget_tokens": N}`` is accepted at all."""
    efforts: frozenset[Effort] = _ALL
    """The ``output_config.effort`` levels it takes; empty when it takes none."""
    efforts_when_off: frozenset[Effort] = _ALL
    """The levels it takes with thinking off (Sonnet 5.5's ``between_tools``: up to high)."""
    omits_thinking: bool = True
    """Whether thinking comes back empty unless ``display`` asks for it: on these models
    the text between tool calls is a thinking block too, so we ask."""
    sampling: bool = False
    """Whether non-default ``temperature`` / ``top_p`` / ``top_k`` are accepted (we send none)."""
    forced_tool_choice: bool = True
    """Whether ``tool_choice`` of type ``any`` / ``tool`` is accepted (we never force one)."""
    prefill: bool = False
    """Whether a request may end with the assistant's message (with thinking off)."""
    max_output_tokens: int = 128_000
    min_cache_tokens: int = 512
    """The shortest prompt the cache takes; shorter ones are processed uncached."""


def _family(name: str, **rules: Any) -> ModelRules:
    return ModelRules(name=name, **rules)


_ALWAYS_THINKS: dict[str, Any] = {"off": None, "forced_tool_choice": False}
_TAKES_A_BUDGET: dict[str, Any] = {
    "budgets": True,
    "efforts": _NO_XHIGH,
    "efforts_when_off": _NO_XHIGH,
    "omits_thinking": False,
    "sampling": True,
}
_MANUAL_ONLY: dict[str, Any] = {
    "thinks_by": "budget",
    "budgets": True,
    "efforts": frozenset(),  # no effort setting at all (Opus 4.5 aside)
    "efforts_when_off": frozenset(),
    "omits_thinking": False,
    "sampling": True,
    "prefill": True,
    "max_output_tokens": 64_000,
}

RULES: dict[str, ModelRules] = {
    rules.name: rules
    for rules in (
        # always think; refuse forced tool use on every request
        _family("claude-fable-5-2", **_ALWAYS_THINKS),
        _family("claude-mythos-5-2", **_ALWAYS_THINKS),
        _family("claude-fable-5-1", **_ALWAYS_THINKS),
        _family("claude-mythos-5-1", **_ALWAYS_THINKS),
        _family("claude-opus-5-5", **_ALWAYS_THINKS),
        # always think, but forced tool use works with adaptive thinking
        _family("claude-fable-5", off=None),
        _family("claude-mythos-5", off=None),
        # off is between_tools, and only up to high effort
        _family(
            "claude-sonnet-5-5",
            off="between_tools",
            efforts_when_off=_UP_TO_HIGH,
            forced_tool_choice=False,
        ),
        _family("claude-haiku-5-5", efforts_when_off=_UP_TO_HIGH),
        _family("claude-opus-5", efforts_when_off=_UP_TO_HIGH),
        _family("claude-sonnet-5", min_cache_tokens=1024),
        _family("claude-opus-4-8", min_cache_tokens=1024),
        _family("claude-opus-4-7", min_cache_tokens=2048),
        # the last adaptive models that still take a (deprecated) budget
        _family("claude-opus-4-6", **_TAKES_A_BUDGET, min_cache_tokens=4096),
        _family("claude-sonnet-4-6", **_TAKES_A_BUDGET, min_cache_tokens=1024),
        # manual thinking only: a budget, or no thinking
        _family(
            "claude-opus-4-5",
            **_MANUAL_ONLY | {"efforts": _UP_TO_HIGH, "efforts_when_off": _UP_TO_HIGH},
            min_cache_tokens=4096,
        ),
        _family("claude-haiku-4-5", **_MANUAL_ONLY, min_cache_tokens=4096),
        _family("claude-sonnet-4-5", **_MANUAL_ONLY, min_cache_tokens=1024),
    )
}

UNKNOWN = ModelRules(name="an unknown model", off=None, forced_tool_choice=False)
"""For an id the table does not know: the shape every model of the newest family
accepts (adaptive thinking with its text shown, no budget, no sampling parameters,
no forced tool choice, no prefill)."""

_DATED = re.compile(r"-\d{8}$")
_warned: set[str] = set()


def rules_for(model: str) -> ModelRules:
    """The rules of ``model``: an id of the table, or one of its dated snapshots.

    An id the table does not know gets `UNKNOWN`, and the log says so once per id.
    """
    found = RULES.get(_DATED.sub("", model))
    if found is not None:
        return found
    if model not in _warned:
        _warned.add(model)
        log.warning(
            "ANTHROPIC_MODEL=%s is not a model this bot knows: requests take the shape the "
            "newest models accept (adaptive thinking, no budget); known models: %s",
            model,
            ", ".join(RULES),
        )
    return UNKNOWN


@dataclass(frozen=True, slots=True)
class RequestShape:
    """The fields of a request that depend on the model and the settings."""

    thinking: Json
    """The ``thinking`` field."""
    off: Json | None
    """The ``thinking`` field that turns thinking off; None where it cannot be."""
    output_config: Json | None
    problems: tuple[str, ...] = ()
    """Settings the model would refuse, each naming the settings involved."""

    @property
    def manual(self) -> bool:
        """Whether thinking is on with a budget, so the model thinks on every reply."""
        return bool(self.thinking["type"] == "enabled")


def request_shape(
    model: str,
    *,
    thinking: bool | None,
    budget: int | None,
    effort: Effort | None,
    max_tokens: int,
) -> RequestShape:
    """The ``thinking`` and ``output_config`` fields for ``model``, or why it refuses them.

    Args:
        model: The model id.
        thinking: True to think, False to not think, None for the least the model
            offers with ``effort`` (off where it can be turned off).
        budget: Tokens of manual thinking; only where the model takes a budget.
        effort: ``output_config.effort``; None leaves it to the API's default.
        max_tokens: The request's ``max_tokens``.
    """
    rules = rules_for(model)
    problems = list(_problems(rules, model, thinking, budget, effort, max_tokens))
    if rules.off is None or thinking is True or budget is not None:
        on = True
    elif thinking is False:
        on = False
    else:  # no preference: off, unless the effort asked for is deeper than off allows
        on = effort is not None and effort not in rules.efforts_when_off
    off: Json | None = {"type": rules.off} if rules.off is not None else None
    field: Json
    if not on and off is not None:
        field = dict(off)
    elif budget is not None or rules.thinks_by == "budget":
        field = {"type": "enabled", "budget_tokens": budget or 0}
    else:
        field = {"type": "adaptive"}
    if on and rules.omits_thinking:
        # the text between tool calls comes back as thinking: empty unless asked for
        field["display"] = "summarized"
    output = {"effort": effort} if effort is not None else None
    return RequestShape(field, off, output, tuple(problems))


def _problems(
    rules: ModelRules,
    model: str,
    thinking: bool | None,
    budget: int | None,
    effort: Effort | None,
    max_tokens: int,
) -> Iterable[str]:
    named = f"ANTHROPIC_MODEL={model}"
    if rules is UNKNOWN:
        yield from _unknown_problems(named, thinking, budget)
        return
    if max_tokens > rules.max_output_tokens:
        yield (
            f"ANTHROPIC_MAX_TOKENS={max_tokens} is more than {named} can write "
            f"({rules.max_output_tokens})"
        )
    if budget is not None and not rules.budgets:
        yield (
            f"ANTHROPIC_THINKING_BUDGET cannot go with {named}: it has no thinking budgets "
            "(gone since the 4.7 models); unset it, and set ANTHROPIC_EFFORT for how much "
            "it thinks"
        )
    elif budget is not None and thinking is False:
        yield "ANTHROPIC_THINKING_BUDGET is set, but ANTHROPIC_THINKING is false"
    if thinking is True and rules.thinks_by == "budget" and budget is None:
        yield (
            f"ANTHROPIC_THINKING=true with {named} needs ANTHROPIC_THINKING_BUDGET: "
            "this model thinks only with a budget (1024 tokens or more)"
        )
    if thinking is False and rules.off is None:
        yield (
            f"ANTHROPIC_THINKING=false cannot go with {named}: it always thinks; unset "
            "ANTHROPIC_THINKING (ANTHROPIC_EFFORT=low makes it think least)"
        )
    if effort is not None and effort not in rules.efforts:
        offered = _levels(rules.efforts)
        yield (
            f"ANTHROPIC_EFFORT={effort} is not offered by {named} "
            f"({f'it takes {offered}' if offered else 'it takes no effort setting'})"
        )
    elif (
        effort is not None
        and thinking is False
        and rules.off is not None
        and effort not in rules.efforts_when_off
    ):
        yield (
            f"ANTHROPIC_EFFORT={effort} cannot go with ANTHROPIC_THINKING=false on {named}: "
            f"with thinking off it takes {_levels(rules.efforts_when_off)}"
        )


def _unknown_problems(named: str, thinking: bool | None, budget: int | None) -> Iterable[str]:
    # the newest models always think and take no budget: the only shape safe to assume
    if thinking is False:
        yield (
            f"ANTHROPIC_THINKING=false: {named} is not a model this bot knows, so it cannot "
            "tell how to turn its thinking off; unset ANTHROPIC_THINKING"
        )
    if budget is not None:
        yield (
            f"ANTHROPIC_THINKING_BUDGET: {named} is not a model this bot knows, and the newest "
            "models take no thinking budget; unset it, and set ANTHROPIC_EFFORT instead"
        )


def _levels(efforts: frozenset[Effort]) -> str:
    return ", ".join(e for e in EFFORTS if e in efforts)


def refused_by_capabilities(shape: RequestShape, capabilities: Any, model: str) -> list[str]:
    """What the Models API's live ``capabilities`` of ``model`` say it would refuse in ``shape``.

    The table can fall behind the API (a model it does not know, a change since);
    the capabilities are the API's own word. Missing ones prove nothing.
    """
    named = f"ANTHROPIC_MODEL={model}"
    problems: list[str] = []
    thinking_type = shape.thinking["type"]
    types = getattr(getattr(capabilities, "thinking", None), "types", None)
    support = getattr(types, thinking_type, None)
    if support is not None and support.supported is False:
        problems.append(
            f"{named} does not take thinking {thinking_type!r}, says the Models API: "
            "change ANTHROPIC_THINKING (or ANTHROPIC_THINKING_BUDGET)"
        )
    effort = shape.output_config["effort"] if shape.output_config else None
    efforts = getattr(capabilities, "effort", None)
    if effort is not None and efforts is not None:
        level = getattr(efforts, effort, None)
        if efforts.supported is False or (level is not None and level.supported is False):
            problems.append(
                f"ANTHROPIC_EFFORT={effort} is not offered by {named}, says the Models API"
            )
    return problems
