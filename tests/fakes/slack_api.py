"""A fake of Slack's Web API, served over real HTTP to the real slack_sdk client.

Point the real client at it::

    async with FakeSlack() as slack:
        client = AsyncWebClient(token=slack.token, base_url=slack.base_url)
        root = slack.post_user_message(slack.channel_id, "<@U0BOT> hi")
        await client.chat_postMessage(channel=slack.channel_id, thread_ts=root, text="hello")
        assert [m.text for m in slack.replies(slack.channel_id, root)] == ["hello"]

``base_url`` already ends in ``/api/``, as slack_sdk's own ``BASE_URL`` does, so it
can be passed as is (or set as ``SLACK_API_URL``).

It speaks the Web API's conventions: ``/api/<method>`` by GET or POST, arguments
in the query string (where slack_sdk puts ``params=`` even on a POST: auth.test,
chat.delete), a form or a JSON body (chat.postMessage, chat.update, the stream
methods), ``Authorization: Bearer`` checked against one bot token, and every
answer an HTTP 200 ``{"ok": true, ...}`` or ``{"ok": false, "error": "<code>"}``,
except a scripted rate limit, which is an HTTP 429 with ``Retry-After`` as Slack
sends it. It keeps messages per channel and refuses what Slack refuses where
that matters to a bot: an unknown channel, a message that is not there or not
the bot's, text or Block Kit over Slack's limits, a stream that is no longer
streaming, a stream fed ``markdown_text`` after ``chunks`` or the other way round
(``streaming_mode_mismatch``), an update of a message still streaming
(``streaming_state_conflict``), ``markdown_text`` beside ``text`` or ``blocks``.
A method it does not implement answers ``unknown_method``, as Slack answers a
method that does not exist: a call the fake cannot answer faithfully fails
loudly rather than passing.

Streams (``chat.startStream`` / ``appendStream`` / ``stopStream``) build one
message whose ``text`` is everything streamed. Slack ends a stream about five
minutes after it started, appends or not (undocumented; python-slack-sdk #1859);
here the fake's clock decides: ``advance(seconds)`` moves it, ``stream_lifetime``
sets the limit, ``expire_streams()`` ends every open stream now. After that,
appends and stops answer ``message_not_in_streaming_state``.

Socket Mode: ``apps.connections.open``, with the app-level token, opens a
websocket on the same server (``socket_mode``, see ``slack_socket.py``) down
which a test pushes envelopes as Slack would.

What is not modelled: scopes, rate limits that are not scripted, channel names
in place of ids, message formatting (``blocks`` are what was sent; Slack would
add ``rich_text`` blocks for plain text), the tombstone a deleted thread parent
leaves, status timeouts, edit windows, reactions, events. Files: see ``slack_files.py``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from aiohttp import web

from tests.fakes.local_server import serve_locally
from tests.fakes.slack_agent_surface import SESSION_STATUSES, AgentSurface
from tests.fakes.slack_blocks import (
    MAX_BLOCKS,
    MAX_VIEW_BLOCKS,
    Refusal,
    check_markdown,
    checked_blocks,
    checked_chunks,
)
from tests.fakes.slack_files import SlackFiles
from tests.fakes.slack_oauth import OAuthApp
from tests.fakes.slack_socket import SocketMode

__all__ = [
    "STREAM_METHODS",
    "Call",
    "Ephemeral",
    "FakeSlack",
    "Message",
    "StatusUpdate",
]

Json: TypeAlias = dict[str, Any]
StreamState: TypeAlias = Literal["streaming", "stopped", "expired"]

STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")

MAX_TEXT_CHARS = 4_000
"""Longer ``text`` answers ``msg_too_long``. Slack's docs still say it truncates at
40,000, but a Slack maintainer wrote in 2024 that the platform now refuses ~4K
(seratch/ChatGPT-in-Slack#102), and chat.update users report the same."""
STREAM_LIFETIME = 300.0
"""Seconds from chat.startStream until Slack stops accepting appends (observed, ~5 min)."""
EPOCH = 1_700_000_000
"""Where the fake's clock starts: ts values look like ``"1700000000.000100"``."""


# --- what tests read back ------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """A message as it stands now: updates and streamed chunks already applied."""

    channel: str
    ts: str
    text: str
    user: str
    """Who posted it: the bot's user id for the bot's own messages."""
    bot_id: str | None = None
    thread_ts: str | None = None
    """The thread's parent ts for a reply; None for a top-level message."""
    blocks: tuple[Json, ...] = ()
    chunks: tuple[Json, ...] = ()
    """Every stream chunk received, in order (markdown_text, task_update, ...)."""
    stream: StreamState | None = None
    """None for an ordinary message."""
    edited_ts: str | None = None
    metadata: Json | None = None

    @property
    def is_from_bot(self) -> bool:
        return self.bot_id is not None

    @property
    def words(self) -> str:
        """What it shows as text: its ``markdown`` blocks' where it has any (``text`` is
        then the fallback notifications show, which Slack holds to about 4,000 characters)."""
        said = [b["text"] for b in self.blocks if b.get("type") == "markdown"]
        return "".join(said) if said else self.text

    @property
    def tasks(self) -> dict[str, Json]:
        """Task cards by id, merged as Slack merges updates: details append, the rest replace."""
        tasks: dict[str, Json] = {}
        for chunk in self.chunks:
            if chunk.get("type") != "task_update":
                continue
            card = tasks.setdefault(chunk["id"], {})
            details = card.get("details", "") + chunk.get("details", "")
            card.update({k: v for k, v in chunk.items() if k not in ("type", "details")})
            if details:
                card["details"] = details
        return tasks


@dataclass(frozen=True)
class Ephemeral:
    """A message only ``user`` sees; Slack keeps no history of it."""

    channel: str
    user: str
    ts: str
    text: str
    blocks: tuple[Json, ...] = ()
    thread_ts: str | None = None


@dataclass(frozen=True)
class StatusUpdate:
    """One assistant.threads.setStatus call; an empty ``status`` clears it."""

    channel_id: str
    thread_ts: str
    status: str
    loading_messages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Call:
    """One request, refused ones included. The token never appears here."""

    method: str
    params: Json
    """Query and body merged; JSON strings sent in a form (blocks, chunks) left as sent."""
    headers: dict[str, str]
    """Lower-cased names; ``authorization`` reads ``Bearer (redacted)``."""
    http_method: str
    status: int
    response: Json
    at: float
    """``time.monotonic()`` when the request arrived."""

    @property
    def ok(self) -> bool:
        return self.response.get("ok") is True

    @property
    def error(self) -> str | None:
        error = self.response.get("error")
        return error if isinstance(error, str) else None


# --- refusals ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fault:
    error: str
    status: int
    retry_after: int | None
    drop: Literal["before", "after"] | None = None
    """Close the connection without an answer, before or after applying the call."""
    then: Callable[[], None] | None = None
    """Run once the call is applied (or refused), before anything is answered."""
    when: Callable[[_Params], bool] | None = None
    """Only a call these parameters satisfy meets the fault; others pass it by."""


class _Refused(Refusal):
    """A refusal of a call that a kill or a dropped connection was set on."""

    def __init__(self, refusal: Refusal, fault: _Fault) -> None:
        super().__init__(
            refusal.error,
            messages=refusal.messages,
            status=refusal.status,
            headers=refusal.headers,
        )
        self.fault = fault


def _missing(name: str) -> Refusal:
    return Refusal("invalid_arguments", messages=[f"missing required field: {name}"])


# --- parameters ----------------------------------------------------------------------


class _Params:
    """A call's arguments, read as Slack reads them from a form or from JSON."""

    def __init__(self, values: Json) -> None:
        self.values = values

    def text(self, name: str) -> str | None:
        value = self.values.get(name)
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bool | int | float):
            return str(value).lower()
        raise Refusal("invalid_arguments", messages=[f"{name} must be a string"])

    def required(self, name: str) -> str:
        value = self.text(name)
        if not value:
            raise _missing(name)
        return value

    def flag(self, name: str) -> bool:
        return self.text(name) in ("1", "true")

    def number(self, name: str, default: int) -> int:
        value = self.text(name)
        if not value:
            return default
        try:
            return int(value)
        except ValueError:
            raise Refusal("invalid_arguments", messages=[f"{name} must be a number"]) from None

    def structured(self, name: str, error: str) -> Any:
        """A list or object: as JSON sends it, or as a form sends it, a JSON string."""
        value = self.values.get(name)
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise Refusal(error) from None


