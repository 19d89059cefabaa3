"""Rules 15-18: a tool parks its turn; only an allowed person's answer resumes it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    Completed,
    Failed,
    SQLiteStore,
    Suspended,
    ToolContext,
    ToolMessage,
    TurnInput,
    TurnPolicy,
    tool,
)
from agent.core.hitl import EXPIRED, AnswerCheck, InboundEvent, UserAnswerer
from agent.core.records import Commit, SessionKey
from agent.engine.grants import grant_answer
from agent.errors import (
    AuthorizeAnswerError,
    InvalidAnswerError,
    ResumeAuthorizationError,
    ResumeConflictError,
    SessionSuspendedError,
    TurnSuspendedError,
)
from agent.testing import RecordingSink, ScriptedModel, call, reply

SPEAKER = InboundEvent(source="slack", user="U1", attested=True, data={"channel": "C1"})


class Ledger:
    """What the tools did, across runs of the same call."""

    def __init__(self) -> None:
        self.entered = 0
        self.posted: list[str] = []


def post_tool(ledger: Ledger, **ask: Any) -> Any:
    @tool
    async def post(text: str, ctx: ToolContext) -> dict[str, Any]:
        """Post a message once a person approves it."""
        ledger.entered += 1
        approved = await ctx.request_input(
            id="approve", prompt=f"Post {text!r}?", schema={"type": "boolean"}, **ask
        )
        if approved is EXPIRED:
            return {"posted": False, "expired": True}
        if approved is not True:
            return {"posted": False}
        ledger.posted.append(text)  # the side effect goes after the answer
        return {"posted": True}

    return post


def gated_post_tool(ledger: Ledger, release: asyncio.Event) -> Any:
    """The post tool, held until ``release`` is set: to line turns up behind it."""
    inner = post_tool(ledger)

    @tool
    async def post(text: str, ctx: ToolContext) -> dict[str, Any]:
        """Post a message once a person approves it."""
        await release.wait()
        return await inner.fn(text, ctx)  # type: ignore[no-any-return]

    return post


def script(request: Any) -> Any:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        return reply(f"done: {last.result}")
    return reply("", call("post", {"text": "hello team"}, id=f"c-{last.turn_id}"))


def speaker_input(text: str = "post it", event: InboundEvent | None = SPEAKER) -> TurnInput:
    return TurnInput(text=text, user=event.user if event else None, event=event)


async def runtime_with(
    store: Any, ledger: Ledger, sink: Any = None, model: Any = None, **agent: Any
) -> AgentRuntime:
    tools = agent.pop("tools", None) or [post_tool(ledger, **agent.pop("ask", {}))]
    model = model or ScriptedModel(script)
    runtime = AgentRuntime(store, Agent(name="a", model=model, tools=tools, **agent), sink=sink)
    await runtime.start()
    return runtime


async def park(runtime: AgentRuntime, given: TurnInput | None = None) -> tuple[Any, str]:
    session = runtime.session("a", "s1")
    turn_id = await session.start(given or speaker_input())
    parked = await session.result(turn_id)
    assert isinstance(parked, Suspended)
    return session, turn_id


async def answers(store: Any, turn_id: str) -> dict[str, Any]:
    steps = await store.load_steps(SessionKey("a", "s1"), turn_id)
    return {k: v for k, v in steps.items() if k.startswith("input:")}


async def next_ending(session: Any, turn_id: str) -> Any:
    """The turn's result once its current wait (a park) is over."""
    ended = asyncio.Event()
    stop = await session.observe(
        lambda e: ended.set() if e.type in ("turn.completed", "turn.failed") else None,
        turn_id=turn_id,
    )
    try:
        await asyncio.wait_for(ended.wait(), timeout=5)
    finally:
        stop()
    return await session.result(turn_id)


# -- 1. parking -------------------------------------------------------------------------------


