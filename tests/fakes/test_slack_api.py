from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.models.messages.chunk import TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_api import STREAM_LIFETIME, STREAM_METHODS, FakeSlack


def client(slack: FakeSlack, token: str | None = None, **kwargs: Any) -> AsyncWebClient:
    return AsyncWebClient(token=token or slack.token, base_url=slack.base_url, **kwargs)


async def start_stream(c: AsyncWebClient, slack: FakeSlack, thread_ts: str, **kwargs: Any) -> Any:
    """chat.startStream in the fake's channel, for its human, as a bot replies in a thread."""
    return await c.chat_startStream(
        channel=slack.channel_id,
        thread_ts=thread_ts,
        recipient_user_id=slack.user_id,
        recipient_team_id=slack.team_id,
        **kwargs,
    )


def error_of(raised: pytest.ExceptionInfo[SlackApiError]) -> str:
    return str(raised.value.response["error"])


async def test_post_then_update_leaves_one_reply_with_the_new_text() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        root = slack.post_user_message(slack.channel_id, "<@U0BOT> hi")
        posted = await c.chat_postMessage(channel=slack.channel_id, thread_ts=root, text="draft")
        await c.chat_update(channel=slack.channel_id, ts=posted["ts"], text="final")
        replies = await c.conversations_replies(channel=slack.channel_id, ts=root)

    assert posted["message"]["bot_id"] == slack.bot_id
    assert [m.text for m in slack.replies(slack.channel_id, root)] == ["final"]
    parent, reply = replies["messages"]
    assert (parent["reply_count"], parent["thread_ts"]) == (1, root)
    assert reply["text"] == "final"
    assert reply["parent_user_id"] == slack.user_id
    assert "edited" in reply


async def test_ts_values_are_slack_shaped_and_increase() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        first = await c.chat_postMessage(channel=slack.channel_id, text="one")
        second = await c.chat_postMessage(channel=slack.channel_id, text="two")

    assert first["ts"] == "1700000000.000100"
    assert float(second["ts"]) > float(first["ts"])


async def test_replies_page_with_cursor_oldest_first() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        root = slack.post_user_message(slack.channel_id, "question")
        for n in range(5):
            slack.post_user_message(slack.channel_id, f"reply {n}", thread_ts=root)
        # slack_sdk's own paging: it follows response_metadata.next_cursor
        pages: list[tuple[list[str], bool]] = []
        first = await c.conversations_replies(channel=slack.channel_id, ts=root, limit=2)
        async for page in first:  # the same response object, its data replaced per page
            pages.append(([m["text"] for m in page["messages"]], page["has_more"]))

    assert pages == [
        (["question", "reply 0"], True),
        (["reply 1", "reply 2"], True),
        (["reply 3", "reply 4"], False),
    ]
    cursors = [call.params.get("cursor") for call in slack.calls_to("conversations.replies")]
    assert cursors[0] is None
    assert all(cursors[1:])


async def test_history_pages_newest_first_without_thread_replies() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        first = slack.post_user_message(slack.channel_id, "first")
        slack.post_user_message(slack.channel_id, "in thread", thread_ts=first)
        slack.post_user_message(slack.channel_id, "second")
        slack.post_user_message(slack.channel_id, "third")
        page = await c.conversations_history(channel=slack.channel_id, limit=2)
        cursor = page["response_metadata"]["next_cursor"]
        rest = await c.conversations_history(channel=slack.channel_id, limit=2, cursor=cursor)
        with pytest.raises(SlackApiError) as bad_cursor:
            await c.conversations_history(channel=slack.channel_id, cursor="bm9wZQ==")

    assert [m["text"] for m in page["messages"]] == ["third", "second"]
    assert [m["text"] for m in rest["messages"]] == ["first"]
    assert rest["messages"][0]["reply_count"] == 1
    assert error_of(bad_cursor) == "invalid_cursor"


