"""Thinking blocks: how the fake displays them, and what it makes of them when they come back."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic

from tests.fakes.anthropic_api import Cut, FakeAnthropic, Reply
from tests.fakes.test_anthropic_api import HELLO, client, deltas, stream_all, tool_call, tool_result

SONNET = "claude-sonnet-5-5"
THOUGHT = {"type": "thinking", "thinking": "The user greets me.", "signature": "sig-123"}
SUMMARIZED: Any = {"type": "adaptive", "display": "summarized"}
BINDING = "thinking-binding-controls-2026-08-01"
MODIFIED = (
    "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest assistant "
    "message cannot be modified. These blocks must remain as they were in the original response."
)
OTHER_CONVERSATION = (
    "messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound to a "
    "different conversation. Remove the block, or set "
    '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)


def thinking_reply(text: str = "Hi!", thought: dict[str, Any] = THOUGHT) -> Reply:
    return Reply([thought, {"type": "text", "text": text}])


async def answer(c: AsyncAnthropic, **params: Any) -> list[dict[str, Any]]:
    """The reply's blocks, as a client sends them back."""
    params = {"model": SONNET, "max_tokens": 100, "messages": HELLO, **params}
    message = await c.messages.create(**params)
    return [block.model_dump(exclude_none=True) for block in message.content]


def after(reply: list[dict[str, Any]], *, text: str = "and now?") -> list[Any]:
    return [*HELLO, {"role": "assistant", "content": reply}, {"role": "user", "content": text}]


async def refusal(c: AsyncAnthropic, **params: Any) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        await answer(c, **params)
    assert isinstance(caught.value.body, dict)
    return str(caught.value.body["error"]["message"])


# --- display ---------------------------------------------------------------------------


async def test_omitted_display_streams_only_the_signature() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        events, message = await stream_all(c, model=SONNET)  # Sonnet 5.5 omits by default

    assert deltas(events, "thinking_delta") == []
    assert [d.signature for d in deltas(events, "signature_delta")] == ["sig-123"]
    assert (message.content[0].thinking, message.content[0].signature) == ("", "sig-123")


async def test_summarized_display_streams_the_text() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        events, message = await stream_all(c, model=SONNET, thinking=SUMMARIZED)

    assert "".join(d.thinking for d in deltas(events, "thinking_delta")) == "The user greets me."
    assert message.content[0].thinking == "The user greets me."


@pytest.mark.parametrize(
    ("model", "thinking", "shown"),
    [
        ("claude-opus-5-5", None, ""),
        ("claude-haiku-5-5", {"type": "adaptive"}, ""),
        ("claude-opus-4-6", {"type": "adaptive"}, "The user greets me."),
        ("claude-opus-4-7", {"type": "adaptive"}, ""),
        ("claude-opus-4-7", {"type": "adaptive", "display": "summarized"}, "The user greets me."),
        ("claude-haiku-4-5", {"type": "enabled", "budget_tokens": 1024}, "The user greets me."),
        ("claude-sonnet-5-5", {"type": "between_tools"}, "The user greets me."),
    ],
)
async def test_each_model_displays_by_its_default(model: str, thinking: Any, shown: str) -> None:
    params: dict[str, Any] = {"model": model, "max_tokens": 2048}
    if thinking is not None:
        params["thinking"] = thinking
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        blocks = await answer(c, **params)

    assert blocks[0] == {**THOUGHT, "thinking": shown}


async def test_updates_display_keeps_only_the_progress_notes() -> None:
    reasoning = {"type": "thinking", "thinking": "Reasoning.", "signature": "sig-r"}
    note = {"type": "thinking", "thinking": "Looking it up.", "signature": "sig-n"}
    thinking = {"type": "adaptive", "display": "updates"}
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply([reasoning, note, tool_call("t1")], stop_reason="tool_use"))
        blocks = await answer(
            c,
            thinking=thinking,
            extra_headers={"anthropic-beta": "thinking-display-updates-2026-08-18"},
        )

    assert [b.get("thinking") for b in blocks] == ["", "Looking it up.", None]


# --- signatures ------------------------------------------------------------------------


