"""Each model's refusals, with the API's messages, and the Models API through the real SDK."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_models import EFFORTS, MODELS, ModelRules, find_model
from tests.fakes.test_anthropic_api import HELLO, client

NAMES = [name for m in MODELS for name in (m.id, *m.aliases)]
TYPES = ("adaptive", "between_tools", "disabled", "enabled")
TOOLS: Any = [{"name": "search", "input_schema": {"type": "object", "properties": {}}}]
FORCED: Any = ({"type": "any"}, {"type": "tool", "name": "search"})
PREFILLED: Any = [*HELLO, {"role": "assistant", "content": "Sure"}]
UPDATES = "thinking-display-updates-2026-08-18"
INTERLEAVED = "interleaved-thinking-2025-05-14"

# the messages the research quotes from Anthropic's pages
USE_ADAPTIVE = (
    'Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior.'
)
DISABLED = f'"thinking.type.disabled" is not supported for this model. {USE_ADAPTIVE}'
ENABLED = f'"thinking.type.enabled" is not supported for this model. {USE_ADAPTIVE}'
BETWEEN_TOOLS = '"thinking.type.between_tools" is not supported for this model.'
ADAPTIVE = "adaptive thinking is not supported on this model"
SONNET_OFF = (
    'To turn thinking off on this model, send "thinking": {"type": "between_tools"} '
    'instead of {"type": "disabled"}. The model does not think before responding. '
    "The short updates it writes between tool calls come back as thinking blocks."
)
FORCED_TOOL = 'tool_choice: type "tool" and "any" are not supported for this model.'
PREFILL = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)


def capped(level: str) -> str:
    return (
        f"output_config.effort '{level}' is not supported when thinking is disabled on this "
        "model. Use effort 'high' or below, or enable thinking."
    )


def too_many(sent: int, model: ModelRules) -> str:
    return (
        f"max_tokens: {sent} > {model.max_output}, which is the maximum allowed number of "
        f"output tokens for {model.id}"
    )


# messages the pages do not quote: the fake's guesses, pinned here
BOTH_SAMPLING = (
    "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
)
NO_EFFORT = "output_config.effort: effort is not supported on this model."
MANUAL_FORCED = "Thinking may not be enabled when tool_choice forces tool use."
BUDGET_MIN = "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
BUDGET_FIT = (
    "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
    "documentation at https://docs.claude.com/en/docs/build-with-claude/"
    "extended-thinking#max-tokens-and-context-window-size"
)


def deprecated(name: str) -> str:
    return f"`{name}` is deprecated for this model."


def display_choices(kind: str, updates: bool) -> str:
    listed = "'summarized', 'omitted' or 'updates'" if updates else "'summarized' or 'omitted'"
    return f"thinking.{kind}.display: Input should be {listed}"


@dataclass(frozen=True)
class Shape:
    """One request: its parameters, and the 400's message if the model refuses it."""

    name: str
    params: dict[str, Any]
    refusal: str | None = None
    betas: tuple[str, ...] = ()
    counting: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields the SDK 2.x cannot send itself (temperature, top_p, top_k)."""


def config(kind: str) -> dict[str, Any]:
    return {"type": kind, "budget_tokens": 1024} if kind == "enabled" else {"type": kind}


def type_refusal(kind: str, m: ModelRules) -> str:
    if kind == "adaptive":
        return ADAPTIVE
    if kind == "between_tools":
        return BETWEEN_TOOLS
    if kind == "disabled":
        return SONNET_OFF if "between_tools" in m.thinking_types else DISABLED
    return ENABLED


def thinking_shapes(m: ModelRules) -> Iterator[Shape]:
    yield Shape("no thinking", {})
    for kind in TYPES:
        refusal = None if kind in m.thinking_types else type_refusal(kind, m)
        yield Shape(f"thinking {kind}", {"thinking": config(kind)}, refusal)
        yield Shape(
            f"count_tokens, thinking {kind}", {"thinking": config(kind)}, refusal, counting=True
        )
    if "enabled" in m.thinking_types:
        small = {"type": "enabled", "budget_tokens": 1023}
        yield Shape("budget under 1024", {"thinking": small}, BUDGET_MIN)
        yield Shape(
            "count_tokens, budget under 1024", {"thinking": small}, BUDGET_MIN, counting=True
        )
        whole = {"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 2048}
        yield Shape("budget of all max_tokens", whole, BUDGET_FIT)
        yield Shape("budget of all max_tokens, interleaved", whole, betas=(INTERLEAVED,))


def display_shapes(m: ModelRules) -> Iterator[Shape]:
    for kind in ("adaptive", "enabled"):
        if kind not in m.thinking_types:
            continue
        for display in ("summarized", "omitted"):
            yield Shape(f"{kind} {display}", {"thinking": {**config(kind), "display": display}})
        updates = {"thinking": {**config(kind), "display": "updates"}}
        yield Shape(f"{kind} updates without beta", updates, display_choices(kind, False))
        refusal = None if m.display_updates else display_choices(kind, False)
        yield Shape(f"{kind} updates with beta", updates, refusal, betas=(UPDATES,))
        loud = {"thinking": {**config(kind), "display": "loud"}}
        yield Shape(f"{kind} display loud", loud, display_choices(kind, False))
    for kind in ("disabled", "between_tools"):
        if kind in m.thinking_types:
            shown = {"thinking": {"type": kind, "display": "summarized"}}
            yield Shape(
                f"{kind} with display",
                shown,
                f"thinking.{kind}.display: Extra inputs are not permitted",
            )
    if "between_tools" in m.thinking_types:
        budget = {"thinking": {"type": "between_tools", "budget_tokens": 1024}}
        message = "thinking.between_tools.budget_tokens: Extra inputs are not permitted"
        yield Shape("between_tools with a budget", budget, message)


def effort_shapes(m: ModelRules) -> Iterator[Shape]:
    for level in EFFORTS:
        effort = {"output_config": {"effort": level}}
        if not m.efforts:
            refusal: str | None = NO_EFFORT
        elif level in m.efforts:
            refusal = None
        else:
            refusal = f"output_config.effort '{level}' is not supported on this model."
        yield Shape(f"effort {level}", effort, refusal)
        for kind in m.capped_when_off:
            off = {**effort, "thinking": {"type": kind}}
            over = level in ("xhigh", "max")
            yield Shape(f"{kind} at effort {level}", off, capped(level) if over else None)
            if over:
                yield Shape(f"count_tokens, {kind} at {level}", off, capped(level), counting=True)


def sampling_shapes(m: ModelRules) -> Iterator[Shape]:
    if m.sampling == "refused":
        yield Shape("temperature 1", {}, extra={"temperature": 1})
        yield Shape("temperature 0.5", {}, deprecated("temperature"), extra={"temperature": 0.5})
        yield Shape("top_p 0.9", {}, deprecated("top_p"), extra={"top_p": 0.9})
        yield Shape("top_k 5", {}, deprecated("top_k"), extra={"top_k": 5})
    elif m.sampling == "haiku":
        yield Shape("temperature 1", {}, extra={"temperature": 1})
        yield Shape("top_p 0.99", {}, extra={"top_p": 0.99})
        wrong = "top_p: must be 0.99 on this model, or left out"
        yield Shape("top_p 1", {}, wrong, extra={"top_p": 1})
        warm = "temperature: must be 1 on this model, or left out"
        yield Shape("temperature 0.5", {}, warm, extra={"temperature": 0.5})
        both = {"temperature": 1, "top_p": 0.99}
        yield Shape("temperature and top_p", {}, BOTH_SAMPLING, extra=both)
        yield Shape("top_k 5", {}, deprecated("top_k"), extra={"top_k": 5})
    else:
        yield Shape("thinking off, temperature 0.5", {}, extra={"temperature": 0.5})
        yield Shape("thinking off, top_k 5", {}, extra={"top_k": 5})
        both = {"temperature": 0.5, "top_p": 0.9}
        yield Shape("thinking off, temperature and top_p", {}, BOTH_SAMPLING, extra=both)
        on = {"thinking": config("adaptive" if "adaptive" in m.thinking_types else "enabled")}
        hot = (
            "`temperature` may only be set to 1 when thinking is enabled or in interleaved "
            "thinking mode."
        )
        yield Shape("thinking on, temperature 0.5", on, hot, extra={"temperature": 0.5})
        yield Shape("thinking on, temperature 1", on, extra={"temperature": 1})
        top_k = "`top_k` is not supported when thinking is enabled."
        yield Shape("thinking on, top_k", on, top_k, extra={"top_k": 5})
        yield Shape("thinking on, top_p 0.96", on, extra={"top_p": 0.96})
        narrow = "`top_p` must be between 0.95 and 1 when thinking is enabled."
        yield Shape("thinking on, top_p 0.5", on, narrow, extra={"top_p": 0.5})


def tool_choice_shapes(m: ModelRules) -> Iterator[Shape]:
    for choice in ({"type": "auto"}, {"type": "none"}):
        yield Shape(f"tool_choice {choice['type']}", {"tools": TOOLS, "tool_choice": choice})
    for choice in FORCED:
        forced = {"tools": TOOLS, "tool_choice": choice}
        name = f"tool_choice {choice['type']}"
        if m.forced_tool_choice == "refused":
            yield Shape(name, forced, FORCED_TOOL)
            yield Shape(f"count_tokens, {name}", forced, FORCED_TOOL, counting=True)
        else:
            yield Shape(name, forced)
        if m.forced_tool_choice == "refused_with_enabled":
            manual = {**forced, "thinking": config("enabled")}
            yield Shape(f"{name} with manual thinking", manual, MANUAL_FORCED)
            yield Shape(f"count_tokens, {name}, manual", manual, MANUAL_FORCED, counting=True)
            if "adaptive" in m.thinking_types:
                yield Shape(f"{name} with adaptive", {**forced, "thinking": config("adaptive")})


def prefill_shapes(m: ModelRules) -> Iterator[Shape]:
    prefill = {"messages": PREFILLED}
    if m.prefill == "refused":
        yield Shape("prefill", prefill, PREFILL)
        if "disabled" in m.thinking_types:
            yield Shape(
                "prefill, thinking off", {**prefill, "thinking": config("disabled")}, PREFILL
            )
    else:
        yield Shape("prefill, thinking off", prefill)
        yield Shape("prefill, manual thinking", {**prefill, "thinking": config("enabled")}, PREFILL)
    # not documented whether count_tokens refuses a prefill; the fake does not
    yield Shape("count_tokens, prefill", prefill, counting=True)


def max_tokens_shapes(m: ModelRules) -> Iterator[Shape]:
    yield Shape("max_tokens at the limit", {"max_tokens": m.max_output})
    over = m.max_output + 1
    yield Shape("max_tokens over the limit", {"max_tokens": over}, too_many(over, m))
    yield Shape("max_tokens 200000", {"max_tokens": 200_000}, too_many(200_000, m))


def shapes(m: ModelRules) -> list[Shape]:
    makers = (
        thinking_shapes,
        display_shapes,
        effort_shapes,
        sampling_shapes,
        tool_choice_shapes,
        prefill_shapes,
        max_tokens_shapes,
    )
    return [shape for make in makers for shape in make(m)]


async def attempt(c: AsyncAnthropic, name: str, shape: Shape) -> str | None:
    """The 400's message for this request, or None when it was answered."""
    params: dict[str, Any] = {"model": name, "messages": HELLO, **shape.params}
    options: dict[str, Any] = {"extra_body": shape.extra or None}
    if shape.betas:
        options["extra_headers"] = {"anthropic-beta": ",".join(shape.betas)}
    try:
        with warnings.catch_warnings():
            # the SDK's own warnings (a deprecated model, manual thinking on 4.6)
            warnings.simplefilter("ignore")
            if shape.counting:
                params.pop("max_tokens", None)
                await c.messages.count_tokens(**params, **options)
            else:
                params.setdefault("max_tokens", 2048)
                await c.messages.create(**params, **options, timeout=30)
    except anthropic.BadRequestError as error:
        return _message(error)
    return None