async def test_a_tool_asking_parks_the_turn_with_one_checkpoint(store):
    ledger = Ledger()
    sink = RecordingSink()
    runtime = await runtime_with(store, ledger, sink)
    policy = TurnPolicy(source="slack", place="C1", system="Be brief.", deny_tools=("delete",))
    given = TurnInput(text="post hello", user="U1", event=SPEAKER, policy=policy)
    session, turn_id = await park(runtime, given)

    parked = await session.result(turn_id)
    assert parked.request.id == "approve"
    assert parked.request.prompt == "Post 'hello team'?"
    assert parked.request.call_id == f"c-{turn_id}"
    assert parked.request.answerers == UserAnswerer(user="U1")  # the attested speaker
    assert parked.opening_text == "post hello"
    assert parked.event == SPEAKER
    assert parked.policy == policy  # the policy travels with the park
    assert await session.status() == "suspended"
    assert await session.pending() == (parked.request,)
    [requested] = [e for e in sink.events if e.type == "input.requested"]
    assert requested.request == parked.request.as_dict()
    assert sink.types(turn_id)[-1] == "input.requested"
    assert ledger.posted == []
    # what is on disk is all a new process needs
    stored = await store.load(SessionKey("a", "s1"))
    assert stored.status == "suspended"
    assert stored.turns[turn_id].result == parked
    await runtime.close()


@pytest.mark.parametrize(("answer", "posted"), [(True, ["hello team"]), (False, [])])
async def test_resume_replays_the_tool_which_gets_the_answer(store, answer, posted):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger)
    session, turn_id = await park(runtime)

    await session.resume(turn_id, "approve", answer, by="U1")
    done = await session.result(turn_id)

    assert isinstance(done, Completed)
    assert done.text == f"done: {{'posted': {answer}}}"
    assert ledger.entered == 2  # the parked tool ran again from the top
    assert ledger.posted == posted  # and its side effect, after the answer, ran once
    assert await session.status() == "idle"
    stored = (await answers(store, turn_id))[f"input:{turn_id}:approve"]
    assert (stored["value"], stored["by"], stored["call"]) == (answer, "U1", f"c-{turn_id}")
    assert stored["request"]["prompt"] == "Post 'hello team'?"  # kept with its answer
    settled = await session.answer_of(turn_id, "approve")
    assert (settled.value, settled.by, settled.expired) == (answer, "U1", False)
    assert settled.request.prompt == "Post 'hello team'?"
    await runtime.close()


async def test_an_open_request_has_no_answer_yet(store):
    runtime = await runtime_with(store, Ledger())
    session, turn_id = await park(runtime)
    assert await session.answer_of(turn_id, "approve") is None
    assert await session.answer_of(turn_id, "another") is None
    await runtime.close()


async def test_except_exception_around_request_input_does_not_swallow_the_park(store):
    ledger = Ledger()

    @tool
    async def careless(ctx: ToolContext) -> str:
        """A tool that catches everything."""
        try:
            answer = await ctx.request_input(id="ok", prompt="OK?")
        except Exception:
            return "swallowed"
        ledger.posted.append(str(answer))
        return "asked"

    model = ScriptedModel(
        lambda r: (
            reply("end")
            if isinstance(r.messages[-1], ToolMessage)
            else reply("", call("careless", id="c1"))
        )
    )
    runtime = await runtime_with(store, ledger, model=model, tools=[careless])
    session = runtime.session("a", "s1")
    turn_id = await session.start(speaker_input())
    assert isinstance(await session.result(turn_id), Suspended)
    await session.resume(turn_id, "ok", "yes", by="U1")
    assert isinstance(await session.result(turn_id), Completed)
    assert ledger.posted == ["yes"]
    await runtime.close()


