"""Files in the fake Slack: what a ``file_share`` event carries, ``files.info``, and downloads.

A test stores a file with ``slack.add_file(name, content, mimetype=...)`` and
gets back the file object as a real event carries it (its keys are those of
the ``file_share`` payload in slackapi/bolt-python's
``tests/scenario_tests/test_message_file_share.py``), with ``url_private`` and
``url_private_download`` on the fake's own server. Slack's modes are there:
``hosted`` (the default), ``tombstone`` (deleted: only id and mode),
``hidden_by_limit`` (a free plan's file past its history limit) and
``external``; ``file_access="check_file_info"`` (Slack Connect) gives the short
object such events carry, whose whole is asked of ``files.info``.

A download needs ``Authorization: Bearer <bot token>``. Without it, or with
another token, Slack sends no error: it redirects to its sign-in page, an HTTP
200 ``text/html`` (slackapi/bolt-js#2585, slackapi/deno-slack-sdk#285), and so
does the fake; and so for a token of an app without ``files:read``
(``lacks_files_read``; vercel/eve#1531). ``downloads`` records every request,
refused ones included.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from aiohttp import web

__all__ = ["Download", "SlackFiles"]

Json: TypeAlias = dict[str, Any]
Mode: TypeAlias = Literal["hosted", "tombstone", "hidden_by_limit", "external", "snippet"]

SIGN_IN_PAGE = (
    '<!DOCTYPE html><html lang="en-US"><head><title>Slack</title></head>'
    "<body><h1>Sign in to your workspace</h1></body></html>"
)


@dataclass(frozen=True)
class Download:
    """One request for a file's bytes."""

    file_id: str
    authorized: bool
    """Whether it carried the bot token."""
    status: int
    at: float


@dataclass
class _Stored:
    wire: Json
    content: bytes
    mimetype: str


class SlackFiles:
    """The files of the fake workspace; `FakeSlack` routes their downloads here."""

    def __init__(self, token: Callable[[], str], team_id: str, user_id: str) -> None:
        self._token = token
        self._team_id = team_id
        self._user_id = user_id
        self._ids = itertools.count(1)
        self._files: dict[str, _Stored] = {}
        self._url: str | None = None
        self.downloads: list[Download] = []
        self.lacks_files_read = False
        """The app was installed without ``files:read``: the token opens no file (Slack
        then answers as it does a request without one)."""

    def route(self, app: web.Application) -> None:
        app.router.add_get("/files-pri/{key}/{name}", self._on_download)
        app.router.add_get("/files-pri/{key}/download/{name}", self._on_download)
        app.router.add_get("/signin", self._on_sign_in)

    def serving_at(self, url: str) -> None:
        self._url = url

    def add(
        self,
        name: str,
        content: bytes,
        *,
        mimetype: str,
        filetype: str | None = None,
        size: int | None = None,
        mode: Mode = "hosted",
        file_access: str | None = None,
        original: tuple[int, int] | None = None,
        user: str | None = None,
    ) -> Json:
        """Store a file; the object a ``file_share`` event carries for it.

        ``size`` overrides what Slack says the file weighs (the bytes stay ``content``).
        """
        if self._url is None:
            raise RuntimeError("FakeSlack is not running; use it as `async with`")
        file_id = f"F{next(self._ids):07d}"
        if mode == "tombstone":
            return {"id": file_id, "mode": "tombstone"}
        if mode == "hidden_by_limit":
            return {"id": file_id, "mode": "hidden_by_limit"}
        created = int(time.time())
        key = f"{self._team_id}-{file_id}"
        wire: Json = {
            "id": file_id,
            "created": created,
            "timestamp": created,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": filetype or name.rpartition(".")[2].lower(),
            "pretty_type": (filetype or name.rpartition(".")[2]).upper(),
            "user": user or self._user_id,
            "editable": mode == "snippet",
            "size": len(content) if size is None else size,
            "mode": mode,
            "is_external": mode == "external",
            "external_type": "gdrive" if mode == "external" else "",
            "is_public": True,
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "url_private": f"{self._url}/files-pri/{key}/{name}",
            "url_private_download": f"{self._url}/files-pri/{key}/download/{name}",
            "permalink": f"https://fake-team.slack.com/files/{self._user_id}/{file_id}/{name}",
            "has_rich_preview": False,
        }
        if original is not None:
            wire["original_w"], wire["original_h"] = original
        self._files[file_id] = _Stored(wire, content, mimetype)
        if file_access == "check_file_info":
            # what a Slack Connect event carries: the rest is asked of files.info
            short = {"id": file_id, "mode": "file_access", "file_access": file_access}
            return short | {"created": created, "timestamp": created, "user": wire["user"]}
        return dict(wire)

    def info(self, file_id: str) -> Json | None:
        """The whole file object, as ``files.info`` answers it (None: no such file)."""
        stored = self._files.get(file_id)
        return dict(stored.wire) if stored is not None else None

    async def _on_download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["key"].rpartition("-")[2]
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        authorized = scheme.lower() == "bearer" and credential == self._token()
        authorized = authorized and not self.lacks_files_read
        stored = self._files.get(file_id)
        if not authorized:
            # Slack's answer to a download without the token: off to its sign-in page
            self.downloads.append(Download(file_id, False, 302, time.monotonic()))
            raise web.HTTPFound(f"/signin?redir={request.path}")
        if stored is None:
            self.downloads.append(Download(file_id, True, 404, time.monotonic()))
            raise web.HTTPNotFound(text="file_not_found")
        self.downloads.append(Download(file_id, True, 200, time.monotonic()))
        return web.Response(body=stored.content, content_type=stored.mimetype)

    async def _on_sign_in(self, request: web.Request) -> web.Response:
        return web.Response(text=SIGN_IN_PAGE, content_type="text/html")
