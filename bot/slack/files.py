"""Files a person attaches to a message for the bot: read from Slack, within limits, as it comes.

Where the reading happens, and why. Slack never sends an acknowledged event
again, so an event is acknowledged only once its turn is admitted (in the
store), and Slack wants that acknowledgement within 3 seconds. The files are
read *before* the admission, all at once and within `READ_WITHIN` seconds in
all, and the turn is admitted with their content in its input (and so in its
opening message):

* a crash while reading leaves the event unacknowledged, so Slack sends it
  again and the files are read again: nothing is lost and nothing half-read is
  kept;
* once admitted, the content is stored with the turn: a replay, a restart or a
  takeover by another process never reads the files again (Slack's copy may
  be gone by then), and the model sees the same bytes every time;
* the engine knows nothing of Slack: it is handed the files already read.

The price is that the acknowledgement waits for the reading. `READ_WITHIN`
keeps that well inside Slack's 3 seconds; a file Slack does not send in time is
named as unread, like any other, rather than delaying the answer. (Reading in
the turn's first step instead would need the engine to call back into Slack,
and to leave the opening message unwritten until then.)

What is read: images the model takes (JPEG, PNG, GIF, WebP), PDFs and text
files, each within its limit, at most `MAX_FILES` of a message and
`MAX_MESSAGE_BYTES` in all. What is not (too big, too many, a type the model
cannot read, a file Slack would not send) becomes an ``unreadable`` attachment
whose reason the model is told, and the reply ends with it
(`bot.slack.channel.endings.file_notes`), so the person always learns it. A
size over a limit is refused before any download, from the size the event
gives.

Downloads take the bot token (``Authorization: Bearer``, and the ``files:read``
scope). Without it Slack answers HTTP 200 with its sign-in page, not an error
(slackapi/bolt-js#2585): HTML where a file was expected is taken as that. The
token is only ever sent to Slack's own file hosts (or the Web API's own host,
when ``SLACK_API_URL`` points elsewhere, as in tests).
"""

from __future__ import annotations

import asyncio
import base64
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent import Attachment

__all__ = [
    "IMAGE_TYPES",
    "MAX_FILES",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_SIDE",
    "MAX_MESSAGE_BYTES",
    "MAX_PDF_BYTES",
    "MAX_PDF_PAGES",
    "MAX_TEXT_BYTES",
    "READ_WITHIN",
    "read_files",
]

Json = dict[str, Any]

MAX_FILES: Final = 5
"""Files read of one message; the rest are named as not read."""
MAX_IMAGE_BYTES: Final = 3_932_160
"""An image's bytes: the Messages API takes 5 MB of base64 an image, which is 3.75 MB."""
MAX_IMAGE_SIDE: Final = 8000
"""Pixels a side the Messages API takes of an image."""
MAX_PDF_BYTES: Final = 10 * 1024 * 1024
MAX_PDF_PAGES: Final = 100
"""Pages the Messages API takes in a request (all PDFs together)."""
MAX_TEXT_BYTES: Final = 200 * 1024
MAX_MESSAGE_BYTES: Final = 20 * 1024 * 1024
"""The files of one message together: the Messages API takes 32 MB a request, base64
grows bytes by a third, and the conversation around them needs room too."""
READ_WITHIN: Final = 2.0
"""Seconds all the files of one message may take to read, before Slack's 3 s ack."""

IMAGE_TYPES: Final = ("image/jpeg", "image/png", "image/gif", "image/webp")
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/yaml",
        "application/x-yaml",
        "application/x-sh",
        "application/sql",
        "application/toml",
    }
)
_TEXT_FILETYPES = frozenset(
    {"text", "csv", "tsv", "markdown", "python", "javascript", "json", "yaml", "xml", "shell"}
)
_KIND_WORDS = {"image": "images", "document": "PDFs", "text": "text files"}
_LIMITS = {"image": MAX_IMAGE_BYTES, "document": MAX_PDF_BYTES, "text": MAX_TEXT_BYTES}
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")
_SLACK_FILE_HOSTS = (".slack.com", ".slack-gov.com", ".slack-edge.com")


class _Unreadable(Exception):
    """Why one file cannot be read; said to the model and the person."""


@dataclass(frozen=True, slots=True)
class _Planned:
    """A file to download: what it is taken for, from where, up to how many bytes."""

    name: str
    kind: Literal["image", "document", "text"]
    media_type: str
    url: str
    limit: int


async def read_files(
    client: AsyncWebClient, files: Sequence[Json], *, within: float = READ_WITHIN
) -> tuple[Attachment, ...]:
    """The files of a ``file_share`` message, read (or named as unread), in their order.

    Never raises for a file: each one that cannot be read is an ``unreadable``
    attachment saying why. Takes at most ``within`` seconds in all.
    """
    deadline = asyncio.get_running_loop().time() + within
    over = _over_message_budget(files)
    async with aiohttp.ClientSession() as http:
        reads = [
            _read_one(client, http, file, index in over, deadline, index=index)
            for index, file in enumerate(files)
        ]
        read = await asyncio.gather(*reads)
    return _within_message_budget(read)


