"""A reply's footer (the feedback buttons) against the fake Slack: on its last message only."""

from __future__ import annotations

from bot.slack.feedback_blocks import feedback_blocks
from tests.bot.test_slack_reply import Clock, reply_in
from tests.fakes.slack_api import STREAM_METHODS, FakeSlack, Message

FOOTER = feedback_blocks("slack:T0TEAM:C0GENERAL:1.0", "T0TEAM:C0GENERAL:1.0")


def footers(message: Message) -> list[dict]:
    return [b for b in message.blocks if b["type"] == "context_actions"]


async def test_a_streamed_reply_takes_its_footer_as_its_stream_stops():
    async with FakeSlack() as slack:
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)
        await reply.add_text("Hello")
        clock.now += 2
        await reply.add_text(" there.")

        await reply.finish(whole=["Hello there."], footer=FOOTER)

        [message] = slack.replies(slack.channel_id, thread)
        assert (message.text, message.stream) == ("Hello there.", "stopped")
        assert footers(message) == FOOTER
        stop = slack.calls_to("chat.stopStream")[-1]
        assert stop.ok
        assert "blocks" in stop.params
        assert not slack.calls_to("chat.update")  # no second call for it


async def test_a_posted_reply_takes_it_in_its_last_update_as_a_markdown_block_and_its_text():
    async with FakeSlack() as slack:
        slack.disable(*STREAM_METHODS)
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)
        await reply.add_text("**Done**: all of it.")  # posted now: nothing is left to flush

        await reply.finish(whole=["**Done**: all of it."], footer=FOOTER)

        [message] = slack.replies(slack.channel_id, thread)
        assert message.text == "**Done**: all of it."  # the fallback notifications show
        said = {"type": "markdown", "text": "**Done**: all of it."}
        assert list(message.blocks) == [said, *FOOTER]
        update = slack.calls_to("chat.update")[-1]
        assert update.ok, update.response
        assert "markdown_text" not in update.params  # Slack refuses it beside blocks


async def test_a_reply_that_outgrew_one_message_has_it_under_its_last_only():
    for streamed in (True, False):
        async with FakeSlack() as slack:
            if not streamed:
                slack.disable(*STREAM_METHODS)
            clock = Clock()
            thread = slack.post_user_message(slack.channel_id, "hi")
            reply = reply_in(slack, clock, thread)
            whole = "A" * 7_000 + "\n\n" + "B" * 7_000

            await reply.finish(whole=[whole], footer=FOOTER)

            first, last = slack.replies(slack.channel_id, thread)
            assert (first.words, last.words) == ("A" * 7_000, "B" * 7_000)
            assert streamed or len(last.text) < 4_000  # the fallback beside the blocks
            assert (footers(first), footers(last)) == ([], FOOTER), streamed
            written = slack.calls_to("chat.postMessage", "chat.update", "chat.stopStream")
            assert [c.error for c in written if not c.ok] == []


async def test_a_stream_slack_closed_before_the_end_gets_it_by_the_update_that_ends_it():
    async with FakeSlack() as slack:
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)
        await reply.add_text("Part one. ")
        slack.expire_streams()  # as Slack does about five minutes in
        clock.now += 2

        await reply.finish(whole=["Part one. Part two."], footer=FOOTER)

        [message] = slack.replies(slack.channel_id, thread)
        assert message.text == "Part one. Part two."
        assert footers(message) == FOOTER
        assert slack.calls_to("chat.update")[-1].ok


async def test_a_reply_finished_without_one_shows_no_blocks():
    async with FakeSlack() as slack:
        slack.disable(*STREAM_METHODS)
        clock = Clock()
        thread = slack.post_user_message(slack.channel_id, "hi")
        reply = reply_in(slack, clock, thread)
        await reply.add_text("Sorry")

        await reply.finish(whole=["Sorry"], note="_(stopped)_")

        [message] = slack.replies(slack.channel_id, thread)
        assert (message.text, message.blocks) == ("Sorry\n\n_(stopped)_", ())
        assert "markdown_text" in slack.calls_to("chat.update")[-1].params