def _message(error: anthropic.BadRequestError) -> str:
    """The error's message, once its body has the errors page's shape."""
    body = error.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["request_id"] == error.response.headers["request-id"]
    return str(body["error"]["message"])


@pytest.mark.parametrize("name", NAMES)
async def test_each_shape_is_refused_or_accepted_as_the_model_does(name: str) -> None:
    model = find_model(name)
    assert model is not None
    wrong = []
    async with FakeAnthropic() as api, client(api) as c:
        for shape in shapes(model):
            got = await attempt(c, name, shape)
            if got != shape.refusal:
                wrong.append(f"{shape.name}: expected {shape.refusal!r}, got {got!r}")

    assert wrong == []


# The table above is the fake's own; these pin what the research says, row by row,
# so that a slip in the table does not pass both sides.
FACTS: list[tuple[str, str, dict[str, Any], str | None]] = [
    (
        "sonnet 5.5 refuses disabled",
        "claude-sonnet-5-5",
        {"thinking": config("disabled")},
        SONNET_OFF,
    ),
    (
        "sonnet 5.5 takes between_tools",
        "claude-sonnet-5-5",
        {"thinking": config("between_tools")},
        None,
    ),
    (
        "sonnet 5.5 between_tools at xhigh",
        "claude-sonnet-5-5",
        {"thinking": config("between_tools"), "output_config": {"effort": "xhigh"}},
        capped("xhigh"),
    ),
    (
        "sonnet 5.5 forced tool",
        "claude-sonnet-5-5",
        {"tools": TOOLS, "tool_choice": FORCED[0]},
        FORCED_TOOL,
    ),
    ("opus 5.5 refuses disabled", "claude-opus-5-5", {"thinking": config("disabled")}, DISABLED),
    ("opus 5.5 refuses budgets", "claude-opus-5-5", {"thinking": config("enabled")}, ENABLED),
    (
        "opus 5.5 forced tool",
        "claude-opus-5-5",
        {"tools": TOOLS, "tool_choice": FORCED[1]},
        FORCED_TOOL,
    ),
    (
        "fable 5.1 forced tool",
        "claude-fable-5-1",
        {"tools": TOOLS, "tool_choice": FORCED[0]},
        FORCED_TOOL,
    ),
    (
        "mythos 5.1 forced tool",
        "claude-mythos-5-1",
        {"tools": TOOLS, "tool_choice": FORCED[0]},
        FORCED_TOOL,
    ),
    ("fable 5.2 refuses disabled", "claude-fable-5-2", {"thinking": config("disabled")}, DISABLED),
    ("fable 5.2 prefill", "claude-fable-5-2", {"messages": PREFILLED}, PREFILL),
    (
        "haiku 5.5 forced tool is fine",
        "claude-haiku-5-5",
        {"tools": TOOLS, "tool_choice": FORCED[0]},
        None,
    ),
    (
        "haiku 5.5 prefill with thinking off",
        "claude-haiku-5-5",
        {"messages": PREFILLED, "thinking": config("disabled")},
        PREFILL,
    ),
    (
        "haiku 5.5 disabled at max",
        "claude-haiku-5-5",
        {"thinking": config("disabled"), "output_config": {"effort": "max"}},
        capped("max"),
    ),
    (
        "opus 5 disabled at xhigh",
        "claude-opus-5",
        {"thinking": config("disabled"), "output_config": {"effort": "xhigh"}},
        capped("xhigh"),
    ),
    (
        "opus 5 forced tool is fine",
        "claude-opus-5",
        {"tools": TOOLS, "tool_choice": FORCED[0]},
        None,
    ),
    ("sonnet 5 takes disabled", "claude-sonnet-5", {"thinking": config("disabled")}, None),
    ("fable 5 refuses disabled", "claude-fable-5", {"thinking": config("disabled")}, DISABLED),
    ("opus 4.8 refuses budgets", "claude-opus-4-8", {"thinking": config("enabled")}, ENABLED),
    ("opus 4.7 takes disabled", "claude-opus-4-7", {"thinking": config("disabled")}, None),
    ("opus 4.6 takes budgets", "claude-opus-4-6", {"thinking": config("enabled")}, None),
    (
        "opus 4.6 has no xhigh",
        "claude-opus-4-6",
        {"output_config": {"effort": "xhigh"}},
        "output_config.effort 'xhigh' is not supported on this model.",
    ),
    ("sonnet 4.6 has max", "claude-sonnet-4-6", {"output_config": {"effort": "max"}}, None),
    ("opus 4.5 refuses adaptive", "claude-opus-4-5", {"thinking": config("adaptive")}, ADAPTIVE),
    ("opus 4.5 has effort", "claude-opus-4-5-20251101", {"output_config": {"effort": "low"}}, None),
    (
        "haiku 4.5 has no effort",
        "claude-haiku-4-5",
        {"output_config": {"effort": "high"}},
        NO_EFFORT,
    ),
    ("haiku 4.5 takes a prefill", "claude-haiku-4-5", {"messages": PREFILLED}, None),
    (
        "sonnet 4.5 between_tools",
        "claude-sonnet-4-5",
        {"thinking": config("between_tools")},
        BETWEEN_TOOLS,
    ),
    (
        "sonnet 5.5 at 200000 tokens",
        "claude-sonnet-5-5",
        {"max_tokens": 200_000},
        "max_tokens: 200000 > 128000, which is the maximum allowed number of output tokens "
        "for claude-sonnet-5-5",
    ),
    (
        "haiku 4.5 at 64001 tokens",
        "claude-haiku-4-5",
        {"max_tokens": 64_001},
        "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens "
        "for claude-haiku-4-5-20251001",
    ),
]


