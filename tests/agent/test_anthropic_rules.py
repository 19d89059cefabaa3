"""The table of what each Claude model accepts, and the settings it refuses at start.

What the API itself does with each shape is shown against the strict fake in
``test_anthropic_models.py``; these tests pin the table's own decisions.
"""

from __future__ import annotations

import logging

import pytest

from agent import DEFAULT_MODEL, AnthropicSettings, ConfigError
from agent.models.anthropic.rules import RULES, UNKNOWN, request_shape, rules_for


def shape(model: str = DEFAULT_MODEL, **settings: object):
    given = {"thinking": None, "budget": None, "effort": None, "max_tokens": 16_000}
    return request_shape(model, **{**given, **settings})  # type: ignore[arg-type]


def test_the_default_model_thinks_off_with_between_tools_and_no_effort():
    default = shape()

    assert default.thinking == {"type": "between_tools"}  # never "disabled": a 400 there
    assert default.output_config is None
    assert default.problems == ()
    AnthropicSettings(api_key="k").check()  # the defaults start


@pytest.mark.parametrize(
    ("model", "thinking"),
    [
        ("claude-sonnet-5-5", {"type": "adaptive", "display": "summarized"}),
        ("claude-opus-5-5", {"type": "adaptive", "display": "summarized"}),
        ("claude-sonnet-4-6", {"type": "adaptive"}),  # shows its thinking by default
    ],
)
def test_thinking_on_is_adaptive_and_asks_for_the_text_where_it_would_come_back_empty(
    model, thinking
):
    assert shape(model, thinking=True).thinking == thinking


def test_a_model_that_always_thinks_thinks_when_nobody_asked():
    for name in ("claude-opus-5-5", "claude-fable-5-2", "claude-fable-5-1"):
        assert shape(name).thinking == {"type": "adaptive", "display": "summarized"}


def test_an_effort_deeper_than_thinking_off_allows_turns_thinking_on_when_nobody_chose():
    assert shape(effort="xhigh").thinking == {"type": "adaptive", "display": "summarized"}
    assert shape(effort="high").thinking == {"type": "between_tools"}
    assert shape(effort="high").output_config == {"effort": "high"}


def test_a_budget_is_manual_thinking_only_where_budgets_exist():
    assert shape("claude-haiku-4-5", thinking=True, budget=2048).thinking == {
        "type": "enabled",
        "budget_tokens": 2048,
    }
    assert shape("claude-haiku-4-5").thinking == {"type": "disabled"}
    assert shape("claude-sonnet-5").thinking == {"type": "disabled"}


@pytest.mark.parametrize(
    ("model", "settings", "named"),
    [
        ("claude-sonnet-5-5", {"thinking": False, "effort": "xhigh"}, "ANTHROPIC_THINKING"),
        ("claude-sonnet-5-5", {"thinking": False, "effort": "max"}, "ANTHROPIC_EFFORT=max"),
        ("claude-sonnet-5-5", {"budget": 2048}, "ANTHROPIC_THINKING_BUDGET"),
        ("claude-opus-5-5", {"thinking": False}, "ANTHROPIC_THINKING=false"),
        ("claude-fable-5-2", {"budget": 4096}, "ANTHROPIC_THINKING_BUDGET"),
        ("claude-haiku-4-5", {"effort": "low"}, "ANTHROPIC_EFFORT=low"),
        ("claude-opus-4-6", {"effort": "xhigh"}, "ANTHROPIC_EFFORT=xhigh"),
        ("claude-haiku-4-5", {"thinking": True}, "ANTHROPIC_THINKING_BUDGET"),
        ("claude-sonnet-5-5", {"max_tokens": 200_000}, "ANTHROPIC_MAX_TOKENS=200000"),
        ("claude-haiku-4-5", {"max_tokens": 100_000}, "ANTHROPIC_MAX_TOKENS=100000"),
    ],
)
def test_settings_the_model_would_refuse_stop_the_start_naming_them(model, settings, named):
    [problem] = shape(model, **settings).problems
    assert named in problem
    assert f"ANTHROPIC_MODEL={model}" in problem or "ANTHROPIC_THINKING" in problem

    fields = {
        "thinking": settings.get("thinking"),
        "thinking_budget": settings.get("budget"),
        "effort": settings.get("effort"),
        "max_tokens": settings.get("max_tokens", 16_000),
    }
    with pytest.raises(ConfigError, match=named):
        AnthropicSettings(api_key="k", model=model, **fields).check()


def test_thinking_off_with_a_deep_effort_names_both_settings():
    [problem] = shape(thinking=False, effort="xhigh").problems

    assert "ANTHROPIC_EFFORT=xhigh" in problem
    assert "ANTHROPIC_THINKING=false" in problem
    assert "low, medium, high" in problem


def test_a_dated_snapshot_has_the_rules_of_its_model():
    assert rules_for("claude-haiku-4-5-20251001") is RULES["claude-haiku-4-5"]
    assert rules_for("claude-opus-4-5-20251101") is RULES["claude-opus-4-5"]
    # a longer id is another model, never a prefix match
    assert rules_for("claude-sonnet-5-5") is not rules_for("claude-sonnet-5")


def test_an_unknown_model_gets_the_newest_shape_and_the_log_says_so_once(caplog):
    caplog.set_level(logging.WARNING, logger="agent.anthropic")

    first = shape("claude-sonnet-9-test")
    again = shape("claude-sonnet-9-test")

    assert rules_for("claude-sonnet-9-test") is UNKNOWN
    assert first.thinking == again.thinking == {"type": "adaptive", "display": "summarized"}
    warned = [r.getMessage() for r in caplog.records if "claude-sonnet-9-test" in r.getMessage()]
    assert len(warned) == 1
    assert "not a model this bot knows" in warned[0]
    assert shape("claude-sonnet-9-test", thinking=False).problems  # no guess at "off"


def test_every_model_of_the_table_starts_on_the_bots_defaults():
    for name in RULES:
        assert shape(name).problems == (), name
