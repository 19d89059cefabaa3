"""One reply message against the fake Slack Web API: streaming, refusals, splitting."""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.settings import Settings
from bot.slack.reply import MAX_MESSAGE_CHARS, ThreadReply
from bot.slack.run import slack_client
from tests.fakes.slack_api import FakeSlack


class Clock:
    """Monotonic seconds that move only when told: flushes fall due on demand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reply_in(
    slack: FakeSlack,
    clock: Clock,
    thread: str,
    client: AsyncWebClient | None = None,
    **options: Any,
) -> ThreadReply:
    return ThreadReply(
        client or AsyncWebClient(token=slack.token, base_url=slack.base_url),
        channel=slack.channel_id,
        thread_ts=thread,
        recipient_user=slack.user_id,
        team=slack.team_id,
        clock=clock,
        **options,
    )


async def test_a_stream_refused_for_a_passing_reason_is_closed_then_updated_to_the_end():
    async with FakeSlack() as slack:
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)
        await reply.add_text("Hello")
        slack.fail_next("chat.appendStream", "internal_error")  # the stream is still open
        clock.now += 2
        await reply.add_text(" world")
        clock.now += 2
        await reply.add_text(", bye")

        await reply.finish(whole=["Hello world, bye"])

        [message] = slack.replies(slack.channel_id, thread)
        assert (message.text, message.stream) == ("Hello world, bye", "stopped")


async def test_a_stream_is_fed_chunks_only_text_and_task_lines_alike():
    async with FakeSlack() as slack:
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)

        await reply.task("call_1", "read_thread", "in_progress")  # before any words
        await reply.task("call_1", "read_thread", "complete")
        clock.now += 2
        await reply.add_text("It says hello.")
        await reply.finish(whole=["It says hello."])

        [message] = slack.replies(slack.channel_id, thread)
        assert (message.text, message.stream) == ("It says hello.", "stopped")
        assert message.tasks["call_1"]["status"] == "complete"
        stream_calls = slack.calls_to("chat.startStream", "chat.appendStream", "chat.stopStream")
        assert all("markdown_text" not in call.params for call in stream_calls)


async def test_a_split_reply_still_shows_a_part_it_never_streamed():
    async with FakeSlack() as slack:
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)
        first = "A" * 7_000 + "\n\n" + "B" * 7_000
        await reply.add_text(first)  # one message cannot hold it: two
        missed = "a step whose words were streamed before anyone watched"

        await reply.finish(whole=[first, missed])

        said = [m.text for m in slack.replies(slack.channel_id, thread)]
        assert len(said) == 2
        assert all(len(text) <= MAX_MESSAGE_CHARS for text in said)
        assert said[0] == "A" * 7_000
        assert said[1] == "B" * 7_000 + "\n\n" + missed


async def test_a_stream_slack_ended_before_it_was_tagged_gets_its_tag_and_task_lines_by_update():
    # a message of the bot's own with no tag is what a restart takes for a stray stream
    async with FakeSlack() as slack:
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)
        await reply.task("call_1", "post_message", "in_progress")  # a stream of one task line
        slack.expire_streams()  # as Slack ends a stream some minutes in
        await reply.waiting("call_1")  # refused: message_not_in_streaming_state

        await reply.finish()

        [message] = slack.replies(slack.channel_id, thread)
        assert message.stream == "expired"
        assert message.metadata == {"event_type": "turnbot_reply", "event_payload": {"part": 0}}
        assert message.text == "_post_message: waiting for an answer_"


async def test_a_closing_note_whose_stream_ended_as_it_opened_still_gets_its_tag():
    async with FakeSlack() as slack:
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)
        slack.on_call("chat.startStream", slack.expire_streams)  # ended before its stop

        await reply.finish(note="_(superseded by a newer message)_")

        [message] = slack.replies(slack.channel_id, thread)
        assert message.text == "_(superseded by a newer message)_"
        assert message.metadata == {"event_type": "turnbot_reply", "event_payload": {"part": 0}}
        assert [c.error for c in slack.calls_to("chat.stopStream")] == [
            "message_not_in_streaming_state"
        ]


async def test_an_adopted_stream_slack_ended_untagged_is_tagged_and_a_tagged_one_left_as_it_is():
    async with FakeSlack() as slack:
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        client = AsyncWebClient(token=slack.token, base_url=slack.base_url)
        opened = {"channel": slack.channel_id, "thread_ts": thread}
        to = {"recipient_user_id": slack.user_id, "recipient_team_id": slack.team_id}
        chunks = [{"type": "markdown_text", "text": "Half"}]
        # what a process left: a stream Slack then ended before anyone tagged it
        stray = (await client.chat_startStream(**opened, **to, chunks=chunks))["ts"]
        slack.expire_streams()

        reply = reply_in(slack, clock, thread)
        await reply.adopt(stray)
        await reply.finish(whole=["Half"])

        [message] = slack.replies(slack.channel_id, thread)
        assert message.metadata == {"event_type": "turnbot_reply", "event_payload": {"part": 0}}
        assert message.text == "Half"
        updates = len(slack.calls_to("chat.update"))
        assert updates == 1

        again = reply_in(slack, clock, thread)  # a next start: stopped and tagged already
        await again.adopt(stray)
        await again.finish()  # nothing missing
        assert len(slack.calls_to("chat.update")) == updates
        assert [m.text for m in slack.replies(slack.channel_id, thread)] == ["Half"]


async def test_a_lost_stream_opening_never_takes_another_turns_stream_in_the_thread_for_its_own():
    # a newer message supersedes a reply still streaming: for a moment both stream
    async with FakeSlack() as slack:
        thread = slack.post_user_message(slack.channel_id, "hi")
        # the bot's client: a dropped connection sends no stream opening again
        client = slack_client(
            Settings(slack_bot_token=slack.token, slack_api_url=slack.base_url, _env_file=None)
        )
        to = {"recipient_user_id": slack.user_id, "recipient_team_id": slack.team_id}
        chunks = [{"type": "markdown_text", "text": "the older turn's words"}]
        older = await client.chat_startStream(
            channel=slack.channel_id, thread_ts=thread, chunks=chunks, **to
        )

        async def taken() -> set[str]:
            return {older["ts"]}  # what the older turn's kept state names

        newer = reply_in(slack, Clock(), thread, client, taken=taken)
        slack.drop_connection("chat.startStream", applied=False)  # unknown: looked for

        await newer.add_text("the newer turn's words")
        await newer.finish(whole=["the newer turn's words"])

        assert slack.calls_to("conversations.replies")  # the lost opening was looked for
        first, second = slack.replies(slack.channel_id, thread)
        assert (first.ts, first.text, first.stream) == (
            older["ts"],
            "the older turn's words",
            "streaming",
        )
        assert (second.ts, second.text) == (newer.ts, "the newer turn's words")
