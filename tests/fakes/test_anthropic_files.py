"""The fake Messages API refuses image and document blocks as the real one does."""

from __future__ import annotations

import base64
import struct
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic

from tests.fakes.anthropic_api import FakeAnthropic, _check_request
from tests.fakes.anthropic_files import MAX_IMAGE_BASE64
from tests.fakes.anthropic_rules import Refused

PNG_HEAD = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"


def png(width: int = 2, height: int = 2) -> str:
    return base64.b64encode(PNG_HEAD + struct.pack(">II", width, height) + bytes(8)).decode()


def image(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def pdf(data: bytes, media_type: str = "application/pdf") -> dict[str, Any]:
    source = {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()}
    return {"type": "document", "source": source}


def body(*blocks: dict[str, Any]) -> dict[str, Any]:
    content = [*blocks, {"type": "text", "text": "what is this?"}]
    return {
        "model": "claude-sonnet-5-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": content}],
    }


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            image(png(), "image/bmp"),
            "messages.0.content.0.image.source.base64.media_type: Input should be 'image/jpeg', "
            "'image/png', 'image/gif' or 'image/webp'",
        ),
        (
            image(png(), "image/jpeg"),
            "messages.0.content.0.image.source.base64.data: Image does not match the provided "
            "media type image/jpeg",
        ),
        (image(""), "messages.0.content.0.image.source.base64: image cannot be empty"),
        (image("not base64!"), "image.source.base64.data: The image data is not valid base64."),
        (
            image("A" * (MAX_IMAGE_BASE64 + 4)),
            f"image exceeds 5 MB maximum: {MAX_IMAGE_BASE64 + 4} bytes > 5242880 bytes",
        ),
        (image(png(9000, 10)), "At least one of the image dimensions exceed max allowed size"),
        (pdf(b"%PDF-1.4", "application/x-pdf"), "Input should be 'application/pdf'"),
        (pdf(b"PK\x03\x04 a zip"), "document.source.base64.data: The PDF specified was not valid."),
        (pdf(b"%PDF-1.4 " + b"<</Type /Page>> " * 101), "A maximum of 100 PDF pages"),
    ],
    ids=[
        "bmp",
        "media-mismatch",
        "empty",
        "bad-base64",
        "over-5mb",
        "over-8000px",
        "pdf-media",
        "not-a-pdf",
        "101-pages",
    ],
)
def test_a_bad_file_block_is_refused(block: dict[str, Any], message: str) -> None:
    with pytest.raises(Refused) as refused:
        _check_request(body(block))

    assert message in refused.value.message
    assert refused.value.status == 400


def test_more_than_twenty_images_must_each_be_small() -> None:
    small = [image(png(1000, 1000)) for _ in range(21)]
    _check_request(body(*small))

    with pytest.raises(Refused, match="many-image requests: 2000 pixels"):
        _check_request(body(*small[:20], image(png(2500, 10))))


def test_a_good_image_and_pdf_pass() -> None:
    _check_request(body(image(png()), pdf(b"%PDF-1.4 <</Type /Page>>")))


async def test_the_sdk_sees_the_real_error_shape() -> None:
    async with (
        FakeAnthropic() as api,
        AsyncAnthropic(base_url=api.base_url, api_key="test-key", max_retries=0) as client,
    ):
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(**body(image(png(), "image/jpeg")))

    assert raised.value.status_code == 400
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["type"] == "error"
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    assert "Image does not match the provided media type" in raised.value.body["error"]["message"]


async def test_a_request_over_32_mb_is_a_413() -> None:
    huge = "x" * (33 * 1024 * 1024)
    async with (
        FakeAnthropic() as api,
        AsyncAnthropic(base_url=api.base_url, api_key="test-key", max_retries=0) as client,
    ):
        with pytest.raises(anthropic.APIStatusError) as raised:
            await client.messages.create(**body({"type": "text", "text": huge}))

    assert raised.value.status_code == 413
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"]["type"] == "request_too_large"
