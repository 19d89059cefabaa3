"""Files a person shares reach Claude: images and PDFs as blocks, text as text, within limits.

The bot is the real app (aiohttp, Bolt, slack_sdk) against the fake Slack, and
Claude is the real `AnthropicModel` against the fake Messages API, which
refuses what the real one refuses of image and document blocks. Each event is
the ``file_share`` message of slackapi/bolt-python's
``tests/scenario_tests/test_message_file_share.py`` (commit a2f21ae, kept in
``slack_payloads/message_file_share__event_payload.json``), its ids, text and
``files`` made this workspace's.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import struct
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent import Agent, AgentRuntime, AnthropicModel, AnthropicSettings, SQLiteStore
from bot.settings import Settings
from bot.slack.app import bolt_app
from bot.slack.channel import SlackChannel
from bot.slack.files import MAX_PDF_BYTES
from bot.slack.http import web_app
from bot.slack.run import slack_client
from tests.bot.slack_harness import SECRET, Bot
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply
from tests.fakes.local_server import serve_locally
from tests.fakes.slack_api import FakeSlack

PAYLOAD = Path(__file__).parent / "slack_payloads" / "message_file_share__event_payload.json"
PDF = (
    b"%PDF-1.4\n1 0 obj<</Type /Catalog /Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type /Pages /Kids [3 0 R] /Count 1>>endobj\n"
    b"3 0 obj<</Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)


def png(width: int = 3, height: int = 2) -> bytes:
    """A real PNG: red pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@asynccontextmanager
async def file_bot(tmp_path: Path, slack: FakeSlack, api: FakeAnthropic) -> AsyncIterator[Bot]:
    """The app, with Claude (the fake) answering; a second one on the same store resumes."""
    async with aiohttp.ClientSession() as http:
        store = await SQLiteStore.open(tmp_path / "bot.db")
        client = slack_client(
            Settings(slack_bot_token=slack.token, slack_api_url=slack.base_url, _env_file=None)
        )
        model = AnthropicModel(AnthropicSettings(api_key="test-key", base_url=api.base_url))
        runtime = AgentRuntime(store, [Agent(name="bot", model=model)])
        channel = SlackChannel(runtime, "bot", client, bot_user_id=slack.bot_user_id)
        await channel.resume_replies()  # as bot.serve does, before the runtime starts
        await runtime.start()
        runner, url = await serve_locally(web_app(bolt_app(channel, client, SECRET), SECRET))
        held = asyncio.Event()
        try:
            yield Bot(slack, url, http, None, runtime, held, held, channel, client)  # type: ignore[arg-type]
        finally:
            await runner.cleanup()
            await channel.drain(grace=1.0)
            channel.close()
            await runtime.close()
            await model.aclose()
            await store.close()


@pytest.fixture
async def api() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
async def bot(tmp_path: Path, slack: FakeSlack, api: FakeAnthropic) -> AsyncIterator[Bot]:
    async with file_bot(tmp_path, slack, api) as running:
        yield running


def file_share(slack: FakeSlack, text: str, files: list[dict[str, Any]]) -> tuple[dict, str]:
    """The recorded file_share envelope, as this workspace would send it; and its ts."""
    envelope = copy.deepcopy(json.loads(PAYLOAD.read_text())["payload"])
    ts = slack.post_user_message(slack.channel_id, text)
    envelope.update(team_id=slack.team_id, api_app_id=slack.app_id, event_id=f"Ev{ts}")
    envelope["event"].update(
        text=text,
        user=slack.user_id,
        channel=slack.channel_id,
        ts=ts,
        event_ts=ts,
        files=files,
    )
    envelope["event"].pop("blocks")  # the recorded rich text says "Hi there!"
    envelope["authorizations"][0].update(team_id=slack.team_id, user_id=slack.bot_user_id)
    return envelope, ts


async def shared(bot: Bot, *files: dict[str, Any], text: str = "<@U0BOT> what is in these?"):
    envelope, ts = file_share(bot.slack, text, list(files))
    assert await bot.deliver(envelope) == 200
    [reply] = await bot.written_replies(ts)
    return reply.text, ts


def first_user_content(api: FakeAnthropic) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = api.requests[0]["messages"][0]["content"]
    return content


async def test_an_image_and_a_pdf_reach_claude_as_blocks_with_their_bytes(bot, api):
    image = png()
    files = [
        bot.slack.add_file("chart.png", image, mimetype="image/png", original=(3, 2)),
        bot.slack.add_file("q3.pdf", PDF, mimetype="application/pdf"),
    ]

    said, _ = await shared(bot, *files)

    assert said == "ok"
    first, second, text = first_user_content(api)
    assert (first["type"], first["source"]["media_type"]) == ("image", "image/png")
    assert base64.b64decode(first["source"]["data"]) == image
    assert (second["type"], second["source"]["media_type"]) == ("document", "application/pdf")
    assert base64.b64decode(second["source"]["data"]) == PDF
    assert (text["type"], text["text"]) == ("text", "what is in these?")
    downloads = bot.slack.files.downloads
    assert [(d.authorized, d.status) for d in downloads] == [(True, 200), (True, 200)]