async def test_a_block_sent_back_unchanged_is_accepted() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, thinking=SUMMARIZED)
        await answer(c, thinking=SUMMARIZED, messages=after(reply))

    assert reply[0] == THOUGHT
    assert api.dropped_thinking == []
    assert len(api.usages) == 2


async def test_an_omitted_block_takes_any_text_back() -> None:
    # "Any text you place in the thinking field of a round-tripped omitted block is ignored"
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c)
        reply[0]["thinking"] = "made up"
        await answer(c, messages=after(reply))

    assert len(api.usages) == 2


async def test_a_changed_block_is_refused() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, thinking=SUMMARIZED)
        reply[0]["thinking"] = "The user insults me."
        message = await refusal(c, thinking=SUMMARIZED, messages=after(reply))

    assert message == MODIFIED


async def test_a_changed_block_further_back_has_a_bad_signature() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply(), thinking_reply("again", {**THOUGHT, "signature": "sig-2"}))
        first = await answer(c, thinking=SUMMARIZED)
        second = await answer(c, thinking=SUMMARIZED, messages=after(first))
        first[0]["thinking"] = "changed"
        history = [*after(first), {"role": "assistant", "content": second}, *HELLO]
        message = await refusal(c, thinking=SUMMARIZED, messages=history)

    assert message == "messages.1.content.0: Invalid `signature` in `thinking` block"


async def test_a_redacted_block_is_checked_by_its_data() -> None:
    redacted = {"type": "redacted_thinking", "data": "opaque-1"}
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply([redacted, {"type": "text", "text": "Hi"}]))
        reply = await answer(c)
        await answer(c, messages=after(reply))
        reply[0]["data"] = "opaque-2"
        message = await refusal(c, messages=after(reply))

    assert message == "messages.1.content.0: Invalid `data` in `redacted_thinking` block"


async def test_a_signature_the_stream_never_delivered_was_never_issued() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        # message_start, ping, the block's start and two thinking deltas: no signature yet
        api.queue(Cut(thinking_reply(), after_events=5, clean=True))
        await stream_all(c, model=SONNET, thinking=SUMMARIZED)
        message = await refusal(c, messages=after([THOUGHT, {"type": "text", "text": "Hi!"}]))

    assert message == "messages.1.content.0: Invalid `signature` in `thinking` block"


async def test_a_reused_signature_fits_any_of_its_sendings() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply(), thinking_reply())
        one = await answer(c, system="Be brief.")
        two = await answer(c, system="Be thorough.")
        await answer(c, system="Be brief.", messages=after(one))
        await answer(c, system="Be thorough.", messages=after(two))

    assert one == two
    assert len(api.usages) == 4


# --- model binding ---------------------------------------------------------------------


async def test_a_block_of_a_model_that_cannot_be_read_is_dropped() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, model="claude-opus-5-5")
        messages = after(reply)
        await answer(c, messages=messages)  # Sonnet 5.5 does not read Opus 5.5
        counted = await c.messages.count_tokens(model=SONNET, messages=messages)
        without = after(reply[1:])
        alone = await c.messages.count_tokens(model=SONNET, messages=without)

    assert api.dropped_thinking == [
        {"path": "messages.1.content.0", "reason": "model_binding_mismatch"}
    ]
    assert counted.input_tokens == alone.input_tokens
    assert api.usages[1]["input_tokens"] == alone.input_tokens


@pytest.mark.parametrize(
    ("maker", "reader"),
    [
        ("claude-opus-4-8", "claude-sonnet-5-5"),
        ("claude-sonnet-5-5", "claude-opus-5-5"),
        ("claude-opus-5-5", "claude-fable-5-1"),
        ("claude-fable-5-2", "claude-mythos-5-2"),
        ("claude-haiku-4-5", "claude-haiku-4-5-20251001"),
    ],
)
async def test_the_documented_readers_keep_the_block(maker: str, reader: str) -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, model=maker)
        await answer(c, model=reader, messages=after(reply))

    assert api.dropped_thinking == []