async def test_a_local_tool_that_asks_fails_its_turn_clearly(store):
    @tool
    def local_ask(ctx: ToolContext) -> str:
        """A plain def cannot wait for a person."""
        _ = ctx.request_input(id="x", prompt="?")
        return "unreachable"

    model = ScriptedModel(lambda r: reply("", call("local_ask", id="c1")))
    runtime = await runtime_with(store, Ledger(), model=model, tools=[local_ask])
    session = runtime.session("a", "s1")
    failed = await session.result(await session.start(speaker_input()))
    assert isinstance(failed, Failed)
    assert "request_input needs an async tool" in failed.error
    await runtime.close()


# -- 2 and 4. resuming, and what is refused ----------------------------------------------------


async def test_only_the_right_user_can_answer(store):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger)
    session, turn_id = await park(runtime)

    with pytest.raises(ResumeAuthorizationError):
        await session.resume(turn_id, "approve", True, by="U2")
    with pytest.raises(ResumeAuthorizationError):
        await session.resume(turn_id, "approve", True)  # no verified identity at all
    assert await session.status() == "suspended"  # nothing was applied
    assert await answers(store, turn_id) == {}

    await session.resume(turn_id, "approve", True, by="U1")
    assert isinstance(await session.result(turn_id), Completed)
    await runtime.close()


async def test_a_wrong_turn_input_id_or_state_is_a_conflict(store):
    runtime = await runtime_with(store, Ledger())
    session, turn_id = await park(runtime)

    with pytest.raises(ResumeConflictError, match="no turn"):
        await session.resume("nope", "approve", True, by="U1")
    with pytest.raises(ResumeConflictError, match="waits for 'approve', not 'other'"):
        await session.resume(turn_id, "other", True, by="U1")
    await session.resume(turn_id, "approve", True, by="U1")
    await session.result(turn_id)
    with pytest.raises(ResumeConflictError, match="already answered by U1: True") as settled:
        await session.resume(turn_id, "approve", False, by="U1")
    assert (settled.value.answered_by, settled.value.answer) == ("U1", True)
    assert not settled.value.expired
    assert ResumeConflictError.http_status == 409
    assert ResumeAuthorizationError.http_status == 403
    await runtime.close()


async def test_an_answer_the_schema_refuses_is_refused_and_nothing_is_stored(store):
    runtime = await runtime_with(store, Ledger())
    session, turn_id = await park(runtime)

    with pytest.raises(InvalidAnswerError, match="is not of type 'boolean'"):
        await session.resume(turn_id, "approve", "yes please", by="U1")
    assert await session.status() == "suspended"
    assert await session.pending() != ()
    assert await answers(store, turn_id) == {}
    await runtime.close()


# -- 3. who may answer ------------------------------------------------------------------------


async def test_a_policy_answer_needs_a_grant_from_the_agents_hook(store):
    decisions: list[AnswerCheck] = []
    outage = {"on": True}

    async def authorize(check: AnswerCheck) -> bool:
        if outage["on"]:
            raise ConnectionError("directory unreachable")
        decisions.append(check)
        return check.by == "U-ops" and check.scope == "mailbox:scout"

    ledger = Ledger()
    runtime = await runtime_with(
        store,
        ledger,
        ask={"answerers": {"policy": "operator", "scope": "mailbox:scout"}},
        authorize_answer=authorize,
    )
    session, turn_id = await park(runtime)

    # the hook fails (an outage): 500, the answer is not applied, and can be retried
    with pytest.raises(AuthorizeAnswerError) as failed:
        await grant_answer(session, turn_id=turn_id, input_id="approve", by="U-ops")
    assert failed.value.http_status == 500
    assert await session.status() == "suspended"
    outage["on"] = False

    with pytest.raises(ResumeAuthorizationError):
        await grant_answer(session, turn_id=turn_id, input_id="approve", by="U-intern")
    with pytest.raises(ResumeAuthorizationError):  # by alone never answers a policy
        await session.resume(turn_id, "approve", True, by="U-ops")

    granted = await grant_answer(
        session, turn_id=turn_id, input_id="approve", by="U-ops", principal={"role": "ops"}
    )
    await session.resume(turn_id, "approve", True, by="U-ops", granted=granted)
    assert isinstance(await session.result(turn_id), Completed)
    assert ledger.posted == ["hello team"]
    assert decisions[-1].principal == {"role": "ops"}
    await runtime.close()


