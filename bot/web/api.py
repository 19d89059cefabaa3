"""The API under ``/api``: turns, answers, cancels and resets, and each session's event stream.

The API's sessions are the engine's ``http:<id>`` sessions, so no API call can
reach a Slack thread. The principal a token speaks for is the attested speaker
of the turns it starts and the ``by`` of its answers: a request to approve is
answered by whoever started the turn, as in Slack.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent import (
    Agent,
    AgentError,
    AgentRuntime,
    AgentSession,
    AssistantMessage,
    AuthorizeAnswerError,
    Cancelled,
    Completed,
    ConflictError,
    EventLog,
    Failed,
    InboundEvent,
    InvalidAnswerError,
    JsonValue,
    LogEntry,
    LogGap,
    Message,
    PolicyAnswerer,
    ResumeAuthorizationError,
    RuntimeClosedError,
    SessionKey,
    SessionSuspendedError,
    Suspended,
    ThinkingBlock,
    ToolCall,
    ToolMessage,
    TriggerMessage,
    TurnInput,
    TurnPolicy,
    TurnRecord,
    TurnResult,
    UnknownTurnError,
    UserMessage,
    grant_answer,
    is_terminal,
    resolve_policy,
)
from bot.offline import DEMO_MODEL_NAME
from bot.settings import Settings
from bot.web.auth import ApiAuth
from bot.web.errors import ApiError, error_response
from bot.web.sse import EventStream, parse_last_event_id

__all__ = ["SESSION_PREFIX", "SOURCE", "Api", "api_app", "api_for", "is_api_session"]

logger = logging.getLogger("bot.web")

SOURCE = "http"
SESSION_PREFIX = "http:"
SESSION_ID_PATTERN = r"[A-Za-z0-9._:\-]{1,128}"
MAX_TEXT = 40_000
MAX_BODY = 256 * 1024

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True, slots=True, kw_only=True)
class Api:
    """What the API serves: one agent's sessions on a runtime, and their event log."""

    runtime: AgentRuntime
    agent: str
    log: EventLog
    auth: ApiAuth
    policy: TurnPolicy
    """What the API's turns run under (the agent's ``http`` source policy)."""
    model: str
    """What answers, as people should read it."""
    offline: bool
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set as the server shuts down: every event stream ends, so none outlives the stop."""


def api_for(
    settings: Settings,
    runtime: AgentRuntime,
    agent: Agent,
    log: EventLog,
    *,
    unavailable: tuple[str, ...] = (),
) -> Api:
    """What the API serves for ``agent`` under these settings.

    Args:
        settings: The bot's settings.
        runtime: Runs the API's turns.
        agent: The agent that answers.
        log: The event log the API's streams read.
        unavailable: Tools of the agent that cannot work in an API turn (they need a
            Slack thread): denied there, so the model is not offered them.
    """
    offline = settings.anthropic_api_key is None
    policy = resolve_policy(agent, SOURCE)
    policy = dataclasses.replace(
        policy, deny_tools=tuple(dict.fromkeys(policy.deny_tools + unavailable))
    )
    return Api(
        runtime=runtime,
        agent=agent.name,
        log=log,
        auth=ApiAuth(settings.api_principals()),
        policy=policy,
        model=DEMO_MODEL_NAME if offline else settings.anthropic_model,
        offline=offline,
    )


class _TurnBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_TEXT)
    turn_id: str | None = Field(default=None, pattern=f"^{SESSION_ID_PATTERN}$")
    replace: bool = False
    wait: bool = True
    """False: answer 202 once the turn is admitted; its events come on /events."""


class _ResumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_id: str = Field(min_length=1, max_length=200)
    value: JsonValue


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def api_app(api: Api) -> web.Application:
    """The API as an aiohttp sub-application, to be added under ``/api``."""
    app = web.Application(middlewares=[_errors_as_json], client_max_size=MAX_BODY)
    session = "/sessions/{session:" + SESSION_ID_PATTERN + "}"
    turn = session + "/turns/{turn_id:" + SESSION_ID_PATTERN + "}"
    routes: list[tuple[str, str, Callable[[Api, web.Request], Awaitable[web.StreamResponse]]]] = [
        ("GET", "/info", _info),
        ("GET", "/sessions", _list_sessions),
        ("GET", session, _describe_session),
        ("GET", session + "/transcript", _transcript),
        ("GET", session + "/events", _events),
        ("POST", session + "/turns", _start_turn),
        ("POST", turn + "/resume", _resume),
        ("POST", turn + "/cancel", _cancel),
        ("POST", session + "/reset", _reset),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, _bound(api, handler))

    async def end_streams(_: web.Application) -> None:
        # a stream waits on its log for seconds at a time: one still open when the server
        # stops outlives its shutdown, and aiohttp then fails finishing it
        api.stopping.set()

    app.on_shutdown.append(end_streams)
    return app


def _bound(
    api: Api, handler: Callable[[Api, web.Request], Awaitable[web.StreamResponse]]
) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await handler(api, request)

    return handle


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc)
    except web.HTTPException as exc:  # the router's own 404 and 405, in our shape
        if exc.status < 400:
            raise
        return error_response(ApiError(exc.status, "not_found", exc.reason))
    except ResumeAuthorizationError as exc:
        return error_response(ApiError(403, "forbidden", str(exc)))
    except SessionSuspendedError:
        return error_response(
            ApiError(
                409,
                "waiting_for_answer",
                "this session waits for an answer to a request: answer it or cancel its turn first",
            )
        )
    except (ConflictError, InvalidAnswerError, AuthorizeAnswerError, UnknownTurnError) as exc:
        status, code = _status_of(exc)
        return error_response(ApiError(status, code, str(exc)))
    except RuntimeClosedError:
        return error_response(ApiError(503, "unavailable", "the bot is stopping; try again"))
    except AgentError as exc:
        logger.warning("%s %s failed: %s", request.method, request.path, exc)
        return error_response(ApiError(500, "internal", str(exc)))
    except Exception:
        logger.exception("%s %s failed", request.method, request.path)
        return error_response(ApiError(500, "internal", "the bot failed on this request"))


def _status_of(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, UnknownTurnError):
        return 404, "not_found"
    if isinstance(exc, InvalidAnswerError):
        return 400, "invalid_answer"
    if isinstance(exc, AuthorizeAnswerError):
        return 500, "answer_not_applied"
    return 409, "conflict"


# -- reading -------------------------------------------------------------------


async def _info(api: Api, request: web.Request) -> web.Response:
    principal = api.auth.principal(request)
    return web.json_response(
        {
            "agent": api.agent,
            "model": api.model,
            "offline": api.offline,
            "principal": principal,
            "auth": "local" if api.auth.is_local else "token",
        }
    )


async def _list_sessions(api: Api, request: web.Request) -> web.Response:
    api.auth.principal(request)
    found = await api.runtime.store.list_sessions(api.agent, prefix=SESSION_PREFIX)
    return web.json_response(
        {
            "sessions": [
                {
                    "session": summary.session_id.removeprefix(SESSION_PREFIX),
                    "status": summary.status,
                    "title": summary.title,
                    "updated_at": summary.updated_at,
                    "last_event_id": summary.last_event,
                }
                for summary in found
            ]
        }
    )


async def _describe_session(api: Api, request: web.Request) -> web.Response:
    api.auth.principal(request)
    session = _session(api, request)
    await session.status()  # loaded: what follows reads memory, with no await between
    position = await api.log.settled_position(session.key)
    parked = await session.suspended()
    pending = None
    if parked is not None:
        pending = {"turn_id": parked.turn_id, **parked.request.as_dict()}
    return web.json_response(
        {
            "session": request.match_info["session"],
            "status": await session.status(),
            "turns": [
                {
                    "turn_id": record.turn_id,
                    "seq": record.seq,
                    "status": record.status,
                    "text": record.input.text,
                    "by": record.input.user,
                }
                for record in await session.turns()
            ],
            "pending": pending,
            "last_event_id": position,
        }
    )


async def _transcript(api: Api, request: web.Request) -> web.Response:
    api.auth.principal(request)
    session = _session(api, request)
    await session.status()
    position = await api.log.settled_position(session.key)
    messages = await session.transcript()
    # follow the events from last_event_id: none of these messages comes again
    return web.json_response(
        {"messages": [_message(m) for m in messages], "last_event_id": position}
    )


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        return {
            "role": "user",
            "turn_id": message.turn_id,
            "text": message.text,
            "user": message.user,
        }
    if isinstance(message, TriggerMessage):
        return {
            "role": "trigger",
            "turn_id": message.turn_id,
            "text": message.text,
            "by": message.by,
        }
    if isinstance(message, AssistantMessage):
        return {
            "role": "assistant",
            "turn_id": message.turn_id,
            "text": message.text,
            # the thinking it showed: the note before each call goes with the call
            "progress": _reasoning(message),
            "tool_calls": [
                {"id": c.id, "name": c.name, "input": c.input, "note": message.note_before(c.id)}
                for c in message.tool_calls
            ],
        }
    assert isinstance(message, ToolMessage)
    return {
        "role": "tool",
        "turn_id": message.turn_id,
        "call_id": message.call_id,
        "name": message.name,
        "result": message.result,
        "is_error": message.is_error,
    }


def _reasoning(message: AssistantMessage) -> list[str]:
    """The shown thinking of a reply that introduces none of its calls."""
    blocks = message.content
    notes = {i for i in range(len(blocks) - 1) if isinstance(blocks[i + 1], ToolCall)}
    return [
        b.thinking
        for i, b in enumerate(blocks)
        if isinstance(b, ThinkingBlock) and b.thinking and i not in notes
    ]


async def _events(api: Api, request: web.Request) -> web.StreamResponse:
    api.auth.principal(request)
    key = _session(api, request).key
    given = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
    try:
        after = parse_last_event_id(given)
    except ValueError:
        raise ApiError(
            400,
            "invalid",
            "Last-Event-ID (or after) must be an event id such as 17 or 17.3",
            field="after",
        ) from None
    stream = EventStream(request)
    await stream.open()
    async with _streaming(stream, request):
        async for item in _following(api, key, after):
            if item is None:
                if _client_left(request):
                    return stream.response
                await stream.keep_alive()
            else:
                await stream.send(item)
    return stream.response


# -- acting --------------------------------------------------------------------


async def _start_turn(api: Api, request: web.Request) -> web.StreamResponse:
    principal = api.auth.principal(request)
    body = await _body(request, _TurnBody)
    session = _session(api, request)
    streaming = "text/event-stream" in request.headers.get("Accept", "")
    # the position first: a turn unknown after it cannot have logged anything before it
    after = await api.log.settled_position(session.key)
    known = None if body.turn_id is None else await _record(session, body.turn_id)
    given = TurnInput(
        text=body.text,
        user=principal,
        event=InboundEvent(
            source=SOURCE,
            user=principal,
            attested=True,  # by the token, or by being on this machine
            data={"session": request.match_info["session"]},
        ),
        policy=api.policy,
    )
    turn_id = await session.start(given, turn_id=body.turn_id, replace=body.replace)
    if not streaming and body.wait:
        return web.json_response(_outcome(await session.result(turn_id)))
    record = await _record(session, turn_id)
    if record is None:
        raise UnknownTurnError(f"turn {turn_id} was archived by a reset; start a new one")
    if not streaming:
        return web.json_response({"turn_id": turn_id, "status": record.status}, status=202)
    stream = EventStream(request)
    await stream.open()
    async with _streaming(stream, request):
        if known is not None:
            # a retried request: the turn's story so far from its committed history, then live
            async for event in session.stream(turn_id, replay=True):
                await stream.send(event)
        else:
            await _send_turn(api, stream, request, session, turn_id, after)
    return stream.response


async def _send_turn(
    api: Api,
    stream: EventStream,
    request: web.Request,
    session: AgentSession,
    turn_id: str,
    after: int,
) -> None:
    ended_quietly = False
    async for item in _following(api, session.key, after):
        if item is None:
            if _client_left(request):
                return
            # a turn seen ended at two quiet moments in a row will send nothing more
            if ended_quietly and await _send_ending(stream, session, turn_id):
                return
            ended_quietly = await _has_ended(session, turn_id)
            await stream.keep_alive()
        elif isinstance(item, LogEntry) and item.event.turn_id == turn_id:
            await stream.send(item)
            if is_terminal(item.event):
                return


async def _record(session: AgentSession, turn_id: str) -> TurnRecord | None:
    return next((t for t in await session.turns() if t.turn_id == turn_id), None)


async def _has_ended(session: AgentSession, turn_id: str) -> bool:
    record = await _record(session, turn_id)
    return record is None or not record.is_unfinished


async def _send_ending(stream: EventStream, session: AgentSession, turn_id: str) -> bool:
    """Send how the turn ended (or parked), when its last event never came; False if it runs.

    It can happen when the log dropped that event after the store refused it again and again.
    """
    if not await _has_ended(session, turn_id):
        return False
    last = None
    async for event in session.stream(turn_id, replay=True):
        last = event
    if last is not None:
        await stream.send(last)
    return True


@contextlib.asynccontextmanager
async def _streaming(stream: EventStream, request: web.Request) -> AsyncIterator[None]:
    """End the stream whatever happens once it started: a JSON error can no longer be sent."""
    try:
        yield
    except ConnectionError:
        return  # the client left; it comes back with its Last-Event-ID
    except Exception:
        logger.exception("%s %s failed mid-stream; ending it", request.method, request.path)
    with contextlib.suppress(ConnectionError):
        await stream.close()


async def _following(
    api: Api, key: SessionKey, after: int
) -> AsyncIterator[LogEntry | LogGap | None]:
    """``api.log.follow(key, after=after)``, ended at once when the server stops."""
    entries = aiter(api.log.follow(key, after=after))
    stopping = asyncio.ensure_future(api.stopping.wait())
    upcoming: asyncio.Future[LogEntry | LogGap | None] | None = None
    try:
        while True:
            upcoming = asyncio.ensure_future(anext(entries))
            await asyncio.wait((upcoming, stopping), return_when=asyncio.FIRST_COMPLETED)
            if not upcoming.done():
                return
            try:
                item = upcoming.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        # the follower is let go first: a generator cannot be closed while it runs
        waits = [w for w in (upcoming, stopping) if w is not None and not w.done()]
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        closing = getattr(entries, "aclose", None)
        if closing is not None:
            await closing()


def _client_left(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _outcome(result: TurnResult) -> dict[str, Any]:
    outcome: dict[str, Any] = {"turn_id": result.turn_id}
    if isinstance(result, Completed):
        outcome.update(status="completed", text=result.text)
    elif isinstance(result, Suspended):
        outcome.update(status="suspended", request=result.request.as_dict())
    elif isinstance(result, Failed):
        outcome.update(status="failed", error=result.error)
    elif isinstance(result, Cancelled):
        outcome.update(status="cancelled", reason=result.reason)
    return outcome


async def _resume(api: Api, request: web.Request) -> web.Response:
    principal = api.auth.principal(request)
    body = await _body(request, _ResumeBody)
    turn_id = request.match_info["turn_id"]
    session = _session(api, request)
    parked = await session.suspended()
    granted = None
    if (
        parked is not None
        and (parked.turn_id, parked.request.id) == (turn_id, body.input_id)
        and isinstance(parked.request.answerers, PolicyAnswerer)
    ):
        # the agent's hook decides who a policy's people are, before anything applies
        granted = await grant_answer(session, turn_id=turn_id, input_id=body.input_id, by=principal)
    await session.resume(turn_id, body.input_id, body.value, by=principal, granted=granted)
    return web.json_response(
        {"turn_id": turn_id, "input_id": body.input_id, "accepted": True}, status=202
    )


async def _cancel(api: Api, request: web.Request) -> web.Response:
    api.auth.principal(request)
    turn_id = request.match_info["turn_id"]
    cancelled = await _session(api, request).cancel(turn_id)
    return web.json_response({"turn_id": turn_id, "cancelled": cancelled})


async def _reset(api: Api, request: web.Request) -> web.Response:
    api.auth.principal(request)
    done = await _session(api, request).reset()
    return web.json_response(
        {"previous_session": done.previous_session, "generation": done.generation}
    )


# -- plumbing ------------------------------------------------------------------


def is_api_session(key: SessionKey) -> bool:
    """Whether ``key`` is one of the API's sessions."""
    return key.session_id.startswith(SESSION_PREFIX)


def _session(api: Api, request: web.Request) -> AgentSession:
    return api.runtime.session(api.agent, SESSION_PREFIX + request.match_info["session"])


async def _body(request: web.Request, model: type[T]) -> T:
    # read no more than the limit, whatever the application around the API allows
    too_large = ApiError(413, "too_large", f"the body is over {MAX_BODY} bytes")
    if (request.content_length or 0) > MAX_BODY:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > MAX_BODY:
            raise too_large
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        if error["type"] == "json_invalid":
            raise ApiError(400, "invalid", "the body must be a JSON object") from None
        message = f"{field}: {error['msg']}" if field else error["msg"]
        raise ApiError(400, "invalid", message, field=field) from None
