"""Files a person attached, as Messages API content blocks, within what one request may hold.

An image is an ``image`` block and a PDF a ``document`` block, both with a
base64 source (https://platform.claude.com/docs/en/build-with-claude/vision,
.../pdf-support); a text file is a ``text`` block naming the file; a file the
channel could not read is a ``text`` note saying why, so the model can tell the
person. The blocks come before the message's text, as the vision guide
advises ("Claude works best when images come before text").

Every request resends the whole conversation, files included, and the API
takes at most 32 MB a request and, past 20 images, only small ones. So the
newest messages' files are sent whole up to a budget (`MAX_REQUEST_FILE_CHARS`,
`MAX_REQUEST_IMAGES`); older ones are named in a note instead. The transcript
keeps every file: the budget only shapes what one request sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.core.messages import Attachment, Message, UserMessage

__all__ = [
    "MAX_REQUEST_FILE_CHARS",
    "MAX_REQUEST_IMAGES",
    "file_block",
    "file_size",
    "left_out_note",
    "messages_with_files_sent",
]

Json = dict[str, Any]

MAX_REQUEST_FILE_CHARS = 24 * 1024 * 1024
"""Base64 and text characters of files one request carries, leaving room under the API's
32 MB for the rest of the conversation."""
MAX_REQUEST_IMAGES = 20
"""Images one request carries: past 20 the API refuses any image over 2000 px a side."""

_IMAGE_CHARS = 1_600 * 4
"""About what an image costs, in characters of the size estimate: a 1092 px square
image is ~1,600 tokens, and larger ones are scaled down to about that."""
_PAGE_CHARS = 3_000 * 4
"""About what a PDF page costs (its text and its image of the page), in characters."""
_PAGE_BYTES = 60_000
"""A rough size of one page of a PDF, to guess its pages from its bytes."""


def file_block(file: Attachment) -> Json:
    """The content block one attached file is sent as."""
    if file.kind == "image":
        source = {"type": "base64", "media_type": file.media_type, "data": file.data}
        return {"type": "image", "source": source}
    if file.kind == "document":
        source = {"type": "base64", "media_type": file.media_type, "data": file.data}
        return {"type": "document", "source": source, "title": file.name}
    if file.kind == "text":
        if not file.text.strip():
            return {"type": "text", "text": f"(attached file {file.name} is empty)"}
        return {"type": "text", "text": f"Attached file {file.name}:\n\n{file.text}"}
    return {"type": "text", "text": file.note or f"(attached file {file.name} could not be read)"}


def left_out_note(file: Attachment) -> Json:
    """What stands for a file an earlier message sent, once the request has no room for it."""
    if file.kind == "unreadable":
        return file_block(file)
    return {
        "type": "text",
        "text": f"(attached file {file.name} was shared earlier in this conversation; it is "
        "left out here to keep the request within the API's limits)",
    }


def messages_with_files_sent(messages: Sequence[Message]) -> set[int]:
    """The indices of the messages whose files are sent whole: the newest, within the budget.

    Counting from the newest message back, each message's files are sent while
    they fit; from the first that does not, every older one's are left out, so
    what is sent changes only at one point as the conversation grows.
    """
    sent: set[int] = set()
    chars = images = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, UserMessage) or not message.files:
            continue
        chars += sum(len(f.data) + len(f.text) for f in message.files)
        images += sum(f.kind == "image" for f in message.files)
        if chars > MAX_REQUEST_FILE_CHARS or images > MAX_REQUEST_IMAGES:
            break
        sent.add(index)
    return sent


def file_size(file: Attachment) -> int:
    """A file's size as the window estimates it, in characters (about four to a token).

    Base64 is not what the model reads: an image costs about the same whatever its
    bytes, and a PDF about the same per page.
    """
    if file.kind == "image":
        return _IMAGE_CHARS
    if file.kind == "document":
        pages = min(100, max(1, len(file.data) * 3 // 4 // _PAGE_BYTES))
        return pages * _PAGE_CHARS
    return len(file.text) + len(file.note) + len(file.name) + 40