async def test_a_text_file_reaches_claude_as_text(bot, api):
    notes = bot.slack.add_file(
        "notes.md", "# Deploy\nship on *Friday* ✓".encode(), mimetype="text/plain"
    )

    await shared(bot, notes)

    [attached, _] = first_user_content(api)
    assert attached == {
        "type": "text",
        "text": "Attached file notes.md:\n\n# Deploy\nship on *Friday* ✓",
    }


async def test_an_oversize_file_is_refused_before_download_and_named_with_its_limit(bot, api):
    big = bot.slack.add_file("big.pdf", PDF, mimetype="application/pdf", size=MAX_PDF_BYTES + 1)
    small = bot.slack.add_file("chart.png", png(), mimetype="image/png")

    said, _ = await shared(bot, big, small)

    note = "(attached file big.pdf could not be read: it is 10 MB; PDFs are read up to 10 MB)"
    assert said.endswith(f"_{note}_")  # the person is told, whatever the model said
    first_block, image, _ = first_user_content(api)
    assert first_block == {"type": "text", "text": note}  # and so is the model
    assert image["type"] == "image"
    downloaded = {d.file_id for d in bot.slack.files.downloads}
    assert downloaded == {small["id"]}  # the big one was never asked for


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (
            lambda slack: slack.add_file(
                "report.xlsx",
                b"PK\x03\x04",
                mimetype="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            ),
            "files of type xlsx are not supported (images, PDFs and text files are)",
        ),
        (
            lambda slack: slack.add_file("gone.png", b"", mimetype="image/png", mode="tombstone"),
            "it was deleted",
        ),
        (
            lambda slack: slack.add_file("fake.png", b"no image at all", mimetype="image/png"),
            "it is not a JPEG, PNG, GIF or WebP image",
        ),
    ],
    ids=["unsupported-type", "deleted", "not-what-it-says"],
)
async def test_a_file_the_bot_cannot_read_is_named_in_the_reply(bot, api, setup, reason):
    said, _ = await shared(bot, setup(bot.slack))

    assert reason in said
    [note, _] = first_user_content(api)
    assert reason in note["text"]


async def test_an_image_too_large_for_claude_is_refused_by_its_header_too(bot, api):
    # a GIF 20000 px wide, whose event gave no dimensions: the API would refuse it,
    # and every later turn of the thread with it
    wide = b"GIF89a" + struct.pack("<HH", 20_000, 10) + bytes(20)
    gif = bot.slack.add_file("wide.gif", wide, mimetype="image/gif")

    said, _ = await shared(bot, gif)

    assert "wide.gif could not be read: it is 20000x10 pixels" in said
    assert said.startswith("ok")  # Claude answered: the request was one it takes


async def test_the_sign_in_page_of_an_app_without_files_read_is_no_file(bot, api):
    bot.slack.files.lacks_files_read = True  # Slack answers 200 with HTML, not an error
    image = bot.slack.add_file("chart.png", png(), mimetype="image/png")

    said, _ = await shared(bot, image)

    assert "chart.png could not be read: Slack sent its sign-in page" in said
    assert "files:read" in said
    [note, _] = first_user_content(api)
    assert note["type"] == "text"  # never the HTML passed off as an image
    assert bot.slack.files.downloads[0].authorized is False


async def test_a_slack_connect_file_is_looked_up_with_files_info(bot, api):
    short = bot.slack.add_file(
        "chart.png", png(), mimetype="image/png", file_access="check_file_info"
    )
    assert "url_private" not in short  # what such an event carries

    await shared(bot, short)

    assert [c.params["file"] for c in bot.slack.calls_to("files.info")] == [short["id"]]
    assert first_user_content(api)[0]["type"] == "image"


async def test_a_restart_replays_the_turn_without_downloading_again(tmp_path, slack, api):
    image = png()
    released = asyncio.Event()
    api.queue(Hang(Reply.text("half an answer"), after_events=3, release=released))
    async with file_bot(tmp_path, slack, api) as first:
        envelope, ts = file_share(slack, "<@U0BOT> what is this?", [])
        envelope["event"]["files"] = [slack.add_file("chart.png", image, mimetype="image/png")]
        assert await first.deliver(envelope) == 200
        # the model is at work on the turn when the bot stops
        await asyncio.wait_for(api.hung.wait(), timeout=5)
    released.set()
    assert len(slack.files.downloads) == 1

    async with file_bot(tmp_path, slack, api) as second:  # the same store: the turn resumes
        [reply] = await second.written_replies(ts)
        assert await second.deliver(envelope) == 200  # and Slack's retry of it replays it too
        await second.written_replies(ts)

    assert reply.text == "ok"
    assert len(slack.files.downloads) == 1  # read once, when the message came
    resumed = api.requests[-1]["messages"][0]["content"][0]
    assert base64.b64decode(resumed["source"]["data"]) == image
