"""The context window: which part of a long thread a request carries."""

from __future__ import annotations

from collections.abc import Sequence

from agent import AssistantMessage, Message, TextBlock, ToolCall, ToolMessage, UserMessage
from agent.models.anthropic.wire import api_messages, message_size
from agent.models.window import ContextWindow, omission_notice

from .wire_checks import assert_valid_api_messages

OVERHEAD = 200


class Counter:
    """A stand-in for the provider's count: about four characters a token."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: Sequence[Message]) -> int:
        self.calls += 1
        return (OVERHEAD + sum(message_size(m) for m in messages)) // 4


def thread(turns: int, *, words: int = 40, calls: int = 2) -> list[Message]:
    """A thread whose every turn asks a tool ``calls`` times, then answers."""
    out: list[Message] = []
    for t in range(turns):
        turn = f"t{t}"
        out.append(UserMessage(turn_id=turn, text=f"question {t} " + "word " * words))
        for c in range(calls):
            call = ToolCall(id=f"{turn}-c{c}", name="lookup", input={"n": c})
            out.append(AssistantMessage(turn_id=turn, content=(call,)))
            out.append(
                ToolMessage(turn_id=turn, call_id=call.id, name="lookup", result="row " * words)
            )
        out.append(AssistantMessage(turn_id=turn, content=(TextBlock(text="answer " * words),)))
    return out


async def test_a_thread_within_budget_is_sent_whole_without_counting():
    messages = thread(3)
    counter = Counter()
    window = ContextWindow(budget=100_000, size=message_size)
    sent = await window.fit("s1", messages, overhead=OVERHEAD, count=counter)
    assert list(sent) == messages
    assert counter.calls == 0


async def test_a_long_thread_keeps_its_first_exchange_and_newest_messages_within_budget():
    messages = thread(60)
    counter = Counter()
    budget = 6_000
    assert await counter(messages) > 2 * budget  # far over
    window = ContextWindow(budget=budget, size=message_size)
    sent = list(await window.fit("s1", messages, overhead=OVERHEAD, count=counter))
    assert await counter(sent) <= budget
    first_turn = [m for m in messages if m.turn_id == "t0"]
    assert sent[: len(first_turn)] == first_turn
    notice = sent[len(first_turn)]
    assert isinstance(notice, UserMessage)
    rest = sent[len(first_turn) + 1 :]
    opening = next(i for i, m in enumerate(messages) if m is rest[0])
    pinned = 0 if messages[opening + 1] is rest[1] else 1
    if pinned:  # the cut fell inside a turn: the question it answers stays
        rest = rest[1:]
    assert rest == messages[len(messages) - len(rest) :]
    left_out = len(messages) - len(first_turn) - len(rest) - pinned
    assert notice.text == omission_notice(left_out)
    assert_valid_api_messages(api_messages(sent))
    assert len(messages) == 60 * 6  # the transcript itself is untouched


async def test_no_budget_ever_splits_a_tool_call_from_its_result():
    messages = thread(25, calls=3)
    for budget in range(1_500, 12_000, 350):
        window = ContextWindow(budget=budget, size=message_size)
        sent = list(await window.fit("s1", messages, overhead=OVERHEAD, count=Counter()))
        assert_valid_api_messages(api_messages(sent))
        kept_tools = [m for m in sent if isinstance(m, ToolMessage)]
        assert all(
            any(
                isinstance(a, AssistantMessage) and m.call_id in {c.id for c in a.tool_calls}
                for a in sent
            )
            for m in kept_tools
        )


async def test_the_cut_stays_put_while_the_window_fits_so_the_cache_prefix_holds():
    messages = thread(60)
    window = ContextWindow(budget=6_000, size=message_size)
    first = list(await window.fit("s1", messages, overhead=OVERHEAD, count=Counter()))
    grown = [*messages, *thread(1)[:2]]  # the next step adds a question and a call
    second = list(await window.fit("s1", grown, overhead=OVERHEAD, count=Counter()))
    assert second[: len(first)] == first  # same prefix: the cache reads it
    assert second[len(first) :] == grown[len(messages) :]


async def test_a_first_exchange_too_big_for_its_share_shrinks_to_its_opening_message():
    messages = [*thread(1, words=3_000), *thread(40)]
    window = ContextWindow(budget=8_000, size=message_size)
    sent = list(await window.fit("s1", messages, overhead=OVERHEAD, count=Counter()))
    assert sent[0] is messages[0]
    assert isinstance(sent[1], UserMessage)
    assert sent[1].turn_id == ""
    assert_valid_api_messages(api_messages(sent))


async def test_a_single_turn_longer_than_the_budget_keeps_its_newest_calls():
    messages = thread(1, calls=80)[:-1]  # one long tool loop still running
    window = ContextWindow(budget=4_000, size=message_size)
    counter = Counter()
    sent = list(await window.fit("s1", messages, overhead=OVERHEAD, count=counter))
    assert await counter(sent) <= 4_000
    assert sent[0] is messages[0]  # the question being answered stays
    assert isinstance(sent[1], UserMessage)
    assert sent[1].turn_id == ""
    assert isinstance(sent[2], AssistantMessage)
    assert sent[-1] is messages[-1]
    assert_valid_api_messages(api_messages(sent))


async def test_a_cut_inside_the_newest_turn_keeps_the_question_it_answers():
    messages = [*thread(30), *thread(1, calls=60)[:-1]]
    opening = messages[30 * 6]
    assert isinstance(opening, UserMessage)
    window = ContextWindow(budget=5_000, size=message_size)
    sent = list(await window.fit("s1", messages, overhead=OVERHEAD, count=Counter()))
    notice_at = next(i for i, m in enumerate(sent) if m.turn_id == "")
    assert sent[notice_at + 1] is opening
    assert isinstance(sent[notice_at + 2], AssistantMessage)
    assert_valid_api_messages(api_messages(sent))


async def test_a_thread_that_fits_is_counted_once_not_on_every_step():
    messages = thread(20)
    counter = Counter()
    budget = (await counter(messages)) * 2  # over the budget in characters, not in tokens
    counter.calls = 0
    window = ContextWindow(budget=budget, size=message_size)
    grown = list(messages)
    for step in range(5):
        grown.append(UserMessage(turn_id=f"n{step}", text="one more question"))
        sent = await window.fit("s1", grown, overhead=OVERHEAD, count=counter)
        assert list(sent) == grown
    assert counter.calls == 1  # later steps grew by less than the room left


async def test_a_remembered_cut_is_not_applied_to_another_transcript():
    long = thread(60)
    window = ContextWindow(budget=6_000, size=message_size)
    first = list(await window.fit("s1", long, overhead=OVERHEAD, count=Counter()))
    assert len(first) < len(long)
    # the same key, a different (reset, or another agent's) transcript that fits whole
    other = thread(12, words=80)
    counter = Counter()
    sent = list(await window.fit("s1", other, overhead=OVERHEAD, count=counter))
    assert await counter(sent) <= 6_000
    assert sent == other
