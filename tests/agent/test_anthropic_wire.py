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
from agent.core.messages import RedactedThinkingBlock
from agent.models.anthropic.wire import (
    ThinkingBinder,
    api_messages,
    api_system,
    api_tools,
    bind_thinking,
    mark_cache_points,
    turn_began_without_thinking,
)

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


# -- thinking stays with its model and its conversation ---------------------------------------

LOOKUP = ToolSpec(name="lookup", description="Look a row up.", input_schema={"type": "object"})
NOTE = ThinkingBlock(thinking="Need the rows first.", signature="sig-1")


def thought_loop(model: str | None, system: str = "Be brief.") -> list[Message]:
    """A tool loop whose first reply thought, written by ``model`` under ``system``."""
    asked: list[Message] = [UserMessage(turn_id="t1", text="look it up", user="U1")]
    _, digest = bind_thinking(asked, model=model or "", system=system, tools=[LOOKUP])
    call = ToolCall(id="c1", name="lookup", input={})
    return [
        *asked,
        AssistantMessage(turn_id="t1", content=(NOTE, call), model=model, prompt_digest=digest),
        ToolMessage(turn_id="t1", call_id="c1", name="lookup", result={"rows": [1]}),
    ]


def thinking_sent(messages: list[Message]) -> list[Any]:
    return [b for m in api_messages(messages) for b in m["content"] if b["type"] == "thinking"]


def test_thinking_goes_back_to_the_model_and_conversation_that_wrote_it():
    loop = thought_loop("claude-sonnet-5-5")

    bound, _ = bind_thinking(loop, model="claude-sonnet-5-5", system="Be brief.", tools=[LOOKUP])

    assert thinking_sent(bound) == [
        {"type": "thinking", "thinking": "Need the rows first.", "signature": "sig-1"}
    ]


def test_thinking_written_by_another_model_is_left_out_and_the_transcript_keeps_it():
    loop = thought_loop("claude-sonnet-5-5")

    bound, _ = bind_thinking(loop, model="claude-opus-5-5", system="Be brief.", tools=[LOOKUP])

    assert thinking_sent(bound) == []
    assert isinstance(bound[1], AssistantMessage)
    assert bound[1].tool_calls == loop[1].tool_calls  # only the thinking goes
    assert NOTE in loop[1].content  # what was given is never changed


def test_thinking_from_before_models_were_recorded_is_left_out():
    loop = thought_loop(None)

    bound, _ = bind_thinking(loop, model="claude-sonnet-5-5", system="Be brief.", tools=[LOOKUP])

    assert thinking_sent(bound) == []


def test_thinking_is_left_out_once_the_conversation_before_it_changed():
    loop = thought_loop("claude-sonnet-5-5")
    other_tool = ToolSpec(name="recall", description="Recall.", input_schema={"type": "object"})
    changed = {
        "the system prompt (a policy edited mid-thread)": {
            "system": "Answer in French.",
            "tools": [LOOKUP],
        },
        "the tools (a tool denied mid-thread)": {"system": "Be brief.", "tools": []},
        "the tools' order or set": {"system": "Be brief.", "tools": [LOOKUP, other_tool]},
    }
    for why, request in changed.items():
        bound, _ = bind_thinking(loop, model="claude-sonnet-5-5", **request)  # type: ignore[arg-type]
        assert thinking_sent(bound) == [], why
    edited = [UserMessage(turn_id="t1", text="look it up, please", user="U1"), *loop[1:]]
    bound, _ = bind_thinking(edited, model="claude-sonnet-5-5", system="Be brief.", tools=[LOOKUP])
    assert thinking_sent(bound) == [], "an earlier message (a window that left some out)"


def test_a_reply_after_a_dropped_block_binds_to_what_was_sent_without_it():
    loop = thought_loop("claude-sonnet-5-5")
    # the request after a model switch: the old block goes, and the new reply's digest
    # covers the conversation as sent without it
    sent, digest = bind_thinking(loop, model="claude-opus-5-5", system="Be brief.", tools=[LOOKUP])
    mine = ThinkingBlock(thinking="One row: done.", signature="sig-2")
    later = [
        *loop,
        AssistantMessage(
            turn_id="t1",
            content=(mine, TextBlock(text="One row.")),
            model="claude-opus-5-5",
            prompt_digest=digest,
        ),
        UserMessage(turn_id="t2", text="thanks", user="U1"),
    ]

    bound, _ = bind_thinking(later, model="claude-opus-5-5", system="Be brief.", tools=[LOOKUP])

    assert [b["signature"] for b in thinking_sent(bound)] == ["sig-2"]
    assert api_messages(bound)[:3] == api_messages(sent)


def test_a_remembered_binding_is_the_one_worked_out_afresh_as_the_thread_grows_or_changes():
    binder = ThinkingBinder()
    loop = thought_loop("claude-sonnet-5-5")
    grown = [*loop, UserMessage(turn_id="t2", text="and tomorrow?", user="U1")]
    edited = [UserMessage(turn_id="t1", text="look it up, please", user="U1"), *grown[1:]]
    asked = [
        (grown[:2], "Be brief."),
        (grown, "Be brief."),  # grown: only what is new is hashed
        (grown, "Answer in French."),  # the prompt changed: worked out again
        (edited, "Answer in French."),  # an earlier message changed: again
        (grown[:3], "Answer in French."),  # shorter than what it remembers: again
    ]
    for messages, system in asked:
        remembered = binder.bind(
            "s1", messages, model="claude-sonnet-5-5", system=system, tools=[LOOKUP]
        )
        afresh = bind_thinking(messages, model="claude-sonnet-5-5", system=system, tools=[LOOKUP])
        assert remembered == afresh, (len(messages), system)
