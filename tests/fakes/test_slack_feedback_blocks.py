"""The fake Slack checks feedback buttons as Slack documents them, and takes them on a stop.

docs.slack.dev/reference/block-kit/block-elements/feedback-buttons-element and
/blocks/context-actions-block: a ``feedback_buttons`` element lives in a
``context_actions`` block (at most 5 elements); both its buttons are required,
each with a plain_text ``text`` of at most 75 characters, a ``value`` of at most
2,000 and an optional ``accessibility_label`` of at most 75.
"""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import (
    ContextActionsBlock,
    FeedbackButtonObject,
    FeedbackButtonsElement,
)

from bot.slack.feedback_blocks import feedback_blocks
from tests.fakes.slack_api import FakeSlack
from tests.fakes.test_slack_api import client, error_of, start_stream


def buttons(**changed: Any) -> dict[str, Any]:
    element: dict[str, Any] = {
        "type": "feedback_buttons",
        "action_id": "fb",
        "positive_button": {"text": {"type": "plain_text", "text": "👍"}, "value": "good"},
        "negative_button": {"text": {"type": "plain_text", "text": "👎"}, "value": "bad"},
    }
    element.update(changed)
    return element


def button(**changed: Any) -> dict[str, Any]:
    return {"text": {"type": "plain_text", "text": "👎"}, "value": "bad", **changed}


async def test_what_the_sdk_and_the_bot_build_is_taken() -> None:
    sdk = ContextActionsBlock(
        elements=[
            FeedbackButtonsElement(
                action_id="fb",
                positive_button=FeedbackButtonObject(text="👍", value="g", accessibility_label="G"),
                negative_button=FeedbackButtonObject(text="👎", value="b"),
            )
        ]
    ).to_dict()
    ours = feedback_blocks("slack:T0TEAM:C0GENERAL:1.0", "T0TEAM:C0GENERAL:1.0")
    async with FakeSlack() as slack:
        for blocks in ([sdk], ours, [{"type": "context_actions", "elements": [buttons()]}]):
            await client(slack).chat_postMessage(channel=slack.channel_id, text="t", blocks=blocks)

        assert [list(m.blocks) for m in slack.messages(slack.channel_id)] == [
            [sdk],
            ours,
            [{"type": "context_actions", "elements": [buttons()]}],
        ]


@pytest.mark.parametrize(
    ("element", "pointer"),
    [
        pytest.param(buttons(negative_button=None), "/negative_button", id="a-button-missing"),
        pytest.param(
            buttons(negative_button=button(text={"type": "plain_text", "text": "x" * 76})),
            "/negative_button/text/text",
            id="text-too-long",
        ),
        pytest.param(
            buttons(negative_button=button(text={"type": "mrkdwn", "text": "*no*"})),
            "/negative_button/text",
            id="text-not-plain",
        ),
        pytest.param(
            buttons(negative_button=button(value="v" * 2001)),
            "/negative_button/value",
            id="value-too-long",
        ),
        pytest.param(
            buttons(negative_button=button(value="")), "/negative_button/value", id="no-value"
        ),
        pytest.param(
            buttons(negative_button=button(accessibility_label="a" * 76)),
            "/negative_button/accessibility_label",
            id="label-too-long",
        ),
        pytest.param(
            buttons(negative_button=button(style="danger")),
            "/negative_button/style",
            id="unknown-button-field",
        ),
        pytest.param(buttons(url="https://example.com"), "/url", id="unknown-field"),
        pytest.param(buttons(action_id="a" * 256), "/action_id", id="action-id-too-long"),
    ],
)
async def test_a_wrong_feedback_element_is_refused_where_it_is_wrong(
    element: dict[str, Any], pointer: str
) -> None:
    blocks = [{"type": "context_actions", "elements": [element]}]
    async with FakeSlack() as slack:
        with pytest.raises(SlackApiError) as raised:
            await client(slack).chat_postMessage(channel=slack.channel_id, text="t", blocks=blocks)

        assert error_of(raised) == "invalid_blocks"
        errors = raised.value.response["errors"]
        assert any(f"[json-pointer:/blocks/0/elements/0{pointer}]" in e for e in errors), errors
        assert slack.messages(slack.channel_id) == []


@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param([{"type": "actions", "elements": [buttons()]}], id="outside-context-actions"),
        pytest.param(
            [
                {
                    "type": "context_actions",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": "b",
                            "text": {"type": "plain_text", "text": "B"},
                        }
                    ],
                }
            ],
            id="a-plain-button-inside",
        ),
        pytest.param([{"type": "context_actions", "elements": [buttons()] * 6}], id="six"),
    ],
)
async def test_feedback_buttons_go_in_a_context_actions_block_and_nothing_else_does(
    blocks: list[Any],
) -> None:
    async with FakeSlack() as slack:
        with pytest.raises(SlackApiError) as raised:
            await client(slack).chat_postMessage(channel=slack.channel_id, text="t", blocks=blocks)

        assert error_of(raised) == "invalid_blocks"


async def test_a_stream_takes_the_blocks_it_stops_with_under_its_words() -> None:
    ours = feedback_blocks("slack:T0TEAM:C0GENERAL:1.0", "T0TEAM:C0GENERAL:1.0")
    async with FakeSlack() as slack:
        c = client(slack)
        thread = slack.post_user_message(slack.channel_id, "hi")
        started = await start_stream(c, slack, thread)
        await c.chat_appendStream(
            channel=slack.channel_id,
            ts=started["ts"],
            chunks=[{"type": "markdown_text", "text": "Hello."}],
        )

        await c.chat_stopStream(channel=slack.channel_id, ts=started["ts"], blocks=ours)

        [reply] = slack.replies(slack.channel_id, thread)
        assert (reply.text, reply.stream, list(reply.blocks)) == ("Hello.", "stopped", ours)