async def test_a_grant_never_answers_a_user_request(store):
    from agent.core.hitl import Grant

    runtime = await runtime_with(store, Ledger())
    session, turn_id = await park(runtime)
    assert await grant_answer(session, turn_id=turn_id, input_id="approve", by="U9") is None
    with pytest.raises(ResumeAuthorizationError):
        await session.resume(
            turn_id,
            "approve",
            True,
            by="U9",
            granted=Grant(policy="any", turn_id=turn_id, input_id="approve", by="U9"),
        )
    await runtime.close()


async def test_an_unattested_speaker_cannot_be_the_default_answerer(store):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger)
    session = runtime.session("a", "s1")
    forged = InboundEvent(source="email", user="boss@example.com", attested=False)
    done = await session.result(await session.start(speaker_input(event=forged)))

    # request_input raised instead of parking: the model read why, the turn went on
    assert isinstance(done, Completed)
    assert "not attested by its channel (email)" in done.text
    assert "answerers=" in done.text
    assert ledger.posted == []
    await runtime.close()


async def test_a_turn_with_no_inbound_event_has_no_restriction(store):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger)
    proactive = TurnInput(text="daily post", trigger="proactive", by="schedule:daily")
    session, turn_id = await park(runtime, proactive)

    assert (await session.pending())[0].answerers is None
    await session.resume(turn_id, "approve", True)  # the host drives its own resume
    assert isinstance(await session.result(turn_id), Completed)
    assert ledger.posted == ["hello team"]
    await runtime.close()


# -- 2. answers belong to their turn --------------------------------------------------------


async def test_an_answer_does_not_carry_over_to_a_later_turn(store):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger)
    session, first = await park(runtime)
    await session.resume(first, "approve", True, by="U1")
    await session.result(first)

    second = await session.start(speaker_input("post again"))
    assert isinstance(await session.result(second), Suspended)  # asks again, same id
    assert ledger.posted == ["hello team"]
    await runtime.close()


# -- 5. one park at a time ------------------------------------------------------------------


async def test_a_parked_session_refuses_new_turns_and_allows_redelivery(store):
    sink = RecordingSink()
    runtime = await runtime_with(store, Ledger(), sink)
    session, turn_id = await park(runtime)

    with pytest.raises(SessionSuspendedError, match=f"turn {turn_id} waits on 'approve'"):
        await session.start(speaker_input("something else"))
    assert await session.start(speaker_input(), turn_id=turn_id) == turn_id  # a Slack retry
    await asyncio.sleep(0.05)
    assert sink.types().count("input.requested") == 1
    await runtime.close()


async def test_turns_queued_before_the_park_wait_for_its_answer(store):
    release = asyncio.Event()
    ledger = Ledger()
    post = gated_post_tool(ledger, release)
    runtime = await runtime_with(store, ledger, tools=[post])
    session = runtime.session("a", "s1")
    first = await session.start(speaker_input("first"))
    second = await session.start(speaker_input("second"))  # queued behind the first
    release.set()
    assert isinstance(await session.result(first), Suspended)
    await asyncio.sleep(0.05)
    stored = await store.load(SessionKey("a", "s1"))
    assert stored.turns[second].status == "queued"  # not run after a call with no result

    await session.resume(first, "approve", True, by="U1")
    assert isinstance(await session.result(first), Completed)
    assert isinstance(await session.result(second), Suspended)  # then it ran, and asked
    await runtime.close()


# -- 6. exactly one answer wins -------------------------------------------------------------


