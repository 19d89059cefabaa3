"""The fake Messages API's own table of Claude models and what each one refuses.

Written from Anthropic's documentation (the research notes of 2026-12-01), not
from the product's code: were it shared, a wrong rule would pass both sides of a
test. ``anthropic_rules`` turns a row into refusals, ``anthropic_thinking`` reads
the thinking-block bindings, and the Models API answers with ``model_info``.

Where the documentation is silent the row says so in a comment and takes the
most plausible value; the rules module does the same for messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = [
    "EFFORTS",
    "MODELS",
    "Effort",
    "ModelRules",
    "ThinkingType",
    "find_model",
    "model_info",
]

Json: TypeAlias = dict[str, Any]
ThinkingType: TypeAlias = Literal["adaptive", "between_tools", "disabled", "enabled"]
Effort: TypeAlias = Literal["low", "medium", "high", "xhigh", "max"]
Line: TypeAlias = Literal["haiku", "sonnet", "opus", "fable", "mythos"]

EFFORTS: tuple[Effort, ...] = ("low", "medium", "high", "xhigh", "max")
_ALL_EFFORTS = EFFORTS
_NO_XHIGH: tuple[Effort, ...] = ("low", "medium", "high", "max")
_BASIC: tuple[Effort, ...] = ("low", "medium", "high")

EPOCH = "1970-01-01T00:00:00Z"
"""The Models API's ``created_at`` "if the release date is unknown": most of ours are."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRules:
    """One model: its limits, and which request shapes it accepts."""

    id: str
    """The canonical id: dated for the models before 4.6, which also answer to an alias."""
    display_name: str
    line: Line
    aliases: tuple[str, ...] = ()
    created_at: str = EPOCH
    lifecycle: Literal["active", "deprecated"] = "active"
    deprecated_at: str | None = None
    retires_at: str | None = None
    context_window: int = 1_000_000
    max_output: int = 128_000

    thinking_types: frozenset[ThinkingType]
    """The ``thinking.type`` values that are not a 400."""
    thinking_default: Literal["adaptive", "disabled"]
    """What a request without ``thinking`` runs with."""
    display_default: Literal["summarized", "omitted"]
    display_updates: bool = False
    """Whether ``display: "updates"`` is accepted (it needs its beta header too)."""
    efforts: tuple[Effort, ...]
    """``output_config.effort`` levels accepted; empty when the model has no effort at all."""
    effort_default: Effort | None
    capped_when_off: frozenset[ThinkingType] = frozenset()
    """Thinking types that turn thinking off and then allow only low, medium or high effort."""
    sampling: Literal["refused", "haiku", "free_until_thinking"]
    """Non-default temperature / top_p / top_k: a 400 on every request; Haiku 5.5's
    special defaults; or accepted while thinking is off, limited while it is on."""
    forced_tool_choice: Literal["accepted", "refused", "refused_with_enabled"]
    """``tool_choice`` ``any`` / ``tool``: fine, a 400 always, or a 400 under manual thinking."""
    prefill: Literal["refused", "refused_with_thinking"]
    """A last message from the assistant: a 400 always, or only while thinking is on."""
    conversation_bound: bool = False
    """Its thinking blocks are valid only after the conversation they were made in."""
    reads_thinking_of: frozenset[str] = frozenset()
    """Other models (canonical ids) whose thinking blocks this one reads; the rest are dropped."""
    min_cache_tokens: int

    def reads(self, model: str) -> bool:
        """Whether a thinking block made by ``model`` (a canonical id) is shown to this one."""
        return model == self.id or model in self.reads_thinking_of


# Who reads whose thinking blocks is documented for four rows only (Sonnet 5.5,
# Opus 5.5, Fable / Mythos 5.1 and, by its readers, Fable 5.2); every other model
# here reads only its own, which is a guess. "Sonnet" and "earlier" in those rows
# are read as the models released before the reader, Sonnet 5.5 aside (only Opus
# 5.5 reads it), and Haiku 5.5 is read by nobody else (not documented).
_OLDER_THAN_OPUS_5 = frozenset(
    {
        "claude-opus-4-8",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-sonnet-4-6",
        "claude-opus-4-5-20251101",
        "claude-haiku-4-5-20251001",
        "claude-sonnet-4-5-20250929",
    }
)
_READ_BY_SONNET_5_5 = _OLDER_THAN_OPUS_5 | {"claude-sonnet-5"}
_READ_BY_OPUS_5_5 = _READ_BY_SONNET_5_5 | {"claude-opus-5", "claude-sonnet-5-5"}
_READ_BY_FABLE_5_1 = _READ_BY_SONNET_5_5 | {
    "claude-opus-5-5",
    "claude-opus-5",
    "claude-fable-5",
    "claude-mythos-5",
}
# Fable 5.2: "only Claude Fable 5.2 and Claude Mythos 5.2 read" its blocks; what it
# reads itself is not documented: taken as Fable 5.1's list plus the 5.1 pair.
_READ_BY_FABLE_5_2 = _READ_BY_FABLE_5_1 | {"claude-fable-5-1", "claude-mythos-5-1"}

