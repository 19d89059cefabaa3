"""What each model refuses: thinking, effort, sampling, forced tools, prefill, max_tokens.

``check_model_rules`` runs after the request's shape has passed, against the row
of ``anthropic_models`` the request names. Messages are the documented ones
where the errors, thinking and migration pages quote them; where they do not,
the comment at the message says so and the text is the likeliest guess (often
a third party's observation of the real API).
"""

from __future__ import annotations

from typing import Any, TypeAlias

from tests.fakes.anthropic_models import EFFORTS, ModelRules

__all__ = [
    "BETA_BLOCK_BINDING",
    "BETA_DISPLAY_UPDATES",
    "BETA_INTERLEAVED",
    "Refused",
    "check_model_rules",
    "effective_thinking",
    "reply_display",
]

Json: TypeAlias = dict[str, Any]

BETA_DISPLAY_UPDATES = "thinking-display-updates-2026-08-18"
BETA_BLOCK_BINDING = "thinking-binding-controls-2026-08-01"
BETA_INTERLEAVED = "interleaved-thinking-2025-05-14"
"""With it, manual thinking may spend more than ``max_tokens`` across tool calls."""

_THINKING_TYPES = ("adaptive", "between_tools", "disabled", "enabled")
_FIELDS = {
    "adaptive": frozenset({"type", "display", "block_binding"}),
    "enabled": frozenset({"type", "budget_tokens", "display"}),
    # "display is invalid with thinking.type: disabled"; between_tools "takes no other field"
    "disabled": frozenset({"type"}),
    "between_tools": frozenset({"type"}),
}
_OFF_CAP = ("low", "medium", "high")
_BINDING_MODELS = frozenset({"claude-sonnet-5-5", "claude-haiku-5-5"})

_USE_ADAPTIVE = (
    'Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior.'
)
PREFILL = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)
FORCED_TOOL = 'tool_choice: type "tool" and "any" are not supported for this model.'