async def test_reading_a_channel_the_bot_is_not_in_is_refused() -> None:
    async with FakeSlack() as slack:
        slack.add_channel("C0SECRET", members=[slack.user_id], bot_is_member=False)
        with pytest.raises(SlackApiError) as raised:
            await client(slack).conversations_history(channel="C0SECRET")

    assert error_of(raised) == "not_in_channel"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        pytest.param(
            {"channel": "C0NOPE", "text": "hi"}, "channel_not_found", id="unknown-channel"
        ),
        pytest.param({"channel": "C0GENERAL"}, "no_text", id="no-text"),
        pytest.param({"channel": "C0GENERAL", "text": "x" * 4001}, "msg_too_long", id="too-long"),
    ],
)
async def test_post_is_refused_as_slack_refuses_it(call: dict[str, Any], error: str) -> None:
    async with FakeSlack() as slack:
        with pytest.raises(SlackApiError) as raised:
            # api_call: chat_postMessage would warn about the missing text before sending
            await client(slack).api_call("chat.postMessage", json=call)

    assert raised.value.response.status_code == 200
    assert error_of(raised) == error
    assert slack.messages(slack.channel_id) == []


async def test_update_of_an_unknown_ts_is_message_not_found() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        human = slack.post_user_message(slack.channel_id, "mine")
        with pytest.raises(SlackApiError) as unknown:
            await c.chat_update(channel=slack.channel_id, ts="1700000099.000100", text="x")
        with pytest.raises(SlackApiError) as not_ours:
            await c.chat_update(channel=slack.channel_id, ts=human, text="x")

    assert error_of(unknown) == "message_not_found"
    assert error_of(not_ours) == "cant_update_message"


async def test_delete_removes_the_message() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        posted = await c.chat_postMessage(channel=slack.channel_id, text="oops")
        await c.chat_delete(channel=slack.channel_id, ts=posted["ts"])
        with pytest.raises(SlackApiError) as again:
            await c.chat_delete(channel=slack.channel_id, ts=posted["ts"])

    assert slack.messages(slack.channel_id) == []
    assert error_of(again) == "message_not_found"


async def test_ephemeral_is_kept_apart_per_user() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        slack.add_user("U0BOB")
        root = slack.post_user_message(slack.channel_id, "approve?")
        sent = await c.chat_postEphemeral(
            channel=slack.channel_id, user=slack.user_id, thread_ts=root, text="not you"
        )
        with pytest.raises(SlackApiError) as outsider:
            await c.chat_postEphemeral(channel=slack.channel_id, user="U0BOB", text="hi")

    [ephemeral] = slack.ephemerals
    assert (ephemeral.user, ephemeral.text, ephemeral.thread_ts) == (slack.user_id, "not you", root)
    assert ephemeral.ts == sent["message_ts"]
    assert slack.replies(slack.channel_id, root) == []
    assert error_of(outsider) == "user_not_in_channel"


@pytest.mark.parametrize(
    ("token", "error"),
    [
        pytest.param("", "not_authed", id="missing"),
        pytest.param("xoxb-wrong-secret", "invalid_auth", id="wrong"),
    ],
)
async def test_bad_token_is_refused_without_echoing_it(token: str, error: str) -> None:
    async with FakeSlack() as slack:
        c = AsyncWebClient(token=token or None, base_url=slack.base_url)
        with pytest.raises(SlackApiError) as raised:
            await c.chat_postMessage(channel=slack.channel_id, text="hi")

    assert raised.value.response.status_code == 200
    assert raised.value.response.data == {"ok": False, "error": error}
    assert "wrong-secret" not in repr(slack.calls)
    assert slack.messages(slack.channel_id) == []


async def test_auth_test_names_the_bot() -> None:
    async with FakeSlack() as slack:
        answer = await client(slack).auth_test()

    assert (answer["user_id"], answer["bot_id"], answer["team_id"]) == ("U0BOT", "B0BOT", "T0TEAM")
    assert slack.calls[0].headers["authorization"] == "Bearer (redacted)"


async def test_users_and_conversations_info() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        alice = await c.users_info(user=slack.user_id)
        channel = await c.conversations_info(channel=slack.channel_id)
        with pytest.raises(SlackApiError) as unknown:
            await c.users_info(user="U0NOBODY")

    assert (alice["user"]["name"], alice["user"]["is_bot"]) == ("alice", False)
    assert (channel["channel"]["name"], channel["channel"]["is_member"]) == ("general", True)
    assert error_of(unknown) == "user_not_found"