_ADAPTIVE_ONLY: frozenset[ThinkingType] = frozenset({"adaptive"})
_ADAPTIVE_OR_OFF: frozenset[ThinkingType] = frozenset({"adaptive", "disabled"})
_ANY_THINKING: frozenset[ThinkingType] = frozenset({"adaptive", "disabled", "enabled"})
_MANUAL_ONLY: frozenset[ThinkingType] = frozenset({"enabled", "disabled"})


def _fable_5_2_like(id: str, name: str, line: Line, *, bound: bool) -> ModelRules:
    # Fable 5.2's migration guide gives thinking, effort and prefill; sampling and
    # forced tool choice come from a third party ("same capabilities as
    # claude-fable-5-1"), and the display default, "updates" and the cache minimum
    # are not documented: taken from Fable 5.1.
    other = "claude-mythos-5-2" if line == "fable" else "claude-fable-5-2"
    return ModelRules(
        id=id,
        display_name=name,
        line=line,
        created_at="2026-11-09T00:00:00Z",
        thinking_types=_ADAPTIVE_ONLY,
        thinking_default="adaptive",
        display_default="omitted",
        display_updates=True,
        efforts=_ALL_EFFORTS,
        effort_default="high",
        sampling="refused",
        forced_tool_choice="refused",
        prefill="refused",
        conversation_bound=bound,
        reads_thinking_of=_READ_BY_FABLE_5_2 | {other},
        min_cache_tokens=512,
    )


def _fable_5_1_like(id: str, name: str, line: Line, *, bound: bool) -> ModelRules:
    other = "claude-mythos-5-1" if line == "fable" else "claude-fable-5-1"
    return ModelRules(
        id=id,
        display_name=name,
        line=line,
        thinking_types=_ADAPTIVE_ONLY,
        thinking_default="adaptive",
        display_default="omitted",
        display_updates=True,
        efforts=_ALL_EFFORTS,
        effort_default="high",
        sampling="refused",
        forced_tool_choice="refused",
        prefill="refused",
        conversation_bound=bound,
        # that the 5.1 pair read each other is not documented (5.2's pair do)
        reads_thinking_of=_READ_BY_FABLE_5_1 | {other},
        min_cache_tokens=512,
    )


def _fable_5_like(id: str, name: str, line: Line, *, updates: bool) -> ModelRules:
    return ModelRules(
        id=id,
        display_name=name,
        line=line,
        thinking_types=_ADAPTIVE_ONLY,
        thinking_default="adaptive",
        display_default="omitted",
        # the thinking page lists "updates" for Fable 5, not for Mythos 5
        display_updates=updates,
        efforts=_ALL_EFFORTS,
        effort_default="high",
        sampling="refused",
        # the thinking page excepts only Fable / Mythos 5.1 from forced tool use
        forced_tool_choice="accepted",
        prefill="refused",
        min_cache_tokens=512,
    )


def _opus_4_8_like(id: str, name: str, *, min_cache_tokens: int) -> ModelRules:
    return ModelRules(
        id=id,
        display_name=name,
        line="opus",
        thinking_types=_ADAPTIVE_OR_OFF,
        thinking_default="disabled",
        display_default="omitted",
        efforts=_ALL_EFFORTS,
        effort_default="high",
        sampling="refused",
        forced_tool_choice="accepted",
        prefill="refused",
        min_cache_tokens=min_cache_tokens,
    )


def _four_six(id: str, name: str, line: Line, *, min_cache_tokens: int) -> ModelRules:
    return ModelRules(
        id=id,
        display_name=name,
        line=line,
        thinking_types=_ANY_THINKING,
        thinking_default="disabled",
        display_default="summarized",
        efforts=_NO_XHIGH,
        effort_default="high",
        sampling="free_until_thinking",
        forced_tool_choice="refused_with_enabled",
        prefill="refused",
        min_cache_tokens=min_cache_tokens,
    )