async def test_two_racing_resumes_apply_one_answer(store):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger)
    session, turn_id = await park(runtime)

    outcomes = await asyncio.gather(
        session.resume(turn_id, "approve", True, by="U1"),
        session.resume(turn_id, "approve", False, by="U1"),
        return_exceptions=True,
    )
    assert outcomes[0] is None
    assert isinstance(outcomes[1], ResumeConflictError)
    assert "already answered by U1: True" in str(outcomes[1])
    assert (await session.result(turn_id)).text == "done: {'posted': True}"
    assert ledger.posted == ["hello team"]
    await runtime.close()


async def test_two_processes_answering_at_once_apply_one_answer(tmp_path):
    path = tmp_path / "s.db"
    ledger = Ledger()
    first_store = await SQLiteStore.open(path)
    first = await runtime_with(first_store, ledger)
    session, turn_id = await park(first)
    # a second replica on the same database, holding the same parked state
    second_store = await SQLiteStore.open(path)
    second = await runtime_with(second_store, ledger)
    replica = second.session("a", "s1")
    assert (await replica.pending())[0].id == "approve"

    outcomes = await asyncio.gather(
        session.resume(turn_id, "approve", True, by="U1"),
        replica.resume(turn_id, "approve", False, by="U1"),
        return_exceptions=True,
    )
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(errors) == 1
    assert isinstance(errors[0], ResumeConflictError)
    assert "already answered by U1" in str(errors[0])
    assert len(await answers(first_store, turn_id)) == 1
    for closing in (first, second, first_store, second_store):
        await closing.close()


# -- 7. expiry ----------------------------------------------------------------------------------


async def test_an_unanswered_request_expires_and_the_tool_sees_it(store):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger, ask={"ttl": 0.2})
    session, turn_id = await park(runtime)
    [request] = await session.pending()
    assert request.expires_at is not None

    done = await next_ending(session, turn_id)
    assert isinstance(done, Completed)
    assert done.text == "done: {'posted': False, 'expired': True}"
    assert ledger.posted == []
    assert (await answers(store, turn_id))[f"input:{turn_id}:approve"]["expired"] is True
    settled = await session.answer_of(turn_id, "approve")
    assert (settled.expired, settled.by) == (True, None)
    with pytest.raises(ResumeConflictError, match="already expired") as late:
        await session.resume(turn_id, "approve", True, by="U1")
    assert late.value.expired
    assert late.value.answered_by is None
    await runtime.close()


async def test_a_request_that_fell_due_while_nothing_ran_expires_at_start_up(tmp_path):
    now = {"t": 1_000_000.0}
    path = tmp_path / "s.db"
    ledger = Ledger()
    store = await SQLiteStore.open(path)
    runtime = await runtime_with(store, ledger, ask={"ttl": 3600})
    runtime.clock = lambda: now["t"]
    _session, turn_id = await park(runtime)
    await runtime.close()  # the process goes away for more than an hour

    now["t"] += 7200
    later = AgentRuntime(
        store,
        Agent(name="a", model=ScriptedModel(script), tools=[post_tool(ledger, ttl=3600)]),
        clock=lambda: now["t"],
    )
    await later.start()
    # answered during start(): nobody who asks afterwards reads the stale park
    done = await asyncio.wait_for(later.session("a", "s1").result(turn_id), timeout=5)
    assert done.text == "done: {'posted': False, 'expired': True}"
    await later.close()
    await store.close()


async def test_an_answer_in_time_cancels_the_expiry(store):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger, ask={"ttl": 0.3})
    session, turn_id = await park(runtime)
    await session.resume(turn_id, "approve", True, by="U1")
    assert (await session.result(turn_id)).text == "done: {'posted': True}"
    await asyncio.sleep(0.4)  # past the deadline: nothing else happens
    [(step, stored)] = (await answers(store, turn_id)).items()
    assert (step, stored["value"], stored["by"]) == (f"input:{turn_id}:approve", True, "U1")
    await runtime.close()