async def test_calls_record_query_form_and_json_params() -> None:
    divider = [{"type": "divider"}]
    async with FakeSlack() as slack:
        c = client(slack)
        await c.conversations_history(channel=slack.channel_id, limit=3)
        await c.chat_postMessage(channel=slack.channel_id, text="json", blocks=divider)
        form = {"channel": slack.channel_id, "text": "form", "blocks": json.dumps(divider)}
        await c.api_call("chat.postMessage", data=form)

    history, as_json, as_form = slack.calls
    assert (history.http_method, history.params) == ("GET", {"channel": "C0GENERAL", "limit": "3"})
    assert as_json.params["blocks"] == divider
    assert as_form.params["blocks"] == json.dumps(divider)  # recorded as sent
    assert as_form.headers["content-type"] == "application/x-www-form-urlencoded"
    assert [m.blocks for m in slack.messages(slack.channel_id)] == [tuple(divider)] * 2
    assert slack.calls_to("chat.postMessage") == [as_json, as_form]


async def test_set_status_is_recorded() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        root = slack.post_user_message(slack.channel_id, "hi")
        await c.assistant_threads_setStatus(
            channel_id=slack.channel_id,
            thread_ts=root,
            status="is thinking...",
            loading_messages=["Reading", "Writing"],
        )
        thinking = slack.status(slack.channel_id, root)
        await c.assistant_threads_setStatus(channel_id=slack.channel_id, thread_ts=root, status="")

    assert thinking == "is thinking..."
    assert slack.statuses[0].loading_messages == ("Reading", "Writing")
    assert slack.status(slack.channel_id, root) == ""


async def test_stream_life_cycle_makes_one_message_with_the_whole_text() -> None:
    feedback = [{"type": "context", "elements": [{"type": "mrkdwn", "text": "Was this useful?"}]}]
    async with FakeSlack() as slack:
        c = client(slack)
        root = slack.post_user_message(slack.channel_id, "<@U0BOT> explain")
        start = await start_stream(c, slack, root, markdown_text="Hello")
        for piece in (", ", "wor", "ld"):
            await c.chat_appendStream(channel=slack.channel_id, ts=start["ts"], markdown_text=piece)
        midway = slack.replies(slack.channel_id, root)[0]
        stop = await c.chat_stopStream(
            channel=slack.channel_id, ts=start["ts"], markdown_text="!", blocks=feedback
        )
        with pytest.raises(SlackApiError) as late:
            await c.chat_appendStream(channel=slack.channel_id, ts=start["ts"], markdown_text="?")

    [reply] = slack.replies(slack.channel_id, root)
    assert (midway.text, midway.stream) == ("Hello, world", "streaming")
    assert (reply.ts, reply.text, reply.stream) == (start["ts"], "Hello, world!", "stopped")
    assert reply.blocks == tuple(feedback)
    assert stop["message"]["text"] == "Hello, world!"
    assert error_of(late) == "message_not_in_streaming_state"


async def test_chat_stream_helper_ends_in_one_message() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        root = slack.post_user_message(slack.channel_id, "<@U0BOT> search")
        stream = await c.chat_stream(
            channel=slack.channel_id,
            thread_ts=root,
            recipient_user_id=slack.user_id,
            recipient_team_id=slack.team_id,
            buffer_size=8,
        )
        task = TaskUpdateChunk(id="t1", title="Searching", status="in_progress", details="#eng")
        await stream.append(chunks=[task])
        for word in ("Found ", "three ", "threads ", "about ", "it."):
            await stream.append(markdown_text=word)
        done = TaskUpdateChunk(id="t1", title="Searched", status="complete", details=", 24h")
        await stream.stop(chunks=[done])

    [reply] = slack.replies(slack.channel_id, root)
    assert reply.text == "Found three threads about it."
    assert reply.tasks["t1"] == {
        "id": "t1",
        "title": "Searched",
        "status": "complete",
        "details": "#eng, 24h",
    }
    # buffer_size=8: the task opens the stream, text flushes once 8 chars are buffered
    assert [call.method for call in slack.calls] == [
        "chat.startStream",
        "chat.appendStream",
        "chat.appendStream",
        "chat.appendStream",
        "chat.stopStream",
    ]