def _four_five(
    id: str,
    name: str,
    line: Line,
    alias: str,
    *,
    created_at: str,
    efforts: tuple[Effort, ...],
    min_cache_tokens: int,
    lifecycle: Literal["active", "deprecated"] = "active",
    deprecated_at: str | None = None,
    retires_at: str | None = None,
) -> ModelRules:
    return ModelRules(
        id=id,
        display_name=name,
        line=line,
        aliases=(alias,),
        created_at=created_at,
        lifecycle=lifecycle,
        deprecated_at=deprecated_at,
        retires_at=retires_at,
        context_window=200_000,
        max_output=64_000,
        thinking_types=_MANUAL_ONLY,
        thinking_default="disabled",
        display_default="summarized",
        efforts=efforts,
        # Opus 4.5's default effort is not documented: "high", as most models'
        effort_default="high" if efforts else None,
        sampling="free_until_thinking",
        forced_tool_choice="refused_with_enabled",
        prefill="refused_with_thinking",
        min_cache_tokens=min_cache_tokens,
    )


MODELS: tuple[ModelRules, ...] = (
    # newest first, as the Models API lists them (the order of the 5.x releases
    # before Fable 5.1 is not documented; the retirement dates order the rest)
    _fable_5_2_like("claude-fable-5-2", "Claude Fable 5.2", "fable", bound=True),
    # that Mythos 5.2's blocks are conversation-bound like Fable 5.2's is not documented
    _fable_5_2_like("claude-mythos-5-2", "Claude Mythos 5.2", "mythos", bound=False),
    ModelRules(
        id="claude-haiku-5-5",
        display_name="Claude Haiku 5.5",
        line="haiku",
        thinking_types=_ADAPTIVE_OR_OFF,
        thinking_default="adaptive",
        display_default="omitted",
        # "updates" is not documented for Haiku 5.5
        efforts=_ALL_EFFORTS,
        effort_default="medium",
        capped_when_off=frozenset({"disabled"}),
        sampling="haiku",
        forced_tool_choice="accepted",
        prefill="refused",
        conversation_bound=True,
        min_cache_tokens=512,
    ),
    ModelRules(
        id="claude-sonnet-5-5",
        display_name="Claude Sonnet 5.5",
        line="sonnet",
        thinking_types=frozenset({"adaptive", "between_tools"}),
        thinking_default="adaptive",
        display_default="omitted",
        display_updates=True,
        efforts=_ALL_EFFORTS,
        effort_default="high",
        capped_when_off=frozenset({"between_tools"}),
        sampling="refused",
        forced_tool_choice="refused",
        prefill="refused",
        conversation_bound=True,
        reads_thinking_of=_READ_BY_SONNET_5_5,
        min_cache_tokens=512,
    ),
    ModelRules(
        id="claude-opus-5-5",
        display_name="Claude Opus 5.5",
        line="opus",
        thinking_types=_ADAPTIVE_ONLY,
        thinking_default="adaptive",
        display_default="omitted",
        display_updates=True,
        efforts=_ALL_EFFORTS,
        effort_default="medium",
        sampling="refused",
        forced_tool_choice="refused",
        prefill="refused",
        conversation_bound=True,
        reads_thinking_of=_READ_BY_OPUS_5_5,
        min_cache_tokens=512,
    ),
    _fable_5_1_like("claude-fable-5-1", "Claude Fable 5.1", "fable", bound=True),
    _fable_5_1_like("claude-mythos-5-1", "Claude Mythos 5.1", "mythos", bound=False),
    _fable_5_like("claude-fable-5", "Claude Fable 5", "fable", updates=True),
    _fable_5_like("claude-mythos-5", "Claude Mythos 5", "mythos", updates=False),
    ModelRules(
        id="claude-opus-5",
        display_name="Claude Opus 5",
        line="opus",
        thinking_types=_ADAPTIVE_OR_OFF,
        thinking_default="adaptive",
        display_default="omitted",
        efforts=_ALL_EFFORTS,
        effort_default="high",
        capped_when_off=frozenset({"disabled"}),
        sampling="refused",
        forced_tool_choice="accepted",
        prefill="refused",
        min_cache_tokens=512,
    ),
    ModelRules(
        id="claude-sonnet-5",
        display_name="Claude Sonnet 5",
        line="sonnet",
        thinking_types=_ADAPTIVE_OR_OFF,
        thinking_default="adaptive",
        display_default="omitted",
        efforts=_ALL_EFFORTS,
        effort_default="high",
        sampling="refused",
        forced_tool_choice="accepted",
        prefill="refused",
        min_cache_tokens=1024,
    ),
    _opus_4_8_like("claude-opus-4-8", "Claude Opus 4.8", min_cache_tokens=1024),
    _opus_4_8_like("claude-opus-4-7", "Claude Opus 4.7", min_cache_tokens=2048),
    _four_six("claude-sonnet-4-6", "Claude Sonnet 4.6", "sonnet", min_cache_tokens=1024),
    _four_six("claude-opus-4-6", "Claude Opus 4.6", "opus", min_cache_tokens=4096),
    # the SDK warns that Opus 4.5 reaches end of life on 2027-01-22; when it was
    # deprecated is not documented (three months before is a guess)
    _four_five(
        "claude-opus-4-5-20251101",
        "Claude Opus 4.5",
        "opus",
        "claude-opus-4-5",
        created_at="2025-11-01T00:00:00Z",
        efforts=_BASIC,
        min_cache_tokens=4096,
        lifecycle="deprecated",
        deprecated_at="2026-10-22T00:00:00Z",
        retires_at="2027-01-22T00:00:00Z",
    ),
    _four_five(
        "claude-haiku-4-5-20251001",
        "Claude Haiku 4.5",
        "haiku",
        "claude-haiku-4-5",
        created_at="2025-10-01T00:00:00Z",
        efforts=(),
        min_cache_tokens=4096,
    ),
    # Possibly retired by now (a third party quotes the TypeScript SDK: deprecated,
    # end of life 2026-11-30); the fake keeps it callable, as deprecated and overdue.
    # Its context window is not in the notes: 200K, as the other 4.5 models.
    _four_five(
        "claude-sonnet-4-5-20250929",
        "Claude Sonnet 4.5",
        "sonnet",
        "claude-sonnet-4-5",
        created_at="2025-09-29T00:00:00Z",
        efforts=(),
        min_cache_tokens=1024,
        lifecycle="deprecated",
        deprecated_at="2026-08-30T00:00:00Z",
        retires_at="2026-11-30T00:00:00Z",
    ),
)