@pytest.mark.parametrize(
    ("name", "params", "refusal"), [f[1:] for f in FACTS], ids=[f[0] for f in FACTS]
)
async def test_what_the_research_says(
    name: str, params: dict[str, Any], refusal: str | None
) -> None:
    async with FakeAnthropic() as api, client(api) as c:
        assert await attempt(c, name, Shape("fact", params, refusal)) == refusal


async def test_haiku_5_5_sampling_defaults_go_through_raw_http() -> None:
    # the SDK has no temperature / top_p / top_k: a raw POST, as a hand-rolled client sends
    body = {"model": "claude-haiku-5-5", "max_tokens": 10, "messages": HELLO, "top_p": 1}
    async with FakeAnthropic() as api, client(api) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await c.post("/v1/messages", body=body, cast_to=object)
        answered = await c.post("/v1/messages", body={**body, "top_p": 0.99}, cast_to=object)

    assert "top_p" in caught.value.message
    assert api.requests[0]["top_p"] == 1
    assert isinstance(answered, dict)
    assert answered["content"] == [{"type": "text", "text": "ok"}]


async def test_unknown_model_is_not_found() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await c.messages.create(model="claude-sonnet-4", max_tokens=10, messages=HELLO)
        with pytest.raises(anthropic.NotFoundError):
            await c.messages.count_tokens(model="claude-sonnet-4", messages=HELLO)

    assert isinstance(caught.value.body, dict)
    assert caught.value.body["error"] == {
        "type": "not_found_error",
        "message": "model: claude-sonnet-4",
    }
    assert caught.value.body["type"] == "error"
    assert caught.value.body["request_id"].startswith("req_")
    assert api.usages == []