@pytest.mark.parametrize("expire", ["clock", "expire_streams"])
async def test_append_after_expiry_fails_as_slack_does(expire: str) -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        root = slack.post_user_message(slack.channel_id, "long job")
        start = await start_stream(c, slack, root)
        await c.chat_appendStream(channel=slack.channel_id, ts=start["ts"], markdown_text="Part 1")
        if expire == "clock":
            slack.advance(STREAM_LIFETIME - 1)
            await c.chat_appendStream(channel=slack.channel_id, ts=start["ts"], markdown_text=" 1b")
            slack.advance(1)
        else:
            slack.expire_streams()
        with pytest.raises(SlackApiError) as append:
            await c.chat_appendStream(channel=slack.channel_id, ts=start["ts"], markdown_text=" 2")
        with pytest.raises(SlackApiError) as stop:
            await c.chat_stopStream(channel=slack.channel_id, ts=start["ts"])
        # the fallback used in the wild: rewrite the message whole
        streamed = slack.replies(slack.channel_id, root)[0].text
        await c.chat_update(channel=slack.channel_id, ts=start["ts"], text=streamed + " 2")

    assert error_of(append) == error_of(stop) == "message_not_in_streaming_state"
    assert streamed == ("Part 1 1b" if expire == "clock" else "Part 1")
    [reply] = slack.replies(slack.channel_id, root)
    assert (reply.text, reply.stream) == (streamed + " 2", "expired")


async def test_stream_to_a_channel_needs_its_recipient_but_a_dm_does_not() -> None:
    async with FakeSlack() as slack:
        root = slack.post_user_message(slack.channel_id, "hi")
        with pytest.raises(SlackApiError) as raised:
            await client(slack).chat_startStream(channel=slack.channel_id, thread_ts=root)

        # a DM needs no recipient
        slack.add_channel("D0ALICE", members=[slack.user_id], is_im=True)
        question = slack.post_user_message("D0ALICE", "hi")
        await client(slack).chat_startStream(channel="D0ALICE", thread_ts=question)

    assert error_of(raised) == "missing_recipient_user_id"
    assert slack.replies(slack.channel_id, root) == []
    assert [m.stream for m in slack.replies("D0ALICE", question)] == ["streaming"]


async def test_rate_limit_is_retried_after_retry_after_by_the_handler() -> None:
    async with FakeSlack() as slack:
        c = client(slack, retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)])
        slack.fail_next("chat.postMessage", "ratelimited", status=429, retry_after=1)
        started = time.monotonic()
        await c.chat_postMessage(channel=slack.channel_id, text="eventually")
        elapsed = time.monotonic() - started

    refused, accepted = slack.calls_to("chat.postMessage")
    assert (refused.status, refused.error) == (429, "ratelimited")
    assert accepted.ok
    assert accepted.at - refused.at >= 1.0
    assert elapsed >= 1.0
    assert [m.text for m in slack.messages(slack.channel_id)] == ["eventually"]


async def test_rate_limit_surfaces_without_a_retry_handler() -> None:
    async with FakeSlack() as slack:
        slack.fail_next("chat.update", "ratelimited", status=429, retry_after=7)
        with pytest.raises(SlackApiError) as raised:
            await client(slack).chat_update(channel=slack.channel_id, ts="1.2", text="x")

    assert raised.value.response.status_code == 429
    assert raised.value.response.headers["Retry-After"] == "7"
    assert error_of(raised) == "ratelimited"


async def test_scripted_fault_answers_once_and_changes_nothing() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        slack.fail_next("chat.postMessage")
        with pytest.raises(SlackApiError) as raised:
            await c.chat_postMessage(channel=slack.channel_id, text="first try")
        await c.chat_postMessage(channel=slack.channel_id, text="second try")

    assert error_of(raised) == "internal_error"
    assert [m.text for m in slack.messages(slack.channel_id)] == ["second try"]


async def test_a_kill_or_a_drop_set_on_a_call_happens_though_slack_refuses_the_call() -> None:
    # a crash test that arms a kill on chat.stopStream must see it fire even when the
    # stream had ended and the stop is refused: the process dies all the same
    fired: list[str] = []
    async with FakeSlack() as slack:
        c = client(slack, retry_handlers=[])  # slack_sdk would send a dropped call again
        root = slack.post_user_message(slack.channel_id, "hi")
        ts = (await start_stream(c, slack, root))["ts"]
        slack.expire_streams()
        slack.on_call("chat.stopStream", lambda: fired.append("killed"))
        with pytest.raises(SlackApiError) as refused:
            await c.chat_stopStream(channel=slack.channel_id, ts=ts)
        slack.drop_connection("chat.stopStream", applied=True)
        with pytest.raises(aiohttp.ClientError):
            await c.chat_stopStream(channel=slack.channel_id, ts=ts)

    assert error_of(refused) == "message_not_in_streaming_state"
    assert fired == ["killed"]
    assert [c.status for c in slack.calls_to("chat.stopStream")] == [200, 0]