# --- Block Kit and chunks ------------------------------------------------------------


# --- the workspace -------------------------------------------------------------------


@dataclass
class _Channel:
    id: str
    name: str
    members: set[str]
    is_private: bool = False
    is_im: bool = False
    messages: dict[str, Message] = field(default_factory=dict)
    team: str | None = None
    """The workspace it belongs to; None: the first one's."""

    def ordered(self) -> list[Message]:
        return sorted(self.messages.values(), key=lambda m: _micros(m.ts))

    def thread(self, thread_ts: str) -> list[Message]:
        return [m for m in self.ordered() if thread_ts in (m.ts, m.thread_ts)]


@dataclass(frozen=True)
class Workspace:
    """A workspace the app is installed in: its bot token, and its bot there."""

    team_id: str
    token: str
    bot_user_id: str
    bot_id: str
    name: str = ""


@dataclass(frozen=True)
class _User:
    id: str
    name: str
    real_name: str
    is_bot: bool = False
    is_admin: bool = False


def _micros(ts: str) -> int:
    seconds, _, fraction = ts.partition(".")
    return int(seconds) * 1_000_000 + int((fraction + "000000")[:6])


def _ts(micros: int) -> str:
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def _is_ts(value: str) -> bool:
    try:
        _micros(value)
    except ValueError:
        return False
    return True


# --- the server ----------------------------------------------------------------------