# --- the Models API ------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
async def test_retrieve_parses_with_the_sdk(name: str) -> None:
    model = find_model(name)
    assert model is not None
    async with FakeAnthropic() as api, client(api) as c:
        info = await c.models.retrieve(name)

    assert (info.id, info.type, info.line) == (model.id, "model", model.line)
    assert (info.max_tokens, info.max_input_tokens) == (model.max_output, model.context_window)
    assert info.lifecycle == model.lifecycle
    caps = info.capabilities
    assert caps is not None
    types = caps.thinking.types
    accepted = {kind for kind in TYPES if getattr(types, kind).supported}
    assert accepted == model.thinking_types
    assert caps.effort.supported == bool(model.efforts)
    assert caps.effort.xhigh is not None
    assert caps.effort.xhigh.supported == ("xhigh" in model.efforts)
    assert caps.context_management.compact_20260112 is not None
    # every key of every capability is there, as "Keys are always present" promises
    assert set(caps.model_fields_set) == set(type(caps).model_fields)
    assert api.models_requests == [{"path": f"/v1/models/{name}", "query": {}}]


async def test_retrieve_tells_the_research_apart() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        sonnet = await c.models.retrieve("claude-sonnet-5-5")
        haiku = await c.models.retrieve("claude-haiku-4-5")
        opus = await c.models.retrieve("claude-opus-4-5")

    assert sonnet.capabilities is not None
    assert haiku.capabilities is not None
    assert sonnet.capabilities.thinking.types.between_tools.supported
    assert not sonnet.capabilities.thinking.types.disabled.supported
    assert not haiku.capabilities.effort.supported
    assert haiku.id == "claude-haiku-4-5-20251001"
    assert (haiku.max_tokens, haiku.max_input_tokens) == (64_000, 200_000)
    assert opus.lifecycle == "deprecated"
    assert opus.retires_at is not None
    assert opus.retires_at.year == 2027