async def test_disabled_streaming_answers_unknown_method() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        slack.disable(*STREAM_METHODS)
        root = slack.post_user_message(slack.channel_id, "hi")
        with pytest.raises(SlackApiError) as raised:
            await start_stream(c, slack, root)
        with pytest.raises(SlackApiError) as unimplemented:
            await c.reactions_add(channel=slack.channel_id, timestamp=root, name="eyes")
        slack.enable(*STREAM_METHODS)
        await start_stream(c, slack, root)

    assert error_of(raised) == error_of(unimplemented) == "unknown_method"
    assert len(slack.replies(slack.channel_id, root)) == 1


def _section(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}, **extra}


def _button(**fields: Any) -> dict[str, Any]:
    return {"type": "button", "text": {"type": "plain_text", "text": "Approve"}, **fields}


@pytest.mark.parametrize(
    ("blocks", "pointer"),
    [
        pytest.param([{"type": "divider"}] * 51, "/blocks", id="51-blocks"),
        pytest.param([_section("x" * 3001)], "/blocks/0/text/text", id="long-section"),
        pytest.param(
            [_section("a", block_id="b1"), _section("b", block_id="b1")],
            "/blocks/1/block_id",
            id="duplicate-block-id",
        ),
        pytest.param(
            [{"type": "actions", "elements": [_button(action_id="ok", value="v" * 2001)]}],
            "/blocks/0/elements/0/value",
            id="long-button-value",
        ),
        pytest.param(
            [{"type": "actions", "elements": [_button(action_id="a")] * 26}],
            "/blocks/0/elements",
            id="26-actions",
        ),
        pytest.param([{"type": "banner"}], "/blocks/0/type", id="unknown-type"),
    ],
)
async def test_invalid_blocks_are_refused(blocks: list[Any], pointer: str) -> None:
    async with FakeSlack() as slack:
        with pytest.raises(SlackApiError) as raised:
            await client(slack).chat_postMessage(channel=slack.channel_id, text="t", blocks=blocks)

    assert error_of(raised) == "invalid_blocks"
    assert any(f"[json-pointer:{pointer}]" in e for e in raised.value.response["errors"])
    assert slack.messages(slack.channel_id) == []


async def test_valid_approval_blocks_are_stored() -> None:
    blocks = [
        _section("*Run* `delete_branch`?"),
        {
            "type": "actions",
            "block_id": "approval:req_1:v1",
            "elements": [
                _button(action_id="tool_approve", value="req_1", style="primary"),
                _button(action_id="tool_deny", value="req_1"),
            ],
        },
    ]
    async with FakeSlack() as slack:
        await client(slack).chat_postMessage(channel=slack.channel_id, text="t", blocks=blocks)

    [message] = slack.messages(slack.channel_id)
    assert message.blocks == tuple(blocks)


async def test_socket_mode_hands_out_a_one_time_socket_that_greets_and_takes_acks() -> None:
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        with pytest.raises(SlackApiError) as wrong:
            await client(slack).apps_connections_open(app_token=slack.token)  # the bot token
        assert error_of(wrong) == "invalid_auth"
        opened = await client(slack).apps_connections_open(app_token=slack.app_token)
        url = opened["url"]
        assert url.startswith("ws://127.0.0.1:")

        async with http.ws_connect(url) as socket:
            hello = await socket.receive_json()
            assert (hello["type"], hello["connection_info"]["app_id"]) == ("hello", slack.app_id)
            envelope_id = await slack.socket_mode.push("events_api", {"type": "event_callback"})
            pushed = await socket.receive_json()
            assert (pushed["envelope_id"], pushed["type"]) == (envelope_id, "events_api")
            assert pushed["payload"] == {"type": "event_callback"}
            await socket.send_json({"envelope_id": envelope_id})
            assert await slack.socket_mode.ack_of(envelope_id) == {"envelope_id": envelope_id}

        async with http.get(url.replace("ws://", "http://")) as used:
            assert used.status == 401  # each URL is good for one connection