_BY_ID: dict[str, ModelRules] = {
    name: model for model in MODELS for name in (model.id, *model.aliases)
}


def find_model(id: str) -> ModelRules | None:
    """The model an id or alias names, or None for one the API does not know."""
    return _BY_ID.get(id)


# --- the Models API ------------------------------------------------------------------


def _support(value: bool) -> Json:
    return {"supported": value}


def _capabilities(model: ModelRules) -> Json:
    """Every key of SDK 2.15's ``ModelCapabilities``, present as the API promises.

    Thinking and effort come from the row; the notes say nothing about the rest
    (batch, citations, images, PDFs, structured outputs, context management,
    server tools), so every model here claims them.
    """
    types = {kind: _support(kind in model.thinking_types) for kind in _THINKING_TYPE_KEYS}
    efforts = {level: _support(level in model.efforts) for level in EFFORTS}
    everything = _support(True)
    return {
        "batch": everything,
        "citations": everything,
        "code_execution": everything,
        "context_management": {
            "supported": True,
            "clear_thinking_20251015": everything,
            "clear_tool_uses_20250919": everything,
            "compact_20260112": everything,
        },
        "effort": {"supported": bool(model.efforts), **efforts},
        "image_input": everything,
        "pdf_input": everything,
        "server_tools": {"supported": True, "web_search": everything, "code_execution": everything},
        "structured_outputs": everything,
        "thinking": {"supported": True, "types": types},
    }


_THINKING_TYPE_KEYS: tuple[ThinkingType, ...] = ("adaptive", "between_tools", "disabled", "enabled")


def model_info(model: ModelRules) -> Json:
    """The ModelInfo object of ``GET /v1/models/{id}``, shaped as SDK 2.15 parses it."""
    return {
        "type": "model",
        "id": model.id,
        "display_name": model.display_name,
        "created_at": model.created_at,
        "capabilities": _capabilities(model),
        "max_input_tokens": model.context_window,
        "max_tokens": model.max_output,
        "lifecycle": model.lifecycle,
        "deprecated_at": model.deprecated_at,
        "retires_at": model.retires_at,
        "line": model.line,
    }