async def test_list_pages_through_every_model_newest_first() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        ids = [info.id async for info in c.models.list(limit=5)]
        first = await c.models.list(limit=3)
        before = await c.models.list(limit=2, before_id=MODELS[3].id)
        deprecated = await c.models.list(lifecycle=["deprecated"])

    assert ids == [m.id for m in MODELS]
    assert [m.id for m in first.data] == [m.id for m in MODELS[:3]]
    assert first.has_more
    assert first.last_id == MODELS[2].id
    assert [m.id for m in before.data] == [MODELS[1].id, MODELS[2].id]
    assert before.has_more
    assert [m.id for m in deprecated.data] == [
        "claude-opus-4-5-20251101",
        "claude-sonnet-4-5-20250929",
    ]
    assert api.models_requests[0] == {"path": "/v1/models", "query": {"limit": "5"}}
    assert api.models_requests[1]["query"] == {"limit": "5", "after_id": MODELS[4].id}


async def test_list_refuses_a_bad_limit() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await c.models.list(limit=1001)

    assert "limit" in caught.value.message


async def test_unknown_model_is_not_found_on_the_models_api() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await c.models.retrieve("claude-nope-1")

    assert isinstance(caught.value.body, dict)
    assert caught.value.body["error"] == {
        "type": "not_found_error",
        "message": "model: claude-nope-1",
    }