async def test_conversations_list_pages_public_channels_unless_asked_for_others() -> None:
    async with FakeSlack() as slack:
        for n in range(3):
            slack.add_channel(f"C0PUB{n}", name=f"pub-{n}")
        slack.add_channel("G0SECRET", name="secret", is_private=True)
        c = client(slack)

        first = await c.conversations_list(limit=2)
        rest = await c.conversations_list(limit=2, cursor=first["response_metadata"]["next_cursor"])
        private = await c.conversations_list(types="private_channel")

        names = [ch["name"] for ch in first["channels"] + rest["channels"]]
        assert names == ["general", "pub-0", "pub-1", "pub-2"]  # C0GENERAL sorts first
        assert rest["response_metadata"]["next_cursor"] == ""
        assert [ch["name"] for ch in private["channels"]] == ["secret"]
        with pytest.raises(SlackApiError) as wrong:
            await c.conversations_list(types="everything")
        assert error_of(wrong) == "invalid_types"


async def test_a_stream_keeps_to_its_kind_of_content_and_cannot_be_updated_while_open() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        root = slack.post_user_message(slack.channel_id, "<@U0BOT> hi")
        started = await start_stream(c, slack, root, markdown_text="Hello")
        ts = started["ts"]
        chunk = {"type": "markdown_text", "text": " there"}

        with pytest.raises(SlackApiError) as mixed:
            await c.chat_appendStream(channel=slack.channel_id, ts=ts, chunks=[chunk])
        with pytest.raises(SlackApiError) as both:
            await c.chat_appendStream(
                channel=slack.channel_id, ts=ts, markdown_text=" there", chunks=[chunk]
            )
        with pytest.raises(SlackApiError) as open_update:
            await c.chat_update(channel=slack.channel_id, ts=ts, markdown_text="Hi")
        with pytest.raises(SlackApiError) as conflict:
            await c.chat_postMessage(channel=slack.channel_id, text="a", markdown_text="b")

        assert error_of(mixed) == "streaming_mode_mismatch"
        assert error_of(both) == "cannot_provide_both_markdown_text_and_chunks"
        assert error_of(open_update) == "streaming_state_conflict"
        assert error_of(conflict) == "markdown_text_conflict"
        await c.chat_stopStream(channel=slack.channel_id, ts=ts)
        await c.chat_update(channel=slack.channel_id, ts=ts, markdown_text="Hi")  # now it may
        [reply] = slack.replies(slack.channel_id, root)
        assert (reply.text, reply.stream) == ("Hi", "stopped")


async def test_a_home_view_is_kept_per_user_and_a_wrong_one_refused() -> None:
    async with FakeSlack() as slack:
        c = client(slack)
        slack.add_user("U0BOSS", name="boss", is_admin=True)
        section = {"type": "section", "text": {"type": "mrkdwn", "text": "*Hello*"}}
        published = await c.views_publish(
            user_id="U0BOSS", view={"type": "home", "blocks": [section]}
        )
        boss = await c.users_info(user="U0BOSS")
        member = await c.users_info(user=slack.user_id)
        with pytest.raises(SlackApiError) as modal:
            await c.views_publish(user_id="U0BOSS", view={"type": "modal", "blocks": [section]})
        with pytest.raises(SlackApiError) as nobody:
            await c.views_publish(user_id="U0NOBODY", view={"type": "home", "blocks": [section]})
        with pytest.raises(SlackApiError) as too_many:
            await c.views_publish(
                user_id="U0BOSS", view={"type": "home", "blocks": [section] * 101}
            )

    assert published["view"]["type"] == "home"
    assert slack.home_views == {"U0BOSS": {"type": "home", "blocks": [section]}}
    assert (boss["user"]["is_admin"], member["user"]["is_admin"]) == (True, False)
    assert error_of(modal) == "invalid_arguments"
    assert error_of(too_many) == "invalid_blocks"
    assert error_of(nobody) == "user_not_found"


async def test_a_slash_commands_response_url_keeps_what_is_posted_to_it() -> None:
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        url = slack.response_url("h1")
        said = {"text": "Only you can see this.", "response_type": "ephemeral"}
        async with http.post(url, json=said) as answered:
            status = answered.status
        async with http.post(url, json={"response_type": "ephemeral"}) as empty:
            refused = (empty.status, await empty.text())

    assert status == 200
    assert refused == (400, "no_text")
    assert slack.command_responses == {"h1": [said]}