@pytest.mark.parametrize(
    ("maker", "reader"),
    [
        ("claude-fable-5-2", "claude-fable-5-1"),
        ("claude-sonnet-5-5", "claude-fable-5-1"),
        ("claude-opus-5", "claude-sonnet-5-5"),
        ("claude-sonnet-5", "claude-opus-4-8"),
    ],
)
async def test_other_readers_drop_the_block(maker: str, reader: str) -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, model=maker)
        await answer(c, model=reader, messages=after(reply))

    assert [d["reason"] for d in api.dropped_thinking] == ["model_binding_mismatch"]


# --- conversation binding --------------------------------------------------------------

TOOL = {"name": "search", "input_schema": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ({"system": "Be brief."}, {"system": "Be thorough."}),
        ({"tools": [TOOL]}, {"tools": [{**TOOL, "description": "Search."}]}),
        ({}, {"system": "Be brief."}),
    ],
    ids=["system", "tools", "system added"],
)
@pytest.mark.parametrize("model", ["claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1"])
async def test_a_bound_block_refuses_another_conversation(
    model: str, first: dict[str, Any], then: dict[str, Any]
) -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, model=model, **first)
        message = await refusal(c, model=model, messages=after(reply), **then)
        with pytest.raises(anthropic.BadRequestError) as counted:
            await c.messages.count_tokens(model=model, messages=after(reply), **then)
        await answer(c, model=model, messages=after(reply), **first)

    assert message == OTHER_CONVERSATION
    assert OTHER_CONVERSATION in counted.value.message


async def test_a_bound_block_refuses_a_changed_earlier_message() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, messages=[{"role": "user", "content": "hello"}])
        message = await refusal(c, messages=after(reply))

    assert message == OTHER_CONVERSATION


async def test_cache_control_is_not_part_of_the_conversation() -> None:
    marked = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, messages=marked, system="Be brief.")
        marked_system = [
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
        ]
        await answer(c, system=marked_system, messages=after(reply))

    assert len(api.usages) == 2


async def test_an_unbound_model_takes_its_block_into_another_conversation() -> None:
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(thinking_reply())
        reply = await answer(c, model="claude-opus-4-8", system="Be brief.")
        await answer(c, model="claude-opus-4-8", system="Be thorough.", messages=after(reply))

    assert len(api.usages) == 2


async def test_a_tool_loop_keeps_its_binding() -> None:
    note = {"type": "thinking", "thinking": "", "signature": "sig-loop"}
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply([note, tool_call("t1")], stop_reason="tool_use"), Reply.text("done"))
        reply = await answer(c, tools=[TOOL])
        loop = [
            *HELLO,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": [tool_result("t1")]},
        ]
        await answer(c, tools=[TOOL], messages=loop)
        finished = [
            *loop,
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "thanks"},
        ]
        await answer(c, tools=[TOOL], messages=finished)

    assert len(api.usages) == 3


async def test_drop_block_drops_the_whole_run_and_reports_it() -> None:
    second = {"type": "thinking", "thinking": "More.", "signature": "sig-456"}
    binding: Any = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    async with FakeAnthropic() as api, client(api) as c:
        api.queue(Reply([THOUGHT, second, {"type": "text", "text": "Hi!"}]))
        reply = await answer(c, system="Be brief.")
        message = await c.beta.messages.create(
            model=SONNET,
            max_tokens=100,
            system="Be thorough.",
            messages=after(reply),
            thinking=binding,
            betas=[BINDING],
        )

    dropped = [
        {"path": "messages.1.content.0", "reason": "prefix_binding_mismatch"},
        {"path": "messages.1.content.1", "reason": "prefix_binding_mismatch"},
    ]
    assert api.dropped_thinking == dropped
    assert [t.model_dump() for t in message.input_transformations or []] == [
        {"type": "thinking_dropped", **d} for d in dropped
    ]


async def test_block_binding_needs_its_beta() -> None:
    binding = {"type": "adaptive", "block_binding": {}}
    async with FakeAnthropic() as api, client(api) as c:
        message = await refusal(c, thinking=binding)

    assert message == "thinking.adaptive.block_binding: Extra inputs are not permitted"