async def _read_one(
    client: AsyncWebClient,
    http: aiohttp.ClientSession,
    file: Json,
    over_budget: bool,
    deadline: float,
    *,
    index: int,
) -> Attachment:
    name = _name_of(file)
    try:
        if index >= MAX_FILES:
            raise _Unreadable(f"only the first {MAX_FILES} files of a message are read")
        if over_budget:
            raise _Unreadable(_OVER_BUDGET)
        async with asyncio.timeout_at(deadline):
            if file.get("file_access") == "check_file_info":
                file = await _file_info(client, file)  # the event carries only the file's id
                name = _name_of(file)
            planned = _plan(file, name, trusted=_trusted_hosts(client))
            raw = await _download(http, planned, client)
        return _attachment(planned, raw)
    except _Unreadable as why:
        return Attachment(kind="unreadable", name=name, reason=str(why))
    except TimeoutError:
        reason = f"Slack did not send it within {READ_WITHIN:g} seconds"
        return Attachment(kind="unreadable", name=name, reason=reason)
    except aiohttp.ClientError as exc:
        return Attachment(
            kind="unreadable", name=name, reason=f"Slack could not be reached ({exc})"
        )


def _name_of(file: Json) -> str:
    for key in ("name", "title", "id"):
        if isinstance(file.get(key), str) and file[key]:
            return str(file[key])
    return "a file"


async def _file_info(client: AsyncWebClient, file: Json) -> Json:
    """The whole file object, for an event that says to ask (``file_access``, Slack Connect)."""
    try:
        answer = await client.files_info(file=str(file.get("id") or ""))
    except SlackApiError as exc:
        raise _Unreadable(f"Slack would not show it ({exc.response.get('error')})") from None
    found = answer.get("file")
    if not isinstance(found, dict):
        raise _Unreadable("Slack would not show it")
    return found


def _plan(file: Json, name: str, *, trusted: frozenset[str]) -> _Planned:
    """What the file is taken for, checked against its limit before anything is downloaded."""
    mode = file.get("mode")
    if mode == "tombstone":
        raise _Unreadable("it was deleted")
    if mode == "hidden_by_limit":
        raise _Unreadable("the workspace's plan hides it (older than its file history limit)")
    if mode == "external" or file.get("is_external"):
        where = file.get("external_type") or "another service"
        raise _Unreadable(f"it is stored outside Slack ({where}), where the bot cannot read it")
    kind, media_type = _kind_of(file)
    limit = _LIMITS[kind]
    size = file.get("size")
    if isinstance(size, int) and size > limit:
        raise _Unreadable(
            f"it is {_amount(size)}; {_KIND_WORDS[kind]} are read up to {_amount(limit)}"
        )
    sides = [file.get("original_w"), file.get("original_h")]
    if kind == "image" and any(isinstance(s, int) and s > MAX_IMAGE_SIDE for s in sides):
        raise _Unreadable(
            f"it is {sides[0]}x{sides[1]} pixels; images are read up to "
            f"{MAX_IMAGE_SIDE} pixels a side"
        )
    url = file.get("url_private_download") or file.get("url_private")
    if not isinstance(url, str) or not url:
        raise _Unreadable("Slack gave no address to download it from")
    if not _is_trusted(url, trusted):
        raise _Unreadable("Slack gave an address outside Slack to download it from")
    return _Planned(name, kind, media_type, url, limit)


def _kind_of(file: Json) -> tuple[Literal["image", "document", "text"], str]:
    mimetype = str(file.get("mimetype") or "").split(";")[0].strip().lower()
    filetype = str(file.get("filetype") or "").lower()
    if mimetype in IMAGE_TYPES:
        return "image", mimetype
    if mimetype == "application/pdf" or filetype == "pdf":
        return "document", "application/pdf"
    if mimetype.startswith("text/") or mimetype in _TEXT_TYPES or filetype in _TEXT_FILETYPES:
        return "text", mimetype or "text/plain"
    shown = filetype or mimetype or "unknown"
    raise _Unreadable(f"files of type {shown} are not supported (images, PDFs and text files are)")


def _trusted_hosts(client: AsyncWebClient) -> frozenset[str]:
    """Where the token may be sent: Slack's file hosts, and the Web API's own host."""
    api_host = urlsplit(client.base_url).hostname or ""
    return frozenset({api_host} - {"slack.com", ""})


def _is_trusted(url: str, trusted: frozenset[str]) -> bool:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https" and (host == "slack.com" or host.endswith(_SLACK_FILE_HOSTS)):
        return True
    return host in trusted


