"""The API under ``/api``: turns, answers, cancels, retries and resets, and the event streams.

The principal a token speaks for is the attested speaker of the turns it
starts and the ``by`` of its answers: a request to approve is answered by
whoever started the turn, as in Slack.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from agent import (
    AgentSession,
    Cancelled,
    Failed,
    InboundEvent,
    Interrupted,
    PolicyAnswerer,
    TurnInput,
    TurnRecord,
    UnknownTurnError,
    grant_answer,
)
from bot.web.api.errors import ApiError, errors_as_json
from bot.web.api.payloads import (
    MAX_BODY,
    SESSION_ID_PATTERN,
    ResumeBody,
    SteerBody,
    TurnBody,
    message_json,
    outcome_json,
    read_body,
)
from bot.web.api.streams import client_left, following, record_of, send_turn, streaming
from bot.web.api.surface import SESSION_PREFIX, SOURCE, Api
from bot.web.sse import EventStream, parse_last_event_id

__all__ = ["api_app"]


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def api_app(api: Api) -> web.Application:
    """The API as an aiohttp sub-application, to be added under ``/api``."""
    app = web.Application(middlewares=[errors_as_json], client_max_size=MAX_BODY)
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
        ("POST", turn + "/retry", _retry),
        ("POST", session + "/steer", _steer),
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
    # Loading the session first makes the reads below come from memory, all of one moment.
    await session.status()
    position = await api.log.settled_position(session.key)
    suspended = await session.suspended()
    pending = None
    if suspended is not None:
        pending = {"turn_id": suspended.turn_id, **suspended.request.as_dict()}
        # the other calls of the batch that ask too, each answered on its own
        pending["others"] = [other.as_dict() for other in suspended.others]
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
                    "retry_of": record.retry_of,
                    **_ending(record),
                    "steering": [
                        {"steer_id": s.steer_id, "text": s.text, "by": s.by, "index": s.index}
                        for s in record.steering
                    ],
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
        {"messages": [message_json(m) for m in messages], "last_event_id": position}
    )


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
    async with streaming(stream, request):
        async for item in following(api, key, after):
            if item is None:
                if client_left(request):
                    return stream.response
                await stream.keep_alive()
            else:
                await stream.send(item)
    return stream.response


# -- acting --------------------------------------------------------------------


async def _start_turn(api: Api, request: web.Request) -> web.StreamResponse:
    principal = api.auth.principal(request)
    body = await read_body(request, TurnBody)
    session = _session(api, request)
    as_events = "text/event-stream" in request.headers.get("Accept", "")
    # Read the log's position before looking the turn up: a turn that is unknown at
    # that point cannot have logged anything before the position.
    after = await api.log.settled_position(session.key)
    known = None if body.turn_id is None else await record_of(session, body.turn_id)
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
    if not as_events and body.wait:
        return web.json_response(outcome_json(await session.result(turn_id)))
    record = await record_of(session, turn_id)
    if record is None:
        raise UnknownTurnError(f"turn {turn_id} was archived by a reset; start a new one")
    if not as_events:
        return web.json_response({"turn_id": turn_id, "status": record.status}, status=202)
    stream = EventStream(request)
    await stream.open()
    async with streaming(stream, request):
        if known is not None:
            # a retried request: the turn's story so far from its committed history, then live
            async for event in session.stream(turn_id, replay=True):
                await stream.send(event)
        else:
            await send_turn(api, stream, request, session, turn_id, after)
    return stream.response


async def _resume(api: Api, request: web.Request) -> web.Response:
    principal = api.auth.principal(request)
    body = await read_body(request, ResumeBody)
    turn_id = request.match_info["turn_id"]
    session = _session(api, request)
    suspended = await session.suspended()
    granted = None
    asked = None
    if suspended is not None and suspended.turn_id == turn_id:
        asked = suspended.request_for(body.input_id)
    if asked is not None and isinstance(asked.answerers, PolicyAnswerer):
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


async def _retry(api: Api, request: web.Request) -> web.Response:
    # As a cancel: whoever may act on the session. The new turn speaks for whoever
    # asked the first time, as a Slack retry does.
    api.auth.principal(request)
    turn_id = request.match_info["turn_id"]
    session = _session(api, request)
    new_id = await session.retry(turn_id)
    record = await record_of(session, new_id)
    status = "queued" if record is None else record.status
    return web.json_response({"turn_id": new_id, "retry_of": turn_id, "status": status}, status=202)


async def _steer(api: Api, request: web.Request) -> web.Response:
    principal = api.auth.principal(request)
    body = await read_body(request, SteerBody)
    steered = await _session(api, request).steer(body.text, steer_id=body.steer_id, by=principal)
    return web.json_response({"turn_id": steered.turn_id, "steer_id": steered.steer_id}, status=202)


async def _reset(api: Api, request: web.Request) -> web.Response:
    api.auth.principal(request)
    done = await _session(api, request).reset()
    return web.json_response(
        {"previous_session": done.previous_session, "generation": done.generation}
    )


# -- plumbing ------------------------------------------------------------------


def _session(api: Api, request: web.Request) -> AgentSession:
    return api.runtime.session(api.agent, SESSION_PREFIX + request.match_info["session"])


def _ending(record: TurnRecord) -> dict[str, str | None]:
    """Why a turn that did not complete ended, as its events said it (none for the others)."""
    result = record.result
    if isinstance(result, Failed):
        return {"error": result.error, "phase": result.phase}
    if isinstance(result, Cancelled | Interrupted):
        ended: dict[str, str | None] = {"reason": result.reason}
        return ended | ({"detail": result.detail} if isinstance(result, Interrupted) else {})
    return {}