async def test_a_model_can_be_unavailable_to_the_key() -> None:
    hidden = ["claude-mythos-5-2", "claude-opus-4-5"]
    async with FakeAnthropic(unavailable_models=hidden) as api, client(api) as c:
        with pytest.raises(anthropic.NotFoundError):
            await c.models.retrieve("claude-mythos-5-2")
        with pytest.raises(anthropic.NotFoundError):
            await c.models.retrieve("claude-opus-4-5-20251101")
        with pytest.raises(anthropic.NotFoundError) as caught:
            await c.messages.create(model="claude-mythos-5-2", max_tokens=10, messages=HELLO)
        listed = [info.id async for info in c.models.list(limit=100)]
        await c.messages.create(model="claude-fable-5-2", max_tokens=10, messages=HELLO)

    assert isinstance(caught.value.body, dict)
    assert caught.value.body["error"]["message"] == "model: claude-mythos-5-2"
    assert "claude-mythos-5-2" not in listed
    assert "claude-opus-4-5-20251101" not in listed
    assert len(listed) == len(MODELS) - 2


async def test_unavailable_names_must_be_models() -> None:
    with pytest.raises(ValueError, match="claude-nope"):
        FakeAnthropic(unavailable_models=["claude-nope"])


async def test_models_api_checks_the_key() -> None:
    async with FakeAnthropic() as api, client(api, api_key="wrong-key") as c:
        with pytest.raises(anthropic.AuthenticationError):
            await c.models.retrieve("claude-sonnet-5-5")
        with pytest.raises(anthropic.AuthenticationError):
            await c.models.list()

    assert len(api.models_requests) == 2