async def _download(
    http: aiohttp.ClientSession, planned: _Planned, client: AsyncWebClient
) -> bytes:
    headers = {"Authorization": f"Bearer {client.token or ''}"}
    # through the Web API client's own proxy and TLS settings, when it has them
    options: dict[str, Any] = {"proxy": client.proxy} if client.proxy else {}
    if client.ssl is not None:
        options["ssl"] = client.ssl
    async with http.get(planned.url, headers=headers, **options) as response:
        if response.status != 200:
            raise _Unreadable(f"Slack answered HTTP {response.status} when asked for it")
        if _is_sign_in_page(response.content_type, planned):
            raise _Unreadable(_SIGN_IN)
        data = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            data += chunk
            if len(data) > planned.limit:
                words = _KIND_WORDS[planned.kind]
                raise _Unreadable(f"it is over the {_amount(planned.limit)} {words} are read up to")
    if planned.media_type != "text/html" and data[:512].lstrip().lower().startswith(_HTML):
        raise _Unreadable(_SIGN_IN)  # a page without its content type, as some proxies send
    return bytes(data)


_SIGN_IN = (
    "Slack sent its sign-in page instead of the file (the app may lack the files:read "
    "scope, or need reinstalling since it was added)"
)
_HTML = (b"<!doctype html", b"<html")


def _is_sign_in_page(content_type: str, planned: _Planned) -> bool:
    # an HTML file is HTML: only a page where another type was expected is Slack's
    return content_type == "text/html" and planned.media_type != "text/html"


def _attachment(planned: _Planned, raw: bytes) -> Attachment:
    """The downloaded bytes, checked to be what they were taken for."""
    if planned.kind == "text":
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise _Unreadable("it is not UTF-8 text") from None
        return Attachment(kind="text", name=planned.name, media_type=planned.media_type, text=text)
    if planned.kind == "image":
        media_type = _image_type(raw)
        if media_type is None:
            raise _Unreadable("it is not a JPEG, PNG, GIF or WebP image")
        _check_sides(raw, media_type)
    else:
        media_type = "application/pdf"
        _check_pdf(raw)
    data = base64.b64encode(raw).decode("ascii")
    return Attachment(kind=planned.kind, name=planned.name, media_type=media_type, data=data)


def _image_type(raw: bytes) -> str | None:
    """The image's real type, by its signature (a file's extension may say otherwise)."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def _check_sides(raw: bytes, media_type: str) -> None:
    """Refuse an image over `MAX_IMAGE_SIDE` where its header tells (PNG, GIF).

    The event may not give its size, and the API would refuse it in every later
    request of the thread.
    """
    if media_type == "image/png" and len(raw) >= 24:
        width, height = struct.unpack(">II", raw[16:24])
    elif media_type == "image/gif" and len(raw) >= 10:
        width, height = struct.unpack("<HH", raw[6:10])
    else:
        return
    if max(width, height) > MAX_IMAGE_SIDE:
        raise _Unreadable(
            f"it is {width}x{height} pixels; images are read up to {MAX_IMAGE_SIDE} pixels a side"
        )


def _check_pdf(raw: bytes) -> None:
    if not raw.startswith(b"%PDF-"):
        raise _Unreadable("it is not a PDF")
    if b"/Encrypt" in raw:
        raise _Unreadable("it is password-protected, and the model reads only open PDFs")
    # pages counted where the file lists them plainly (a compressed list may hide some)
    pages = len(_PDF_PAGE.findall(raw))
    if pages > MAX_PDF_PAGES:
        raise _Unreadable(f"it has {pages} pages; PDFs are read up to {MAX_PDF_PAGES} pages")


_OVER_BUDGET = f"the files of one message are read up to {MAX_MESSAGE_BYTES // 2**20} MB together"


def _over_message_budget(files: Sequence[Json]) -> set[int]:
    """The files past `MAX_MESSAGE_BYTES` of the message, by the sizes the event gives."""
    over: set[int] = set()
    total = 0
    for index, file in enumerate(files[:MAX_FILES]):
        size = file.get("size")
        try:
            limit = _LIMITS[_kind_of(file)[0]]
        except _Unreadable:
            continue  # refused on its own
        if not isinstance(size, int) or size > limit:
            continue  # no size to go by, or refused on its own
        if total + size > MAX_MESSAGE_BYTES:
            over.add(index)
        else:
            total += size
    return over


def _within_message_budget(read: Sequence[Attachment]) -> tuple[Attachment, ...]:
    """The files as read, less those past `MAX_MESSAGE_BYTES` together (sizes no event gave)."""
    kept: list[Attachment] = []
    total = 0
    for file in read:
        size = len(file.data) * 3 // 4 + len(file.text.encode())
        if file.kind != "unreadable" and total + size > MAX_MESSAGE_BYTES:
            file = Attachment(kind="unreadable", name=file.name, reason=_OVER_BUDGET)
        total += size if file.kind != "unreadable" else 0
        kept.append(file)
    return tuple(kept)


def _amount(size: int) -> str:
    """A size for a person: ``200 KB``, ``3.75 MB``."""
    if size < 1024 * 1024:
        return f"{size / 1024:.4g} KB"
    return f"{size / (1024 * 1024):.3g} MB"