async def test_a_resumed_run_starts_as_a_resume_and_a_late_subscriber_sees_the_park(store):
    sink = RecordingSink()
    runtime = await runtime_with(store, Ledger(), sink)
    session, turn_id = await park(runtime)

    seen: list[Any] = []
    await session.observe(seen.append, turn_id=turn_id, replay=True)
    assert seen[-1].type == "input.requested"  # folded from the checkpoint
    assert seen[-1].request["id"] == "approve"
    # and before it, the call that asked, as its run showed it (it has no result yet)
    [shown] = [e for e in sink.events if e.type == "action.requested"]
    asking = seen[-2]
    assert asking.type == "action.requested"
    assert (asking.call_id, asking.name, asking.input) == (shown.call_id, shown.name, shown.input)
    assert asking.call_id == seen[-1].request["call_id"]
    with pytest.raises(TurnSuspendedError):
        await session.turn(speaker_input(), turn_id=turn_id)

    await session.resume(turn_id, "approve", True, by="U1")
    await next_ending(session, turn_id)
    started = [e.trigger for e in sink.events if e.type == "turn.started"]
    assert started == ["inbound", "resume"]
    await runtime.close()


async def test_a_tool_that_asks_twice_parks_twice(store):
    ledger = Ledger()

    @tool
    async def post(text: str, ctx: ToolContext) -> dict[str, Any]:
        """Post after two people agree."""
        ledger.entered += 1
        first = await ctx.request_input(id="editor", prompt="Edit ok?", answerers={"user": "U1"})
        second = await ctx.request_input(id="legal", prompt="Legal ok?", answerers={"user": "U7"})
        if first is True and second is True:
            ledger.posted.append(text)
        return {"posted": bool(first is True and second is True)}

    runtime = await runtime_with(store, ledger, tools=[post])
    session, turn_id = await park(runtime)
    assert (await session.pending())[0].id == "editor"
    await session.resume(turn_id, "editor", True, by="U1")
    parked_again = await next_park(session, turn_id)
    assert parked_again.request.id == "legal"
    with pytest.raises(ResumeAuthorizationError):
        await session.resume(turn_id, "legal", True, by="U1")
    await session.resume(turn_id, "legal", True, by="U7")
    assert (await next_ending(session, turn_id)).text == "done: {'posted': True}"
    assert ledger.posted == ["hello team"]
    assert ledger.entered == 3
    await runtime.close()


async def next_park(session: Any, turn_id: str) -> Suspended:
    parked = asyncio.Event()
    stop = await session.observe(
        lambda e: parked.set() if e.type == "input.requested" else None, turn_id=turn_id
    )
    try:
        await asyncio.wait_for(parked.wait(), timeout=5)
    finally:
        stop()
    result = await session.result(turn_id)
    assert isinstance(result, Suspended)
    return result


async def test_an_expiry_timer_that_runs_ahead_of_the_clock_tries_again(store):
    now = {"t": 1_000_000.0}
    ledger = Ledger()
    runtime = await runtime_with(store, ledger, ask={"ttl": 0.2})
    runtime.clock = lambda: now["t"]  # a wall clock stepped back, or stopped
    session, turn_id = await park(runtime)
    await asyncio.sleep(0.35)  # the loop's timer fired; by the wall clock it is not due
    assert await session.status() == "suspended"

    now["t"] += 60
    done = await next_ending(session, turn_id)
    assert done.text == "done: {'posted': False, 'expired': True}"
    await runtime.close()


# -- found by a review ------------------------------------------------------------------------