class FakeSlack:
    """Slack's Web API on 127.0.0.1, for as long as the ``async with`` lasts.

    It starts with one workspace: the bot (``bot_user_id``, ``bot_id``), one human
    (``user_id``) and one public channel (``channel_id``) both are in. Add more
    with ``add_user`` / ``add_channel``; seed what humans say with
    ``post_user_message``. ``calls`` holds every request in order.
    """

    def __init__(
        self,
        *,
        token: str = "xoxb-fake-token",
        app_token: str = "xapp-fake-app-token",
        team_id: str = "T0TEAM",
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
        app_id: str = "A0APP",
        max_text_chars: int = MAX_TEXT_CHARS,
    ) -> None:
        self.token = token
        self.app_token = app_token
        """The app-level token ``apps.connections.open`` takes (Socket Mode)."""
        self.socket_mode = SocketMode(app_id)
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = app_id
        self.max_text_chars = max_text_chars
        self.user_id = "U0ALICE"
        self.files = SlackFiles(lambda: self.token, team_id, self.user_id)
        """The workspace's files (``add_file``) and the downloads asked of them."""
        self.channel_id = "C0GENERAL"
        self.stream_lifetime = STREAM_LIFETIME
        """Seconds a stream accepts appends; set it to 0 to make the next append fail."""
        self.calls: list[Call] = []
        self.statuses: list[StatusUpdate] = []
        self.ephemerals: list[Ephemeral] = []
        self._users: dict[str, _User] = {}
        self._channels: dict[str, _Channel] = {}
        self._workspaces: dict[str, Workspace] = {}
        """The workspaces besides the first, by team id (`add_workspace`)."""
        self._caller: Workspace | None = None
        """The other workspace whose token makes the call being answered, if one's does."""
        self._stream_started: dict[tuple[str, str], int] = {}
        self._stream_mode: dict[tuple[str, str], str | None] = {}
        self._faults: dict[str, collections.deque[_Fault | None]] = collections.defaultdict(
            collections.deque
        )
        self._disabled: set[str] = set()
        self._delays: dict[str, collections.deque[float]] = collections.defaultdict(
            collections.deque
        )
        self._holds: dict[str, collections.deque[asyncio.Event]] = collections.defaultdict(
            collections.deque
        )
        self.home_views: dict[str, Json] = {}
        self.command_responses: dict[str, list[Json]] = {}
        """What was posted to each slash command's ``response_url``, by its hook."""
        """The Home tab each user was last shown (views.publish), by user id."""
        self._now = EPOCH * 1_000_000
        self._last_ts = self._now
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self._handlers: dict[str, Callable[[_Params], Json]] = {
            "auth.test": self._auth_test,
            "users.info": self._users_info,
            "conversations.info": self._conversations_info,
            "conversations.list": self._conversations_list,
            "conversations.history": self._conversations_history,
            "conversations.replies": self._conversations_replies,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.delete": self._delete,
            "chat.postEphemeral": self._post_ephemeral,
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
            "assistant.threads.setStatus": self._set_status,
            "apps.connections.open": self._open_connection,
            "views.publish": self._publish_view,
            "files.info": self._files_info,
        }
        self.oauth = OAuthApp(self)
        """The app's OAuth credentials, and the approvals it was given (`slack_oauth`)."""
        self._handlers.update(self.oauth.methods())
        self.agent_surface = AgentSurface(self)
        """Suggested prompts, thread titles and agent sessions (`slack_agent_surface`)."""
        self._handlers.update(self.agent_surface.methods())
        self.add_user(bot_user_id, name="bot", is_bot=True)
        self.add_user(self.user_id, name="alice", real_name="Alice Example")
        self.add_channel(self.channel_id, name="general", members=[self.user_id])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/api/``: slack_sdk's ``base_url``."""
        if self._url is None:
            raise RuntimeError("FakeSlack is not running; use it as `async with`")
        return f"{self._url}/api/"

    # --- the workspace

    def add_user(
        self,
        user_id: str,
        *,
        name: str | None = None,
        real_name: str = "",
        is_bot: bool = False,
        is_admin: bool = False,
    ) -> None:
        """A member of the workspace; ``is_admin`` makes them a workspace admin."""
        self._users[user_id] = _User(user_id, name or user_id.lower(), real_name, is_bot, is_admin)

    def add_channel(
        self,
        channel_id: str,
        *,
        name: str | None = None,
        members: Iterable[str] = (),
        is_private: bool = False,
        is_im: bool = False,
        bot_is_member: bool = True,
        team: str | None = None,
    ) -> None:
        """A conversation; the bot is in it unless told otherwise, and members must be users.

        ``team`` puts it in another workspace (`add_workspace`): only that workspace's
        token sees it, as Slack answers ``channel_not_found`` to any other.
        """
        bot = self._workspaces[team].bot_user_id if team else self.bot_user_id
        member_ids = set(members) | ({bot} if bot_is_member else set())
        unknown = member_ids - self._users.keys()
        if unknown:
            raise ValueError(f"add these users first: {sorted(unknown)}")
        self._channels[channel_id] = _Channel(
            channel_id, name or channel_id.lower(), member_ids, is_private, is_im, team=team
        )

    def add_workspace(
        self, team_id: str, *, token: str, bot_user_id: str, bot_id: str, name: str = ""
    ) -> Workspace:
        """Another workspace the app can be installed in (OAuth), with a bot of its own."""
        workspace = Workspace(team_id, token, bot_user_id, bot_id, name or team_id)
        self._workspaces[team_id] = workspace
        self.add_user(bot_user_id, name=f"bot-{team_id.lower()}", is_bot=True)
        return workspace

    def join(self, channel_id: str, user_id: str) -> None:
        """Add a known user to a conversation."""
        if user_id not in self._users:
            raise ValueError(f"add the user {user_id} first")
        self._channels[channel_id].members.add(user_id)

    def add_file(self, name: str, content: bytes, **described: Any) -> Json:
        """Store a file a person shares; the object its ``file_share`` event carries.

        See `SlackFiles.add` (``mimetype``, ``size``, ``mode``, ``file_access``...);
        ``files.downloads`` records the requests for its bytes.
        """
        return self.files.add(name, content, **described)

    def post_user_message(
        self, channel: str, text: str, *, user: str | None = None, thread_ts: str | None = None
    ) -> str:
        """What a human says, as Slack stores it (no request is made); returns its ts."""
        target = self._channels[channel]
        message = Message(
            channel=channel,
            ts=self._next_ts(),
            text=text,
            user=user or self.user_id,
            thread_ts=self._thread_root(target, thread_ts),
        )
        target.messages[message.ts] = message
        return message.ts

    # --- scripted behaviour

    def fail_next(
        self,
        method: str,
        error: str = "internal_error",
        *,
        status: int = 200,
        retry_after: int | None = None,
        times: int = 1,
        after: int = 0,
    ) -> None:
        """Answer ``times`` calls of ``method`` with ``error``, changing nothing.

        They are the next ones, or those that follow the next ``after`` calls.

        ``fail_next("chat.update", "ratelimited", status=429, retry_after=1)`` is
        Slack's rate limit: HTTP 429 and ``Retry-After`` in whole seconds, which
        slack_sdk's ``AsyncRateLimitErrorRetryHandler`` parses with ``int()``.
        """
        self._faults[method].extend([None] * after + [_Fault(error, status, retry_after)] * times)

    def drop_connection(
        self,
        method: str,
        *,
        applied: bool,
        times: int = 1,
        after: int = 0,
        where: Callable[[_Params], bool] | None = None,
    ) -> None:
        """Reset the connection of ``times`` calls of ``method`` instead of answering.

        With ``applied`` the call takes effect first, as when a connection drops
        after Slack did the work but before its answer arrived: the client cannot
        tell the two apart (slack_sdk sees ``ServerDisconnectedError``). With
        ``where``, only calls whose parameters it accepts are dropped.
        """
        drop: Literal["before", "after"] = "after" if applied else "before"
        fault = _Fault("", 0, None, drop=drop, when=where)
        self._faults[method].extend([None] * after + [fault] * times)

    def slow_down(self, method: str, seconds: float, *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` only after ``seconds`` (real time)."""
        self._delays[method].extend([seconds] * times)

    def on_call(
        self,
        method: str,
        then: Callable[[], None],
        *,
        applied: bool = True,
        after: int = 0,
        where: Callable[[_Params], bool] | None = None,
    ) -> None:
        """Run ``then`` once a call of ``method`` is applied (or, not ``applied``, dropped).

        A crash test passes a function that kills the bot's process there, so the
        bot dies at a known point: the call made (or not), its answer never read.
        With ``where``, only a call whose parameters it accepts is that point.
        """
        drop: Literal["before"] | None = None if applied else "before"
        fault = _Fault("", 0, None, drop, then, when=where)
        self._faults[method].extend([None] * after + [fault])

    def hold_next(self, method: str) -> asyncio.Event:
        """Keep the next call of ``method`` waiting until the returned event is set."""
        held = asyncio.Event()
        self._holds[method].append(held)
        return held

    def disable(self, *methods: str) -> None:
        """Make ``methods`` answer ``unknown_method``, as on a workspace without them."""
        self._disabled.update(methods)

    def enable(self, *methods: str) -> None:
        self._disabled.difference_update(methods)

    def advance(self, seconds: float) -> None:
        """Move the fake's clock (stream expiry, ts values); real time is untouched."""
        self._now += round(seconds * 1_000_000)

    def expire_streams(self) -> None:
        """End every open stream now, as Slack does after about five minutes."""
        for channel, ts in self._stream_started:
            self._end_stream(channel, ts, "expired")

    # --- what tests read

    def calls_to(self, *methods: str) -> list[Call]:
        return [call for call in self.calls if call.method in methods]

    def messages(self, channel: str) -> list[Message]:
        """Every message of the channel, replies included, oldest first."""
        self._expire_due()
        return self._channels[channel].ordered()

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """The thread's parent (if any) and its replies, oldest first, with their final text."""
        self._expire_due()
        return self._channels[channel].thread(thread_ts)

    def replies(self, channel: str, thread_ts: str) -> list[Message]:
        return [m for m in self.thread(channel, thread_ts) if m.ts != thread_ts]

    async def wait_for_replies(
        self, channel: str, thread_ts: str, count: int = 1, *, within: float = 5.0
    ) -> list[Message]:
        """The thread's replies once there are ``count`` and none is still streaming.

        Fails after ``within`` seconds.
        """
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            found = self.replies(channel, thread_ts)
            if len(found) >= count and all(m.stream != "streaming" for m in found):
                return found
            await asyncio.sleep(0.01)
        raise AssertionError(
            f"fewer than {count} replies in {channel}/{thread_ts} after {within}s: "
            f"{[m.text for m in self.replies(channel, thread_ts)]}"
        )

    def status(self, channel: str, thread_ts: str) -> str:
        """The thread's last status, "" when none was set or it was cleared."""
        matching = [
            s.status for s in self.statuses if (s.channel_id, s.thread_ts) == (channel, thread_ts)
        ]
        return matching[-1] if matching else ""

    # --- life cycle

    async def __aenter__(self) -> FakeSlack:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._on_call)
        app.router.add_post("/commands/{hook}", self._on_command_response)
        self.socket_mode.route(app)
        self.files.route(app)
        self.oauth.route(app)
        self._runner, self._url = await serve_locally(app)
        self.files.serving_at(self._url)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.socket_mode.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def response_url(self, hook: str) -> str:
        """A slash command's ``response_url``: what is posted there is kept under ``hook``."""
        if self._url is None:
            raise RuntimeError("FakeSlack is not running; use it as `async with`")
        return f"{self._url}/commands/{hook}"

    async def _on_command_response(self, request: web.Request) -> web.Response:
        try:
            said = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        if not isinstance(said, dict) or not (said.get("text") or said.get("blocks")):
            return web.Response(status=400, text="no_text")
        self.command_responses.setdefault(request.match_info["hook"], []).append(said)
        return web.Response(text="ok")

    # --- dispatch

    async def _on_call(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        method = request.match_info["method"]
        values: Json = {}
        if self._delays[method]:
            await asyncio.sleep(self._delays[method].popleft())
        if self._holds[method]:
            await self._holds[method].popleft().wait()
        fault: _Fault | None = None
        try:
            values, token = await _read(request)
            body, fault = self._answer(method, _Params(values), token)
            status, headers = 200, {}
        except _Refused as refused:
            fault = refused.fault
            body, status, headers = refused.body(), refused.status, refused.headers
        except Refusal as refusal:
            body, status, headers = refusal.body(), refusal.status, refusal.headers
        self.calls.append(
            Call(method, values, _redacted(request), request.method, status, body, arrived)
        )
        if fault is not None and fault.then is not None:
            fault.then()
        if fault is not None and fault.drop is not None:
            assert request.transport is not None
            request.transport.abort()  # a reset: no answer at all
            self.calls[-1] = dataclasses.replace(self.calls[-1], status=0, response={})
        return web.json_response(body, status=status, headers=headers)

    def _answer(
        self, method: str, params: _Params, token: str | None
    ) -> tuple[Json, _Fault | None]:
        handler = self._handlers.get(method)
        if handler is None or method in self._disabled:
            raise Refusal("unknown_method")
        # never say which token was wrong: error bodies end up in logs
        caller = next((w for w in self._workspaces.values() if w.token == token), None)
        if method in self.oauth.methods():
            caller = None  # the app's own credentials, not a bot token (see slack_oauth)
        elif not token:
            raise Refusal("not_authed")
        elif caller is None and token != (
            self.app_token if method == "apps.connections.open" else self.token
        ):
            raise Refusal("invalid_auth")
        waiting = self._faults[method]
        fault = waiting[0] if waiting else None
        if fault is not None and fault.when is not None and not fault.when(params):
            fault = None  # not the call it waits for: it stays queued
        elif waiting:
            waiting.popleft()
        if fault is not None and fault.drop == "before":
            return {}, fault
        if fault is not None and fault.error:
            headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
            raise Refusal(fault.error, status=fault.status, headers=headers)
        self._expire_due()
        try:
            with self._acting_as(caller):
                return {"ok": True, **handler(params)}, fault
        except Refusal as refusal:
            if fault is None:
                raise
            # refused as the call was made: a kill or a drop set on it still happens
            raise _Refused(refusal, fault) from None

    @contextlib.contextmanager
    def _acting_as(self, caller: Workspace | None) -> Iterator[None]:
        """Answer as ``caller``'s workspace: its team, its bot, its channels.

        The handlers are plain functions (no await runs inside one), so the first
        workspace's identity is swapped for the call and put back before any other.
        """
        if caller is None:
            yield
            return
        first = (self.team_id, self.bot_user_id, self.bot_id)
        self.team_id, self.bot_user_id, self.bot_id = (
            caller.team_id,
            caller.bot_user_id,
            caller.bot_id,
        )
        self._caller = caller
        try:
            yield
        finally:
            self.team_id, self.bot_user_id, self.bot_id = first
            self._caller = None

    # --- identity

    def _open_connection(self, params: _Params) -> Json:
        assert self._url is not None
        return {"url": self._url.replace("http://", "ws://", 1) + self.socket_mode.ticket()}

    def _auth_test(self, params: _Params) -> Json:
        return {
            "url": "https://fake-team.slack.com/",
            "team": "Fake Team",
            "user": self._users[self.bot_user_id].name,
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _users_info(self, params: _Params) -> Json:
        user = self._users.get(params.text("user") or "")
        if user is None:
            raise Refusal("user_not_found")
        profile: Json = {"real_name": user.real_name, "display_name": user.name}
        if user.is_bot:
            profile["bot_id"] = self.bot_id
        wire: Json = {
            "id": user.id,
            "team_id": self.team_id,
            "name": user.name,
            "real_name": user.real_name,
            "deleted": False,
            "is_bot": user.is_bot,
            "is_admin": user.is_admin,
            "is_owner": False,
            "is_primary_owner": False,
            "is_app_user": False,
            "tz": "Etc/UTC",
            "profile": profile,
        }
        return {"user": wire}

    def _conversations_info(self, params: _Params) -> Json:
        return {"channel": self._conversations_info_of(self._channel(params))}

    def _conversations_info_of(self, channel: _Channel) -> Json:
        wire: Json = {
            "id": channel.id,
            "name": channel.name,
            "is_channel": not channel.is_private and not channel.is_im,
            "is_group": channel.is_private,
            "is_im": channel.is_im,
            "is_mpim": False,
            "is_private": channel.is_private or channel.is_im,
            "is_archived": False,
            "is_member": self.bot_user_id in channel.members,
            "created": EPOCH,
        }
        if channel.is_im:
            others = channel.members - {self.bot_user_id}
            wire["user"] = min(others) if others else None
        return wire

    def _conversations_list(self, params: _Params) -> Json:
        """Public channels by default (``types``), in id order, paged by an opaque cursor."""
        kinds = set((params.text("types") or "public_channel").split(","))
        if not kinds <= {"public_channel", "private_channel", "im", "mpim"}:
            raise Refusal("invalid_types")
        team = self._caller.team_id if self._caller is not None else None
        listed = sorted(
            (c for c in self._channels.values() if _kind(c) in kinds and c.team == team),
            key=lambda c: c.id,
        )
        limit = min(max(params.number("limit", 100), 1), 1000)
        cursor = params.text("cursor")
        start = int(base64.b64decode(cursor).decode().removeprefix("id:")) if cursor else 0
        page = listed[start : start + limit]
        more = start + limit < len(listed)
        return {
            "channels": [self._conversations_info_of(c) for c in page],
            "response_metadata": {
                "next_cursor": base64.b64encode(f"id:{start + limit}".encode()).decode()
                if more
                else ""
            },
        }

    # --- reading

    def _conversations_history(self, params: _Params) -> Json:
        channel = self._member_channel(params)
        top = [m for m in reversed(channel.ordered()) if m.thread_ts is None]
        return self._page(channel, _in_range(top, params), params, most=999)

    def _conversations_replies(self, params: _Params) -> Json:
        channel = self._member_channel(params)
        ts = params.text("ts") or ""
        found = channel.messages.get(ts)
        if found is None:
            raise Refusal("thread_not_found")
        thread = channel.thread(found.thread_ts or found.ts)
        return self._page(channel, _in_range(thread, params), params, most=1000)

    def _page(self, channel: _Channel, messages: list[Message], params: _Params, most: int) -> Json:
        """One page of ``messages`` (already in answer order) from the cursor on."""
        limit = min(max(params.number("limit", 100), 1), most)
        start = 0
        cursor = params.text("cursor")
        if cursor:
            start = _cursor_position(cursor, messages)
        page, rest = messages[start : start + limit], messages[start + limit :]
        answer: Json = {
            "messages": [
                self._wire(channel, m, all_metadata=params.flag("include_all_metadata"))
                for m in page
            ],
            "has_more": bool(rest),
            "pin_count": 0,
        }
        next_cursor = _cursor(rest[0].ts) if rest else ""
        answer["response_metadata"] = {"next_cursor": next_cursor}
        return answer

    def _wire(self, channel: _Channel, message: Message, *, all_metadata: bool = True) -> Json:
        """The message as Slack's API shows it."""
        wire: Json = {
            "type": "message",
            "ts": message.ts,
            "user": message.user,
            "text": message.text,
            "team": self.team_id,
        }
        if message.bot_id is not None:
            wire.update(bot_id=message.bot_id, app_id=self.app_id)
        if message.blocks:
            wire["blocks"] = list(message.blocks)
        if message.edited_ts is not None:
            wire["edited"] = {"user": message.user, "ts": message.edited_ts}
        if message.metadata is not None and all_metadata:
            # conversations.history / replies show it only with include_all_metadata
            wire["metadata"] = message.metadata
        if message.thread_ts is not None:
            parent = channel.messages.get(message.thread_ts)
            wire["thread_ts"] = message.thread_ts
            wire["parent_user_id"] = parent.user if parent else None
            return wire
        replies = channel.thread(message.ts)[1:]
        if replies:
            users = sorted({r.user for r in replies})
            wire.update(
                thread_ts=message.ts,
                reply_count=len(replies),
                reply_users=users,
                reply_users_count=len(users),
                latest_reply=replies[-1].ts,
            )
        return wire

    # --- posting

    def _post_message(self, params: _Params) -> Json:
        channel = self._member_channel(params)
        text, blocks = self._content(params)
        message = Message(
            channel=channel.id,
            ts=self._next_ts(),
            text=text,
            user=self.bot_user_id,
            bot_id=self.bot_id,
            thread_ts=self._thread_root(channel, params.text("thread_ts")),
            blocks=blocks or (),
            metadata=_checked_metadata(params.structured("metadata", "invalid_metadata_format")),
        )
        channel.messages[message.ts] = message
        return {"channel": channel.id, "ts": message.ts, "message": self._wire(channel, message)}

    def _update(self, params: _Params) -> Json:
        channel = self._channel(params)
        found = self._own_message(channel, params, not_owned="cant_update_message")
        if found.stream == "streaming":
            # "The message is currently streaming text and cannot be edited"
            raise Refusal("streaming_state_conflict")
        text = params.text("text")
        markdown = params.text("markdown_text")
        blocks = checked_blocks(params.structured("blocks", "invalid_blocks_format"))
        if markdown and (text or blocks is not None):
            raise Refusal("markdown_text_conflict")
        if not text and not markdown and blocks is None:
            raise Refusal("no_text")
        new_text = self._checked_text(text, markdown) if text or markdown else found.text
        metadata = params.structured("metadata", "invalid_metadata_format")
        updated = dataclasses.replace(
            found,
            metadata=found.metadata if metadata is None else _checked_metadata(metadata),
            text=new_text,
            # as chat.update documents: blocks left out are kept, [] removes them
            blocks=found.blocks if blocks is None else blocks,
            edited_ts=self._next_ts(),
        )
        channel.messages[found.ts] = updated
        wire = self._wire(channel, updated)
        return {"channel": channel.id, "ts": found.ts, "text": new_text, "message": wire}

    def _delete(self, params: _Params) -> Json:
        channel = self._channel(params)
        found = self._own_message(channel, params, not_owned="cant_delete_message")
        del channel.messages[found.ts]
        return {"channel": channel.id, "ts": found.ts}

    def _post_ephemeral(self, params: _Params) -> Json:
        channel = self._member_channel(params)
        user = params.required("user")
        if user not in self._users:
            raise Refusal("user_not_found")
        if user not in channel.members:
            raise Refusal("user_not_in_channel")
        text, blocks = self._content(params)
        ephemeral = Ephemeral(
            channel=channel.id,
            user=user,
            ts=self._next_ts(),
            text=text,
            blocks=blocks or (),
            thread_ts=params.text("thread_ts"),
        )
        self.ephemerals.append(ephemeral)
        return {"message_ts": ephemeral.ts}

    def _files_info(self, params: _Params) -> Json:
        found = self.files.info(params.required("file"))
        if found is None:
            raise Refusal("file_not_found")
        return {"file": found, "comments": [], "response_metadata": {"next_cursor": ""}}

    def _publish_view(self, params: _Params) -> Json:
        """A user's Home tab: a ``home`` view of at most 100 blocks, replacing the last."""
        user = params.required("user_id")
        if user not in self._users:
            raise Refusal("user_not_found")
        view = params.structured("view", "invalid_arguments")
        if not isinstance(view, dict) or view.get("type") != "home":
            raise Refusal("invalid_arguments", messages=["view must be an object of type home"])
        blocks = checked_blocks(view.get("blocks"), limit=MAX_VIEW_BLOCKS)
        if not blocks:
            raise Refusal("invalid_arguments", messages=["a view has at least one block"])
        self.home_views[user] = view
        return {"view": {"id": f"V{len(self.home_views):06d}", **view}}

    def _set_status(self, params: _Params) -> Json:
        channel = self._channel(params, name="channel_id")
        thread_ts = params.text("thread_ts")
        if not thread_ts or not _is_ts(thread_ts):
            raise Refusal("invalid_thread_ts")
        status = params.text("status")
        if status is None:
            raise _missing("status")
        loading = params.structured("loading_messages", "invalid_arguments") or []
        if not isinstance(loading, list) or len(loading) > 10:
            raise Refusal("invalid_arguments", messages=["loading_messages: at most 10"])
        self.statuses.append(StatusUpdate(channel.id, thread_ts, status, tuple(loading)))
        return {}

    # --- streaming

    def _start_stream(self, params: _Params) -> Json:
        channel = self._member_channel(params)
        thread_ts = params.required("thread_ts")
        if not channel.is_im:
            # "Required when streaming to channels" (docs.slack.dev chat.startStream)
            for name in ("recipient_user_id", "recipient_team_id"):
                if not params.text(name):
                    raise Refusal(f"missing_{name}")
            if params.text("recipient_user_id") not in self._users:
                raise Refusal("user_not_found")
        if params.text("task_display_mode") not in (None, "timeline", "plan"):
            raise Refusal("invalid_arguments", messages=["task_display_mode: timeline or plan"])
        message = Message(
            channel=channel.id,
            ts=self._next_ts(),
            text="",
            user=self.bot_user_id,
            bot_id=self.bot_id,
            thread_ts=self._thread_root(channel, thread_ts),
            stream="streaming",
        )
        self._stream_mode[(channel.id, message.ts)] = self._mode_of(params, None)
        channel.messages[message.ts] = self._streamed(message, params)
        self._stream_started[(channel.id, message.ts)] = self._now
        return {"channel": channel.id, "ts": message.ts}

    def _append_stream(self, params: _Params) -> Json:
        channel, found = self._open_stream(params)
        if not params.text("markdown_text") and not params.structured("chunks", "invalid_chunks"):
            raise Refusal("no_text")
        channel.messages[found.ts] = self._streamed(found, params)
        return {"channel": channel.id, "ts": found.ts}

    def _stop_stream(self, params: _Params) -> Json:
        channel, found = self._open_stream(params)
        blocks = checked_blocks(params.structured("blocks", "invalid_blocks_format")) or ()
        if params.text("session_status") not in (None, *SESSION_STATUSES):
            raise Refusal("invalid_arguments", messages=["session_status: unknown value"])
        streamed = self._streamed(found, params)
        stopped = dataclasses.replace(
            streamed,
            blocks=streamed.blocks + blocks,
            stream="stopped",
            metadata=_checked_metadata(params.structured("metadata", "invalid_metadata_format"))
            or streamed.metadata,
        )
        channel.messages[found.ts] = stopped
        return {"channel": channel.id, "ts": found.ts, "message": self._wire(channel, stopped)}

    def _open_stream(self, params: _Params) -> tuple[_Channel, Message]:
        channel = self._channel(params)
        found = self._own_message(channel, params, not_owned="message_not_owned_by_app")
        if found.stream != "streaming":
            raise Refusal("message_not_in_streaming_state")
        key = (channel.id, found.ts)
        self._stream_mode[key] = self._mode_of(params, self._stream_mode.get(key))
        return channel, found

    def _mode_of(self, params: _Params, current: str | None) -> str | None:
        """A stream keeps to the kind of content it began with (markdown_text or chunks)."""
        md = bool(params.text("markdown_text"))
        ch = bool(params.structured("chunks", "invalid_chunks"))
        if md and ch:
            raise Refusal("cannot_provide_both_markdown_text_and_chunks")
        mode = "markdown" if md else "chunks" if ch else None
        if mode and current and mode != current:
            raise Refusal("streaming_mode_mismatch")
        return current or mode

    def _streamed(self, message: Message, params: _Params) -> Message:
        """The message with this call's markdown_text and chunks applied, in that order."""
        markdown = params.text("markdown_text") or ""
        check_markdown(markdown)
        chunks = checked_chunks(params.structured("chunks", "invalid_chunks"))
        texts = [c["text"] for c in chunks if c["type"] == "markdown_text"]
        blocks = [b for c in chunks if c["type"] == "blocks" for b in c["blocks"]]
        if len(message.blocks) + len(blocks) > MAX_BLOCKS:
            raise Refusal("invalid_blocks", messages=[f"no more than {MAX_BLOCKS} blocks"])
        return dataclasses.replace(
            message,
            text=message.text + markdown + "".join(texts),
            chunks=message.chunks + chunks,
            blocks=message.blocks + tuple(blocks),
        )

    def _expire_due(self) -> None:
        lifetime = round(self.stream_lifetime * 1_000_000)
        for (channel, ts), started in self._stream_started.items():
            if self._now - started >= lifetime:
                self._end_stream(channel, ts, "expired")

    def _end_stream(self, channel: str, ts: str, state: StreamState) -> None:
        found = self._channels[channel].messages.get(ts)
        if found is not None and found.stream == "streaming":
            self._channels[channel].messages[ts] = dataclasses.replace(found, stream=state)

    # --- shared checks

    def _channel(self, params: _Params, name: str = "channel") -> _Channel:
        channel = self._channels.get(params.text(name) or "")
        caller = self._caller.team_id if self._caller is not None else None
        if channel is None or channel.team != caller:  # another workspace's: not there
            raise Refusal("channel_not_found")
        return channel

    def _member_channel(self, params: _Params) -> _Channel:
        channel = self._channel(params)
        if self.bot_user_id not in channel.members:
            raise Refusal("not_in_channel")
        return channel

    def _own_message(self, channel: _Channel, params: _Params, *, not_owned: str) -> Message:
        found = channel.messages.get(params.required("ts"))
        if found is None:
            raise Refusal("message_not_found")
        if found.bot_id != self.bot_id:
            raise Refusal(not_owned)
        return found

    def _content(self, params: _Params) -> tuple[str, tuple[Json, ...] | None]:
        """A new message's text and blocks; at least one of text, markdown_text, blocks."""
        text = params.text("text")
        markdown = params.text("markdown_text")
        blocks = checked_blocks(params.structured("blocks", "invalid_blocks_format"))
        if not text and not markdown and not blocks and not params.values.get("attachments"):
            raise Refusal("no_text")
        if markdown and (text or blocks is not None):
            raise Refusal("markdown_text_conflict")  # "cannot be used with text or blocks"
        return self._checked_text(text, markdown), blocks

    def _checked_text(self, text: str | None, markdown: str | None) -> str:
        if text and len(text) > self.max_text_chars:
            raise Refusal("msg_too_long")
        if markdown:
            check_markdown(markdown)
        return text or markdown or ""

    def _thread_root(self, channel: _Channel, thread_ts: str | None) -> str | None:
        """A reply to a reply lands in the same thread, under the parent."""
        if not thread_ts:
            return None
        target = channel.messages.get(thread_ts)
        return target.thread_ts if target is not None and target.thread_ts else thread_ts

    def _next_ts(self) -> str:
        self._last_ts = max(self._last_ts + 100, self._now)
        return _ts(self._last_ts)


# --- helpers of the dispatch ---------------------------------------------------------


async def _read(request: web.Request) -> tuple[Json, str | None]:
    """The call's arguments (query and body) and the token it carries.

    Slack reads a token from the Authorization header, or from a form or query
    ``token`` field, but never from a JSON body.
    """
    values: Json = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = json.loads(await request.text())
            except json.JSONDecodeError:
                raise Refusal("invalid_json") from None
            if not isinstance(body, dict):
                raise Refusal("invalid_json")
            body.pop("token", None)
            values.update(body)
        else:
            form = await request.post()
            values.update({k: v for k, v in form.items() if isinstance(v, str)})
    form_token = values.pop("token", None)
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credential:
        return values, credential
    if scheme.lower() == "basic" and credential:  # an app's client id and secret (OAuth)
        try:
            client_id, _, secret = base64.b64decode(credential).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Refusal("invalid_auth") from None
        values.setdefault("client_id", client_id)
        values.setdefault("client_secret", secret)
    return values, form_token if isinstance(form_token, str) else None


def _redacted(request: web.Request) -> dict[str, str]:
    headers = {name.lower(): value for name, value in request.headers.items()}
    if "authorization" in headers:
        scheme = headers["authorization"].partition(" ")[0]
        headers["authorization"] = f"{scheme} (redacted)"
    return headers


def _checked_metadata(metadata: Any) -> Json | None:
    """Message metadata as Slack takes it: an ``event_type`` and an ``event_payload`` object.

    docs.slack.dev/messaging/message-metadata: ``event_type`` is "a human readable
    alphanumeric string" (snake case in every example), ``event_payload`` an object.
    """
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise Refusal("invalid_metadata_format")
    event_type, payload = metadata.get("event_type"), metadata.get("event_payload")
    if not isinstance(event_type, str) or not event_type.replace("_", "").isalnum():
        raise Refusal("invalid_metadata_format")
    if not isinstance(payload, dict):
        raise Refusal("invalid_metadata_format")
    return {"event_type": event_type, "event_payload": payload}


def _in_range(messages: list[Message], params: _Params) -> list[Message]:
    """The messages between ``oldest`` and ``latest``, bounds included only when ``inclusive``."""
    inclusive = params.flag("inclusive")
    bounds = []
    for name in ("oldest", "latest"):
        value = params.text(name)
        if value and not _is_ts(value):
            raise Refusal(f"invalid_ts_{name}")
        bounds.append(_micros(value) if value else None)
    oldest, latest = bounds

    def inside(message: Message) -> bool:
        at = _micros(message.ts)
        if oldest is not None and (at < oldest or (at == oldest and not inclusive)):
            return False
        return latest is None or at < latest or (at == latest and inclusive)

    return [m for m in messages if inside(m)]


def _kind(channel: _Channel) -> str:
    if channel.is_im:
        return "im"
    return "private_channel" if channel.is_private else "public_channel"


def _cursor(ts: str) -> str:
    """Slack's cursor shape: base64 of ``next_ts:<ts without the dot>``."""
    return base64.b64encode(f"next_ts:{ts.replace('.', '')}".encode()).decode()


def _cursor_position(cursor: str, messages: list[Message]) -> int:
    try:
        decoded = base64.b64decode(cursor, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise Refusal("invalid_cursor") from None
    prefix, _, digits = decoded.partition(":")
    for position, message in enumerate(messages):
        if prefix == "next_ts" and message.ts.replace(".", "") == digits:
            return position
    raise Refusal("invalid_cursor")
