"""What the Messages API refuses of image and document blocks, and of a request's size.

The limits are the documented ones: images are JPEG, PNG, GIF or WebP, at most
5 MB each (the API measures the base64 string), at most 8000 px a side (2000 px
once a request holds more than 20 images), at most 100 a request
(platform.claude.com/docs/en/build-with-claude/vision); PDFs are
``application/pdf``, at most 100 pages a request; a request is at most 32 MB
(.../pdf-support, .../api/errors: a 413 ``request_too_large``).

Messages: where the real API's text was seen (quoted in public bug reports) it
is used as seen: the media type list and "Image does not match the provided
media type" (anthropics/claude-code#8184, #13131), "image cannot be empty"
(#12750), "image exceeds 5 MB maximum" (#14887), the 2000 px rule
(anomalyco/opencode#12068). The others are marked as the likeliest wording.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from typing import Any

from tests.fakes.anthropic_rules import Refused

__all__ = [
    "IMAGE_MEDIA_TYPES",
    "MAX_IMAGE_BASE64",
    "MAX_REQUEST_BYTES",
    "check_file_block",
    "check_request_files",
    "check_request_size",
    "image_kind",
]

Json = dict[str, Any]

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_IMAGE_BASE64 = 5 * 1024 * 1024
"""Characters of base64 an image may take ("5242880 bytes" in the API's refusal)."""
MAX_IMAGE_SIDE = 8000
MAX_SIDE_MANY_IMAGES = 2000
MANY_IMAGES = 20
MAX_IMAGES = 100
MAX_PDF_PAGES = 100
MAX_REQUEST_BYTES = 32 * 1024 * 1024

_SOURCE_TYPES = ("base64", "file", "url")
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def image_kind(data: bytes) -> str | None:
    """The media type the bytes are, by their signature (None: no image the API takes)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_request_size(length: int | None) -> None:
    """A 413 for a body over 32 MB, as the API sends it before reading the request."""
    if length is not None and length > MAX_REQUEST_BYTES:
        # the errors page's words for request_too_large
        raise Refused(
            "Request exceeds the maximum allowed number of bytes.", 413, "request_too_large"
        )


def check_file_block(where: str, block: Json) -> None:
    """Refuse an ``image`` or ``document`` block the API would refuse."""
    kind = block["type"]
    source = block.get("source")
    source_type = source.get("type") if isinstance(source, dict) else None
    if source_type not in _SOURCE_TYPES and not (kind == "document" and source_type == "text"):
        # pydantic's wording for a bad tag, as the API's validation errors read
        raise Refused(
            f"{where}.{kind}.source: Input tag {source_type!r} found using 'type' does not "
            "match any of the expected tags: 'base64', 'file', 'url'"
        )
    assert isinstance(source, dict)
    if source_type != "base64":
        return  # a URL or a Files API id: nothing here to check
    if kind == "image":
        _check_image(f"{where}.image.source.base64", source)
    else:
        _check_pdf(f"{where}.document.source.base64", source)


def _decoded(where: str, data: Any, what: str) -> bytes:
    if not isinstance(data, str) or not data:
        raise Refused(f"{where}: {what} cannot be empty")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        # not seen quoted; the likeliest wording
        raise Refused(f"{where}.data: The {what} data is not valid base64.") from None


def _check_image(where: str, source: Json) -> None:
    media_type = source.get("media_type")
    if media_type not in IMAGE_MEDIA_TYPES:
        raise Refused(
            f"{where}.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' "
            "or 'image/webp'"
        )
    data = source.get("data")
    if isinstance(data, str) and len(data) > MAX_IMAGE_BASE64:
        raise Refused(
            f"{where}: image exceeds 5 MB maximum: {len(data)} bytes > {MAX_IMAGE_BASE64} bytes"
        )
    raw = _decoded(where, data, "image")
    if image_kind(raw) != media_type:
        raise Refused(f"{where}.data: Image does not match the provided media type {media_type}")
    size = image_size(raw)
    if size is not None and max(size) > MAX_IMAGE_SIDE:
        # the wording of the many-image rule, with this limit
        raise Refused(
            f"{where}.data: At least one of the image dimensions exceed max allowed size: "
            f"{MAX_IMAGE_SIDE} pixels"
        )


def _check_pdf(where: str, source: Json) -> None:
    if source.get("media_type") != "application/pdf":
        # pydantic's wording for a bad literal
        raise Refused(f"{where}.media_type: Input should be 'application/pdf'")
    raw = _decoded(where, source.get("data"), "PDF")
    if not raw.startswith(b"%PDF-"):
        # not seen quoted; the likeliest wording
        raise Refused(f"{where}.data: The PDF specified was not valid.")


def check_request_files(messages: list[Json]) -> None:
    """The limits of a whole request: images counted, their sides, PDF pages in all."""
    images: list[tuple[str, bytes]] = []
    pages = 0
    for index, message in enumerate(messages):
        content = message.get("content")
        for position, block in enumerate(content if isinstance(content, list) else []):
            source = block.get("source") if isinstance(block, dict) else None
            if not isinstance(source, dict) or source.get("type") != "base64":
                continue
            raw = base64.b64decode(source.get("data") or "")
            if block.get("type") == "image":
                images.append((f"messages.{index}.content.{position}", raw))
            elif block.get("type") == "document":
                pages += max(1, len(_PDF_PAGE.findall(raw)))
    if len(images) > MAX_IMAGES:
        # not seen quoted; the likeliest wording
        raise Refused(f"messages: at most {MAX_IMAGES} images may be sent in one request")
    if len(images) > MANY_IMAGES:
        for where, raw in images:
            size = image_size(raw)
            if size is not None and max(size) > MAX_SIDE_MANY_IMAGES:
                raise Refused(
                    f"{where}.image.source.base64.data: At least one of the image dimensions "
                    f"exceed max allowed size for many-image requests: {MAX_SIDE_MANY_IMAGES} "
                    "pixels"
                )
    if pages > MAX_PDF_PAGES:
        # not seen quoted; the likeliest wording
        raise Refused(f"A maximum of {MAX_PDF_PAGES} PDF pages may be provided.")


def image_size(raw: bytes) -> tuple[int, int] | None:
    """An image's width and height from its header (None where this cannot tell)."""
    kind = image_kind(raw)
    if kind == "image/png" and len(raw) >= 24:
        width, height = struct.unpack(">II", raw[16:24])
        return width, height
    if kind == "image/gif" and len(raw) >= 10:
        width, height = struct.unpack("<HH", raw[6:10])
        return width, height
    if kind == "image/jpeg":
        return _jpeg_size(raw)
    return None


def _jpeg_size(raw: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 < len(raw):
        if raw[at] != 0xFF:
            return None
        marker, length = raw[at + 1], struct.unpack(">H", raw[at + 2 : at + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            height, width = struct.unpack(">HH", raw[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None