@pytest.mark.parametrize("slots", [1, 8], ids=["one-by-one", "together"])
async def test_one_approval_never_approves_another_call_asking_with_the_same_id(store, slots):
    ledger = Ledger()

    def two_posts(request: Any) -> Any:
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            return reply("both handled")
        return reply(
            "",
            call("post", {"text": "harmless"}, id="c1"),
            call("post", {"text": "DROP everything"}, id="c2"),
        )

    runtime = await runtime_with(
        store, ledger, model=ScriptedModel(two_posts), max_parallel_calls=slots
    )
    session, turn_id = await park(runtime)
    if slots == 1:
        # one call at a time: the second asks only once the first has its answer
        assert [r.call_id for r in await session.pending()] == ["c1"]
        await session.resume(turn_id, "approve", True, by="U1")
        second = await next_park(session, turn_id)
        assert (second.request.id, second.request.call_id) == ("approve@c2", "c2")
        assert ledger.posted == ["harmless"]
    else:
        # both ask at once, each under an id of its own; an answer settles its own call
        pending = await session.pending()
        assert [(r.id, r.call_id) for r in pending] == [("approve", "c1"), ("approve@c2", "c2")]
        await session.resume(turn_id, "approve", True, by="U1")
        assert [r.id for r in await session.pending()] == ["approve@c2"]
        assert ledger.posted == []  # the turn waits for the other answer first
    await session.resume(turn_id, "approve@c2", False, by="U1")
    assert (await next_ending(session, turn_id)).text == "both handled"
    assert ledger.posted == ["harmless"]
    await runtime.close()


async def test_a_start_cancelled_by_its_caller_is_admitted_and_never_runs_behind_a_park(
    sqlite_store,
):
    release = asyncio.Event()
    ledger = Ledger()
    post = gated_post_tool(ledger, release)
    runtime = await runtime_with(sqlite_store, ledger, tools=[post])
    session = runtime.session("a", "s1")
    first = await session.start(speaker_input("first"))
    busy = asyncio.ensure_future(sqlite_store._run(lambda conn: time.sleep(0.2)))
    await asyncio.sleep(0.01)
    late = asyncio.ensure_future(session.start(speaker_input("second")))
    await asyncio.sleep(0.02)
    late.cancel()  # an HTTP handler timed out while the write was queued
    with pytest.raises(asyncio.CancelledError):
        await late
    await busy
    release.set()
    assert isinstance(await session.result(first), Suspended)
    await asyncio.sleep(0.05)
    stored = await sqlite_store.load(SessionKey("a", "s1"))
    assert [t.status for t in sorted(stored.turns.values(), key=lambda t: t.seq)] == [
        "suspended",
        "queued",  # admitted all the same, and waiting behind the park
    ]
    await runtime.close()


async def test_a_resume_cancelled_by_its_caller_still_runs_the_answered_turn(sqlite_store):
    ledger = Ledger()
    runtime = await runtime_with(sqlite_store, ledger)
    session, turn_id = await park(runtime)
    commit = sqlite_store.commit
    writing = asyncio.Event()

    async def slow_commit(key: SessionKey, change: Commit) -> None:
        writing.set()
        await asyncio.sleep(0.2)  # the click's caller leaves while its answer is written
        await commit(key, change)

    sqlite_store.commit = slow_commit
    click = asyncio.ensure_future(session.resume(turn_id, "approve", True, by="U1"))
    await writing.wait()
    click.cancel()
    with pytest.raises(asyncio.CancelledError):
        await click
    sqlite_store.commit = commit
    assert (await next_ending(session, turn_id)).text == "done: {'posted': True}"
    await runtime.close()


async def test_who_answered_and_how_is_told_only_to_those_who_could_have(store):
    runtime = await runtime_with(store, Ledger())
    session, turn_id = await park(runtime)
    await session.resume(turn_id, "approve", True, by="U1")
    await next_ending(session, turn_id)

    with pytest.raises(ResumeConflictError) as stranger:
        await session.resume(turn_id, "approve", False, by="U-stranger")
    assert "U1" not in str(stranger.value)
    assert "True" not in str(stranger.value)
    with pytest.raises(ResumeConflictError, match="already answered by U1: True"):
        await session.resume(turn_id, "approve", False, by="U1")
    await runtime.close()


