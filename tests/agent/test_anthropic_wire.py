from __future__ import annotations

from typing import Any

from agent import (
    AssistantMessage,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolMessage,
    ToolSpec,
    TriggerMessage,
    UserMessage,
)
from agent._anthropic_wire import (
    api_messages,
    api_system,
    api_tools,
    mark_cache_points,
    turn_began_without_thinking,
)
from agent.messages import RedactedThinkingBlock

from .wire_checks import assert_valid_api_messages

CACHE = {"type": "ephemeral"}


def tool_turn(turn: str, *, error: bool = False) -> list[Message]:
    call = ToolCall(id=f"{turn}-c1", name="lookup", input={"q": "x"})
    result = {"error": "KeyError: 'x'"} if error else {"rows": [1, 2]}
    return [
        UserMessage(turn_id=turn, text="look it up", user="U1"),
        AssistantMessage(turn_id=turn, content=(TextBlock(text="Looking."), call)),
        ToolMessage(turn_id=turn, call_id=call.id, name="lookup", result=result, is_error=error),
        AssistantMessage(turn_id=turn, content=(TextBlock(text="Found two."),)),
    ]


def test_a_tool_loop_becomes_alternating_messages_with_results_after_their_calls():
    wire = api_messages(tool_turn("t1"))
    assert [m["role"] for m in wire] == ["user", "assistant", "user", "assistant"]
    assert wire[1]["content"][1] == {
        "type": "tool_use",
        "id": "t1-c1",
        "name": "lookup",
        "input": {"q": "x"},
    }
    assert wire[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1-c1", "content": '{"rows": [1, 2]}'}
    ]
    assert_valid_api_messages(wire)


def test_a_tool_that_raised_goes_back_as_an_error_result_with_its_message():
    wire = api_messages(tool_turn("t1", error=True))
    assert wire[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "t1-c1",
            "content": "KeyError: 'x'",
            "is_error": True,
        }
    ]


def test_results_closing_a_failed_turn_merge_with_the_next_message_and_stay_first():
    call = ToolCall(id="c9", name="lookup", input={})
    transcript: list[Message] = [
        UserMessage(turn_id="t1", text="go"),
        AssistantMessage(turn_id="t1", content=(call,)),
        ToolMessage(
            turn_id="t1",
            call_id="c9",
            name="lookup",
            result={"error": "not run: the turn failed before this call"},
            is_error=True,
        ),
        UserMessage(turn_id="t2", text="try again"),
    ]
    wire = api_messages(transcript)
    assert [m["role"] for m in wire] == ["user", "assistant", "user"]
    assert [b["type"] for b in wire[2]["content"]] == ["tool_result", "text"]
    assert_valid_api_messages(wire)


def test_empty_replies_are_left_out_and_empty_text_is_never_sent():
    transcript: list[Message] = [
        UserMessage(turn_id="t1", text="  "),
        AssistantMessage(turn_id="t1", content=()),
        TriggerMessage(turn_id="t2", text="Summarize the day.", by="schedule:daily"),
        AssistantMessage(turn_id="t2", content=(TextBlock(text=""), TextBlock(text="Quiet day."))),
    ]
    wire = api_messages(transcript)
    assert wire == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "(no text)"},
                {"type": "text", "text": "Summarize the day."},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Quiet day."}]},
    ]
    assert_valid_api_messages(wire)


def test_thinking_blocks_go_back_exactly_as_received():
    thinking = ThinkingBlock(thinking="Need the rows.", signature="sig-abc")
    redacted = RedactedThinkingBlock(data="opaque==")
    call = ToolCall(id="c1", name="lookup", input={})
    transcript: list[Message] = [
        UserMessage(turn_id="t1", text="go"),
        AssistantMessage(turn_id="t1", content=(thinking, redacted, call)),
        ToolMessage(turn_id="t1", call_id="c1", name="lookup", result=[]),
    ]
    wire = api_messages(transcript)
    assert wire[1]["content"][:2] == [
        {"type": "thinking", "thinking": "Need the rows.", "signature": "sig-abc"},
        {"type": "redacted_thinking", "data": "opaque=="},
    ]
    assert wire[2]["content"][0]["content"] == "[]"


def test_cache_breakpoints_sit_on_the_system_prompt_and_the_newest_message():
    wire = api_messages(tool_turn("t1")[:3])
    mark_cache_points(wire, CACHE)
    assert wire[-1]["content"][-1]["cache_control"] == CACHE
    # and where the request before this one put its newest breakpoint: the question
    assert wire[0]["content"][-1]["cache_control"] == CACHE
    marked = [b for m in wire for b in m["content"] if "cache_control" in b]
    assert len(marked) == 2
    assert api_system("Be brief.", CACHE) == [
        {"type": "text", "text": "Be brief.", "cache_control": CACHE}
    ]
    spec = ToolSpec(name="lookup", description="Look up.", input_schema={"type": "object"})
    tools = api_tools([spec, spec], CACHE)
    assert "cache_control" not in tools[0]
    assert tools[1]["cache_control"] == CACHE
    assert api_system("   ", CACHE) is None


def test_a_breakpoint_never_lands_on_a_thinking_block():
    wire: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "partial"},
                {"type": "thinking", "thinking": "...", "signature": "s"},
            ],
        },
    ]
    mark_cache_points(wire, CACHE)
    assert wire[1]["content"][0]["cache_control"] == CACHE
    assert "cache_control" not in wire[1]["content"][1]


def test_a_tool_loop_begun_without_thinking_finishes_without_it():
    call = ToolCall(id="c1", name="lookup", input={})
    plain: list[Message] = [
        UserMessage(turn_id="t1", text="go"),
        AssistantMessage(turn_id="t1", content=(call,)),
        ToolMessage(turn_id="t1", call_id="c1", name="lookup", result=1),
    ]
    assert turn_began_without_thinking(plain)
    thought = ThinkingBlock(thinking="hm", signature="s")
    with_thinking: list[Message] = [
        plain[0],
        AssistantMessage(turn_id="t1", content=(thought, call)),
        plain[2],
    ]
    assert not turn_began_without_thinking(with_thinking)
    assert not turn_began_without_thinking([*plain, UserMessage(turn_id="t2", text="next")])
