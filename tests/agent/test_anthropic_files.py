"""Attached files on the wire: content blocks before the text, within one request's room."""

from __future__ import annotations

import base64

from agent import Attachment, Message, TurnInput, UserMessage
from agent.core.messages import MESSAGE_ADAPTER
from agent.core.turns import TURN_RECORD_ADAPTER, TurnRecord
from agent.models.anthropic.files import MAX_REQUEST_IMAGES
from agent.models.anthropic.wire import api_messages, message_size
from tests.fakes.anthropic_api import _check_request

from .wire_checks import assert_valid_api_messages

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(16)).decode()
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj<</Type/Page>>endobj\n%%EOF").decode()

IMAGE = Attachment(kind="image", name="chart.png", media_type="image/png", data=PNG)
DOCUMENT = Attachment(kind="document", name="q3.pdf", media_type="application/pdf", data=PDF)
TEXT = Attachment(kind="text", name="notes.txt", media_type="text/plain", text="ship friday")
UNREAD = Attachment(kind="unreadable", name="report.xlsx", reason="xlsx is not supported")


def opening(*files: Attachment, text: str = "what is in these?", turn: str = "t1") -> UserMessage:
    return UserMessage(turn_id=turn, text=text, user="U1", files=files)


def test_files_go_before_the_text_each_as_its_block():
    [message] = api_messages([opening(IMAGE, DOCUMENT, TEXT, UNREAD)])

    assert message["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "q3.pdf",
        },
        {"type": "text", "text": "Attached file notes.txt:\n\nship friday"},
        {
            "type": "text",
            "text": "(attached file report.xlsx could not be read: xlsx is not supported)",
        },
        {"type": "text", "text": "what is in these?"},
    ]
    assert_valid_api_messages([message])


def test_a_message_of_files_alone_sends_no_empty_text():
    [message] = api_messages([opening(IMAGE, text="")])

    assert [b["type"] for b in message["content"]] == ["image"]


def test_an_empty_text_file_is_said_to_be_empty_not_sent_blank():
    empty = Attachment(kind="text", name="blank.txt", media_type="text/plain", text="  \n")

    [message] = api_messages([opening(empty)])

    assert message["content"][0] == {"type": "text", "text": "(attached file blank.txt is empty)"}


def test_the_fake_api_takes_what_the_mapping_sends():
    body = {
        "model": "claude-sonnet-5-5",
        "max_tokens": 100,
        "messages": api_messages([opening(IMAGE, DOCUMENT, TEXT, UNREAD)]),
    }

    _check_request(body)  # refuses nothing


def test_older_images_past_the_request_limit_are_named_not_sent():
    thread: list[Message] = [
        opening(IMAGE, text=f"picture {i}", turn=f"t{i}") for i in range(MAX_REQUEST_IMAGES + 1)
    ]

    sent = api_messages(thread)  # one user message: the runs merge

    blocks = sent[0]["content"]
    images = [b for b in blocks if b["type"] == "image"]
    assert len(images) == MAX_REQUEST_IMAGES
    assert blocks[0]["type"] == "text"  # the oldest picture's place
    assert "chart.png was shared earlier" in blocks[0]["text"]
    assert blocks[-2]["type"] == "image"  # the newest is whole


def test_an_image_counts_as_its_tokens_not_its_base64():
    big = Attachment(kind="image", name="big.png", media_type="image/png", data="A" * 4_000_000)

    assert message_size(opening(big)) < 10_000
    assert message_size(opening(TEXT)) > len("ship friday")


def test_a_transcript_stored_before_files_reads_as_having_none():
    old = MESSAGE_ADAPTER.validate_json('{"role": "user", "turn_id": "t1", "text": "hi"}')
    record = TURN_RECORD_ADAPTER.validate_json(
        '{"turn_id": "t1", "seq": 1, "status": "queued", "input": {"text": "hi"}}'
    )

    assert isinstance(old, UserMessage)
    assert old.files == ()
    assert record.input.files == ()


def test_files_survive_the_store_round_trip():
    message = opening(IMAGE, UNREAD)
    record = TurnRecord(
        turn_id="t1", seq=1, status="queued", input=TurnInput(text="hi", files=(IMAGE, UNREAD))
    )

    assert MESSAGE_ADAPTER.validate_json(MESSAGE_ADAPTER.dump_json(message)) == message
    assert TURN_RECORD_ADAPTER.validate_json(TURN_RECORD_ADAPTER.dump_json(record)) == record