class Refused(Exception):
    """The request is one the real API would refuse: a 400 unless said otherwise."""

    def __init__(
        self, message: str, status: int = 400, error_type: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type


def effective_thinking(body: Json, model: ModelRules) -> str:
    """The thinking type the request runs with: the one sent, or the model's default."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and isinstance(thinking.get("type"), str):
        return str(thinking["type"])
    return model.thinking_default


def reply_display(body: Json, model: ModelRules) -> str:
    """How thinking comes back: "summarized", "omitted" or "updates".

    ``between_tools`` sends its progress notes with their text ("the text comes
    back without display"). Thinking that is off has no display; a scripted
    reply that thinks anyway is sent as the script wrote it.
    """
    kind = effective_thinking(body, model)
    if kind not in ("adaptive", "enabled"):
        return "summarized"
    thinking = body.get("thinking")
    display = thinking.get("display") if isinstance(thinking, dict) else None
    return str(display) if display else model.display_default


def check_model_rules(
    body: Json, model: ModelRules, *, counting: bool, betas: frozenset[str]
) -> None:
    """Refuse what ``model`` refuses; ``counting`` is count_tokens (no max_tokens, no sampling).

    Whether count_tokens enforces the prefill, sampling and thinking-type rules
    is not documented; it gets the thinking, effort and tool_choice rules (forced
    tool choice is documented there), not prefill or sampling, which it does not
    take.
    """
    if not counting:
        _check_max_tokens(body["max_tokens"], model)
    kind = _check_thinking_config(body, model, counting=counting, betas=betas)
    _check_effort(body.get("output_config"), model, kind)
    thinking_on = kind in ("adaptive", "enabled")
    if not counting:
        _check_sampling(body, model, thinking_on=thinking_on)
    _check_tool_choice(body.get("tool_choice"), model, kind)
    if not counting and body["messages"][-1].get("role") == "assistant":
        _check_prefill(model, thinking_on=thinking_on)


def _check_max_tokens(max_tokens: int, model: ModelRules) -> None:
    if max_tokens > model.max_output:
        raise Refused(
            f"max_tokens: {max_tokens} > {model.max_output}, which is the maximum allowed "
            f"number of output tokens for {model.id}"
        )


# --- thinking ------------------------------------------------------------------------


def _check_thinking_config(
    body: Json, model: ModelRules, *, counting: bool, betas: frozenset[str]
) -> str:
    thinking = body.get("thinking")
    if thinking is None:
        return model.thinking_default
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if not isinstance(thinking, dict) or kind not in _THINKING_TYPES:
        # pydantic's wording for a bad tag, as the API's validation errors read
        raise Refused(
            f"thinking: Input tag {kind!r} found using 'type' does not match any of the "
            "expected tags: 'adaptive', 'between_tools', 'disabled', 'enabled'"
        )
    if kind not in model.thinking_types:
        raise Refused(_type_refusal(kind, model))
    for name in thinking:
        if name not in _FIELDS[kind] or (
            name == "block_binding" and BETA_BLOCK_BINDING not in betas
        ):
            # the errors page: a 400 "ending in `block_binding: Extra inputs are not permitted`"
            raise Refused(f"thinking.{kind}.{name}: Extra inputs are not permitted")
    if "display" in thinking:
        _check_display(thinking["display"], kind, model, betas)
    if "block_binding" in thinking:
        _check_block_binding(thinking["block_binding"], model)
    if kind == "enabled":
        _check_budget(
            thinking.get("budget_tokens"), None if counting else body["max_tokens"], betas
        )
    return str(kind)


def _type_refusal(kind: str, model: ModelRules) -> str:
    if kind == "disabled" and "between_tools" in model.thinking_types:
        return (
            'To turn thinking off on this model, send "thinking": {"type": "between_tools"} '
            'instead of {"type": "disabled"}. The model does not think before responding. '
            "The short updates it writes between tool calls come back as thinking blocks."
        )
    if kind in ("disabled", "enabled"):
        return f'"thinking.type.{kind}" is not supported for this model. {_USE_ADAPTIVE}'
    if kind == "between_tools":
        return '"thinking.type.between_tools" is not supported for this model.'
    return "adaptive thinking is not supported on this model"


def _check_display(display: Any, kind: str, model: ModelRules, betas: frozenset[str]) -> None:
    # Without its beta header "updates" gets "the same 400 as an unknown display
    # value"; that message is not documented: pydantic's wording for a bad literal.
    allowed = ["summarized", "omitted"]
    if model.display_updates and BETA_DISPLAY_UPDATES in betas:
        allowed.append("updates")
    if display is not None and display not in allowed:
        raise Refused(f"thinking.{kind}.display: Input should be {_one_of(allowed)}")


def _one_of(values: list[str]) -> str:
    quoted = [f"'{value}'" for value in values]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _check_block_binding(binding: Any, model: ModelRules) -> None:
    # "block_binding works only with adaptive thinking on Sonnet 5.5 and Haiku 5.5";
    # the message elsewhere is not documented
    if model.id not in _BINDING_MODELS:
        raise Refused("thinking.adaptive.block_binding: not supported for this model")
    if binding is not None and not isinstance(binding, dict):
        raise Refused("thinking.adaptive.block_binding: Input should be a valid dictionary")
    behavior = (binding or {}).get("prefix_mismatch_behavior")
    if behavior not in (None, "error", "drop_block"):
        raise Refused(
            "thinking.adaptive.block_binding.prefix_mismatch_behavior: "
            "Input should be 'error' or 'drop_block'"
        )


def _check_budget(budget: Any, max_tokens: int | None, betas: frozenset[str]) -> None:
    # The limits are documented ("at least 1,024", "less than max_tokens" unless
    # interleaved); the messages are not: pydantic's wording, and the one the API
    # has long sent for a budget that does not fit.
    if budget is None:
        raise Refused("thinking.enabled.budget_tokens: Field required")
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise Refused("thinking.enabled.budget_tokens: Input should be a valid integer")
    if budget < 1024:
        raise Refused(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        )
    if max_tokens is not None and budget >= max_tokens and BETA_INTERLEAVED not in betas:
        raise Refused(
            "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
            "documentation at https://docs.claude.com/en/docs/build-with-claude/"
            "extended-thinking#max-tokens-and-context-window-size"
        )


# --- effort, sampling, tools, prefill ------------------------------------------------


def _check_effort(output_config: Any, model: ModelRules, kind: str) -> None:
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    if effort is None:
        return
    if effort not in EFFORTS:
        raise Refused(
            "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
        )
    if not model.efforts:
        # Haiku 4.5 and Sonnet 4.5 have no effort; the message is not documented
        raise Refused("output_config.effort: effort is not supported on this model.")
    if effort not in model.efforts:
        # not documented; worded as the documented thinking-off refusal below
        raise Refused(f"output_config.effort '{effort}' is not supported on this model.")
    if kind in model.capped_when_off and effort not in _OFF_CAP:
        # documented for Sonnet 5.5 and Haiku 5.5; Opus 5 refuses too, its text not quoted
        raise Refused(
            f"output_config.effort '{effort}' is not supported when thinking is disabled on "
            "this model. Use effort 'high' or below, or enable thinking."
        )


def _deprecated(name: str) -> Refused:
    # The notes have no official text; a third party observed this for temperature
    # on Opus 4.7, and it is taken for top_p and top_k alike.
    return Refused(f"`{name}` is deprecated for this model.")


_BOTH = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
"""A third party's observation on Haiku 4.5 and Sonnet 4.5 (and, it says, the 4.6 models)."""


def _check_sampling(body: Json, model: ModelRules, *, thinking_on: bool) -> None:
    """Non-default sampling values, as each model takes them.

    "Non-default" is not defined on the pages: ``temperature`` defaults to 1 in the
    API reference, while ``top_p`` and ``top_k`` have no default, so any value of
    theirs counts as set. Haiku 5.5's own defaults (temperature 1, top_p 0.99) are
    documented.
    """
    temperature, top_p, top_k = (body.get(k) for k in ("temperature", "top_p", "top_k"))
    if model.sampling == "refused":
        if temperature is not None and temperature != 1:
            raise _deprecated("temperature")
        for name, value in (("top_p", top_p), ("top_k", top_k)):
            if value is not None:
                raise _deprecated(name)
    elif model.sampling == "haiku":
        # documented rule; the messages are not documented
        if temperature is not None and top_p is not None:
            raise Refused(_BOTH)
        if temperature is not None and temperature != 1:
            raise Refused("temperature: must be 1 on this model, or left out")
        if top_p is not None and top_p != 0.99:
            raise Refused("top_p: must be 0.99 on this model, or left out")
        if top_k is not None:
            raise _deprecated("top_k")
    else:
        if temperature is not None and top_p is not None:
            raise Refused(_BOTH)
        if thinking_on:
            _check_sampling_while_thinking(temperature, top_p, top_k)


def _check_sampling_while_thinking(temperature: Any, top_p: Any, top_k: Any) -> None:
    # "temperature and top_k are incompatible with thinking, and top_p is allowed at
    # values between 0.95 and 1"; the messages are not documented
    if temperature is not None and temperature != 1:
        raise Refused(
            "`temperature` may only be set to 1 when thinking is enabled or in interleaved "
            "thinking mode."
        )
    if top_k is not None:
        raise Refused("`top_k` is not supported when thinking is enabled.")
    if top_p is not None and not 0.95 <= top_p <= 1:
        raise Refused("`top_p` must be between 0.95 and 1 when thinking is enabled.")


def _check_tool_choice(tool_choice: Any, model: ModelRules, kind: str) -> None:
    forced = isinstance(tool_choice, dict) and tool_choice.get("type") in ("any", "tool")
    if not forced or model.forced_tool_choice == "accepted":
        return
    if model.forced_tool_choice == "refused":
        raise Refused(FORCED_TOOL)
    if kind == "enabled":
        # "results in an error"; the text is a third party's observation
        raise Refused("Thinking may not be enabled when tool_choice forces tool use.")


def _check_prefill(model: ModelRules, *, thinking_on: bool) -> None:
    # The 4.5 models take a prefill only with thinking off ("You can't prefill the
    # assistant response while thinking is on"); that refusal's own text is not
    # documented, so it is the 4.6+ one.
    if model.prefill == "refused" or thinking_on:
        raise Refused(PREFILL)