async def test_an_answer_after_the_deadline_is_refused_and_the_request_expires(store):
    now = {"t": 1_000_000.0}
    ledger = Ledger()
    runtime = await runtime_with(store, ledger, ask={"ttl": 60})
    runtime.clock = lambda: now["t"]
    session, turn_id = await park(runtime)
    now["t"] += 3600  # the click comes an hour late; no timer has fired yet
    with pytest.raises(ResumeConflictError, match="already expired") as late:
        await session.resume(turn_id, "approve", True, by="U1")
    assert late.value.expired  # a surface can say so, and show the turn that goes on
    assert (await next_ending(session, turn_id)).text == (
        "done: {'posted': False, 'expired': True}"
    )
    assert ledger.posted == []
    await runtime.close()


async def test_a_park_raised_inside_a_task_group_still_parks(store):
    ledger = Ledger()
    inner = post_tool(ledger)

    @tool
    async def post(text: str, ctx: ToolContext) -> dict[str, Any]:
        """Post a message once a person approves it."""
        async with asyncio.TaskGroup() as group:
            asking = group.create_task(inner.fn(text, ctx))
        return asking.result()  # type: ignore[no-any-return]

    runtime = await runtime_with(store, ledger, tools=[post])
    session, turn_id = await park(runtime)
    await session.resume(turn_id, "approve", True, by="U1")
    assert (await next_ending(session, turn_id)).text == "done: {'posted': True}"
    await runtime.close()


async def test_a_resume_racing_close_is_applied_and_runs_at_the_next_start(sqlite_store):
    ledger = Ledger()
    runtime = await runtime_with(sqlite_store, ledger)
    session, turn_id = await park(runtime)
    resuming = asyncio.ensure_future(session.resume(turn_id, "approve", True, by="U1"))
    await asyncio.sleep(0)
    await runtime.close()
    await resuming  # stored, not an error: the caller must not think it was lost

    again = await runtime_with(sqlite_store, ledger)
    assert (await again.session("a", "s1").result(turn_id)).text == "done: {'posted': True}"
    await again.close()


async def test_a_grant_answers_only_for_the_resumer_it_was_made_for(store):
    async def authorize(check: AnswerCheck) -> bool:
        return check.by == "U-ops"

    runtime = await runtime_with(
        store, Ledger(), ask={"answerers": {"policy": "operator"}}, authorize_answer=authorize
    )
    session, turn_id = await park(runtime)
    granted = await grant_answer(session, turn_id=turn_id, input_id="approve", by="U-ops")
    with pytest.raises(ResumeAuthorizationError):
        await session.resume(turn_id, "approve", True, by="U-intern", granted=granted)
    await session.resume(turn_id, "approve", True, by="U-ops", granted=granted)
    await runtime.close()


@pytest.mark.parametrize(
    "answerers", [{"user": None}, {"user": ""}, {"policy": None}, {"policy": "x", "scope": 0}]
)
async def test_malformed_answerers_are_refused_not_guessed(store, answerers):
    ledger = Ledger()
    runtime = await runtime_with(store, ledger, ask={"answerers": answerers})
    done = await runtime.session("a", "s1").turn(speaker_input())
    assert "answerers must be" in done.text  # the tool's error, read by the model
    assert ledger.posted == []
    await runtime.close()


async def test_a_replica_sees_a_park_another_process_answered(tmp_path):
    path = tmp_path / "s.db"
    ledger = Ledger()
    stores = [await SQLiteStore.open(path), await SQLiteStore.open(path)]
    answering = await runtime_with(stores[0], ledger)
    session, turn_id = await park(answering)
    stale = await runtime_with(stores[1], ledger)
    replica = stale.session("a", "s1")
    assert await replica.status() == "suspended"  # loaded while parked

    await session.resume(turn_id, "approve", True, by="U1")
    await next_ending(session, turn_id)
    assert await replica.start(speaker_input("next one")) != turn_id  # not refused
    await answering.close()
    await stale.close()
    for opened in stores:
        await opened.close()
