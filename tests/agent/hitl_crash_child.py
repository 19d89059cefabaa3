"""One process of a human-in-the-loop crash test: parks, answers or expires a turn, durably.

Run by ``test_hitl_crash.py`` as a child process::

    python hitl_crash_child.py DATABASE ENTRY_LOG EFFECT_LOG PHASE TTL

``DATABASE`` is a SQLite file's path or a ``postgresql://`` URL. The turn: the
model calls the async tool ``post_announcement``, which asks ``U1`` to approve
with ``ctx.request_input`` and, only on ``True``, posts (one line appended to
``EFFECT_LOG``); then the model replies with a final text built from the
tool's result. ``TTL`` is ``none`` or the request's time to live in seconds.

``PHASE`` is one of:

* ``park``: start the turn, wait until it parks, print ``PARKED <request json>``
  and freeze in ``time.sleep`` (event loop included, so no expiry timer can
  fire here) until the parent SIGKILLs it;
* ``wrong-user``: enter a fresh runtime, try to answer as ``U2`` and print
  ``REFUSED <error>``; check in-process that nothing was stored, then exit;
* ``resume``: enter a fresh runtime, print ``PENDING <request json>``, answer
  ``True`` as ``U1``, wait for the turn and print ``RESULT <json>``;
* ``recover``: only enter a fresh runtime (start-up expires the overdue
  request), wait for the turn to end and print ``RESULT <json>``.

Every model ask is printed as ``MODEL <step>``. Every entry into the tool is
appended to ``ENTRY_LOG`` and every post to ``EFFECT_LOG``, one fsynced line
each with this process's pid, so the parent can count them across a SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import NoReturn

from agent import (
    Agent,
    AgentRuntime,
    AgentSession,
    AssistantMessage,
    Completed,
    ModelReply,
    ModelRequest,
    SQLiteStore,
    Suspended,
    ToolContext,
    ToolMessage,
    TurnEvent,
    TurnInput,
    TurnResult,
    tool,
)
from agent._json import JsonValue
from agent.core.hitl import EXPIRED, InboundEvent, InputRequest
from agent.errors import ResumeAuthorizationError
from agent.stores.postgres import PostgresStore
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_log import append_line
from tests.agent.child_store import open_child_store

AGENT = "announcer"
SESSION = "s-hitl-crash"
TURN_ID = "turn-hitl-crash-1"
CALL_ID = "c1"
INPUT_ID = "approve"
PROMPT = "Post it?"
APPROVER = "U1"
INTRUDER = "U2"
ANNOUNCEMENT = "The deploy moved to Friday."
ASK_TEXT = "I will post the announcement once U1 approves."
POSTED_TEXT = "Posted the announcement."
EXPIRED_TEXT = "Nobody approved in time, so I did not post it."
FREEZE_SECONDS = 120  # the parent kills us long before; this only bounds an orphan
WAIT_SECONDS = 20.0  # every wait in this process is bounded, under the parent's deadline


def final_text(result: JsonValue) -> str:
    """The last reply, from what the tool returned."""
    if isinstance(result, dict) and result.get("posted") is True:
        return POSTED_TEXT
    if isinstance(result, dict) and result.get("expired") is True:
        return EXPIRED_TEXT
    raise AssertionError(f"unexpected tool result {result!r}")


def script(request: ModelRequest) -> ModelReply:
    print(f"MODEL {request.step}", flush=True)
    replies = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
    if replies == 0:
        return reply(ASK_TEXT, call("post_announcement", {"text": ANNOUNCEMENT}, id=CALL_ID))
    if replies == 1:
        [result] = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        return reply(final_text(result))
    raise AssertionError(f"the model was asked a third time ({request.step})")


def make_agent(entry_log: str, effect_log: str, ttl: float | None) -> Agent:
    async def post_announcement(text: str, ctx: ToolContext) -> dict[str, JsonValue]:
        """Post an announcement to the team channel, once a person approves it."""
        # before the ask: the parent counts entries to see the tool ran again from the top
        append_line(entry_log, f"entered pid={os.getpid()} call={ctx.call_id}")
        approved = await ctx.request_input(
            id=INPUT_ID,
            prompt=PROMPT,
            schema={"type": "boolean"},
            answerers={"user": APPROVER},
            ttl=ttl,
        )
        if approved is EXPIRED:
            return {"posted": False, "expired": True}
        if approved is not True:
            return {"posted": False, "expired": False}
        # the side effect sits after the ask, so only the run that has the answer reaches it
        append_line(effect_log, f"posted pid={os.getpid()} key={ctx.idempotency_key} {text}")
        return {"posted": True}

    return Agent(
        name=AGENT,
        model=ScriptedModel(script),
        instructions="You post announcements when asked.",
        tools=[tool(post_announcement)],
    )


def request_json(request: InputRequest | None) -> str:
    assert request is not None, "the session is not parked"
    return json.dumps(request.as_dict(), sort_keys=True)


def result_json(result: TurnResult) -> str:
    text = result.text if isinstance(result, Completed) else None
    return json.dumps({"type": type(result).__name__, "text": text})


async def ended(session: AgentSession, turn_id: str, ending: asyncio.Future[None]) -> TurnResult:
    """The turn's result once it ran on past its park.

    ``result`` of a parked turn returns its `Suspended` at once, and a fresh
    runtime expires an overdue request on a timer just after start-up, so
    right after entering, ``result`` may still see the old park. The terminal
    event of the resumed run is what says it has ended.
    """
    await asyncio.wait_for(ending, WAIT_SECONDS)
    return await asyncio.wait_for(session.result(turn_id), WAIT_SECONDS)


async def main(
    database: str, entry_log: str, effect_log: str, phase: str, ttl: float | None
) -> None:
    if phase not in ("park", "wrong-user", "resume", "recover"):
        raise SystemExit(f"unknown phase {phase!r}")
    store = await open_child_store(database)
    try:
        runtime = AgentRuntime(store, make_agent(entry_log, effect_log, ttl))
        session = runtime.session(AGENT, SESSION)
        ending: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def watch(event: TurnEvent) -> None:
            # a run that ends other than by parking: the answer (or the expiry) carried it on
            is_ending = event.type in ("turn.completed", "turn.failed", "turn.cancelled")
            if is_ending and not ending.done():
                ending.set_result(None)

        # subscribe before entering: entering the runtime is what expires an overdue request
        await session.observe(watch, turn_id=TURN_ID)
        async with runtime:
            if phase == "park":
                await park(session)
            elif phase == "wrong-user":
                await refuse_wrong_user(store, session)
            elif phase == "resume":
                [pending] = await session.pending()
                print(f"PENDING {request_json(pending)}", flush=True)
                await session.resume(TURN_ID, INPUT_ID, True, by=APPROVER)
                print(f"RESULT {result_json(await ended(session, TURN_ID, ending))}", flush=True)
            else:
                print(f"RESULT {result_json(await ended(session, TURN_ID, ending))}", flush=True)
    finally:
        await store.close()


async def park(session: AgentSession) -> None:
    speaker = InboundEvent(source="slack", user=APPROVER, attested=True)
    given = TurnInput(text=f"Announce: {ANNOUNCEMENT}", user=APPROVER, event=speaker)
    await session.start(given, turn_id=TURN_ID)
    result = await asyncio.wait_for(session.result(TURN_ID), WAIT_SECONDS)
    assert isinstance(result, Suspended), result
    print(f"PARKED {request_json(result.request)}", flush=True)
    freeze()


def freeze() -> NoReturn:
    """Stop the whole process, event loop included, until the parent SIGKILLs it.

    Blocking on purpose: the parked turn then lives on disk only, and no expiry
    timer of this process can answer it before the kill.
    """
    time.sleep(FREEZE_SECONDS)
    os._exit(3)  # never reached when the parent does its job


async def refuse_wrong_user(store: SQLiteStore | PostgresStore, session: AgentSession) -> None:
    before = await session.pending()
    try:
        await session.resume(TURN_ID, INPUT_ID, True, by=INTRUDER)
    except ResumeAuthorizationError as exc:
        print(f"REFUSED {json.dumps(str(exc))}", flush=True)
    else:
        raise AssertionError(f"{INTRUDER} was allowed to answer a request for {APPROVER}")
    # nothing stored, as this process sees it (the parent checks the database as well)
    steps = await store.load_steps(session.key, TURN_ID)
    assert not [step for step in steps if step.startswith("input:")], steps
    assert await session.status() == "suspended"
    assert await session.pending() == before


if __name__ == "__main__":
    db, entries, effects, phase_arg, ttl_arg = sys.argv[1:6]
    asyncio.run(
        main(db, entries, effects, phase_arg, None if ttl_arg == "none" else float(ttl_arg))
    )
