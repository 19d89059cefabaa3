"""The HTTP API over real HTTP: turns as JSON and as SSE, answers, cancel, reset, catch-up."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from agent import (
    OUTPUT_TOOL,
    AnswerCheck,
    SQLiteStore,
    StoreError,
    ToolContext,
    tool,
)
from agent.core.records import SessionKey
from agent.errors import ModelError
from agent.testing import ScriptedModel, call, reply
from bot.offline import NOTING_NOTE
from tests.bot.web_harness import ANA, BOB, TOKENS, serving

KEY = SessionKey("bot", "http:s1")


async def test_a_turn_streams_its_events_with_ids_until_it_ends(tmp_path):
    async with serving(tmp_path) as served:
        client = served.client()
        async with client.stream(
            "POST", "/api/sessions/s1/turns", {"text": "water the plants"}
        ) as sse:
            events = await sse.until("turn.completed")
            after_end = await sse.response.content.read()

    assert after_end == b""  # the stream ends with the turn
    types = [e.event for e in events]
    assert types[0] == "turn.started"
    assert [t for t in types if not t.endswith(".delta")] == [
        "turn.started",
        "message.completed",
        "action.requested",
        "action.completed",
        "message.completed",
        "turn.completed",
    ]
    assert "message.delta" in types
    assert "reasoning.delta" in types  # the demonstration writes a note before its tool call
    assert all(e.id for e in events)  # ids on every event, deltas included
    logged = [int(e.id) for e in events if e.id and "." not in e.id]
    assert logged == [1, 2, 3, 4, 5, 6]
    first_delta = next(e for e in events if e.event.endswith(".delta"))
    assert first_delta.id == "1.2"  # after position 1, the second event of the turn's run
    [action] = [e for e in events if e.event == "action.requested"]
    assert action.data["name"] == "remember"
    assert action.data["input"] == {"note": "water the plants"}
    completed = [e for e in events if e.event == "message.completed"]
    assert completed[0].data["text"].startswith("(Offline demo model, not Claude")
    assert events[-1].data["text"].startswith("Noted: the notebook holds 1 note(s).")


async def test_a_json_turn_waits_and_the_same_turn_id_replays_rather_than_runs_again(tmp_path):
    async with serving(tmp_path) as served:
        client = served.client()
        body = {"text": "buy milk", "turn_id": "t-1"}
        status, first = await client.post("/api/sessions/s1/turns", body)
        status_again, again = await client.post("/api/sessions/s1/turns", body)
        _, session = await client.get("/api/sessions/s1")
        _, transcript = await client.get("/api/sessions/s1/transcript")
        _, listed = await client.get("/api/sessions")
        admitted = await client.post("/api/sessions/s2/turns", {"text": "later", "wait": False})
        await served.runtime.session("bot", "http:s2").result(admitted[1]["turn_id"])

    assert (status, status_again) == (200, 200)
    assert first == {
        "turn_id": "t-1",
        "status": "completed",
        "text": "Noted: the notebook holds 1 note(s). "
        "Say “share …” to try an approval, or ask “what do you remember?”.",
    }
    assert again == first  # one note: the retried request did not run the tool again
    assert session["status"] == "idle"
    assert session["turns"] == [
        {
            "turn_id": "t-1",
            "seq": 1,
            "status": "completed",
            "text": "buy milk",
            "by": "local",
            "retry_of": None,
            "steering": [],
        }
    ]
    assert session["pending"] is None
    assert session["last_event_id"] == 6
    assert admitted[0] == 202  # admitted, not awaited: its events come on /events
    assert admitted[1]["status"] in {"queued", "running"}
    roles = [m["role"] for m in transcript["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert transcript["messages"][0] == {
        "role": "user",
        "turn_id": "t-1",
        "text": "buy milk",
        "user": "local",
    }
    assert transcript["messages"][1]["tool_calls"][0]["name"] == "remember"
    # the note the model wrote before its call goes with the call, not as other progress
    assert transcript["messages"][1]["tool_calls"][0]["note"] == NOTING_NOTE
    assert transcript["messages"][1]["progress"] == []
    assert transcript["messages"][2]["result"] == {"notes": 1}
    assert listed["sessions"] == [
        {
            "session": "s1",
            "status": "idle",
            "title": "buy milk",
            "updated_at": listed["sessions"][0]["updated_at"],
            "last_event_id": 6,
        }
    ]


async def test_only_the_speaker_answers_a_parked_turn_and_a_wrong_answer_is_refused(tmp_path):
    async with serving(tmp_path, tokens=TOKENS) as served:
        ana, bob = served.client(ANA), served.client(BOB)
        status, parked = await ana.post("/api/sessions/s1/turns", {"text": "share the plan"})
        turn_id = parked["turn_id"]
        resume = f"/api/sessions/s1/turns/{turn_id}/resume"

        refused = await bob.post(resume, {"input_id": "share", "value": True})
        wrong_id = await ana.post(resume, {"input_id": "approve", "value": True})
        wrong_value = await ana.post(resume, {"input_id": "share", "value": "yes please"})
        busy = await ana.post("/api/sessions/s1/turns", {"text": "another thing"})
        _, waiting = await ana.get("/api/sessions/s1")

        since = str(waiting["last_event_id"])
        async with ana.stream(
            "GET", "/api/sessions/s1/events", headers={"Last-Event-ID": since}
        ) as sse:
            accepted = await ana.post(resume, {"input_id": "share", "value": True})
            rest = await sse.until("turn.completed")
        twice = await ana.post(resume, {"input_id": "share", "value": False})
        _, done = await ana.get("/api/sessions/s1")

    assert status == 200
    assert parked["status"] == "suspended"
    assert parked["request"]["id"] == "share"
    assert parked["request"]["prompt"].startswith("Share this note? “share the plan”")
    assert refused[0] == 403
    assert refused[1]["error"]["code"] == "forbidden"
    assert wrong_id[0] == 409
    assert "waits for 'share', not 'approve'" in wrong_id[1]["error"]["message"]
    assert wrong_value[0] == 400
    assert busy[0] == 409  # the session waits for the answer first
    assert busy[1]["error"]["code"] == "waiting_for_answer"
    assert waiting["status"] == "suspended"
    assert waiting["pending"]["turn_id"] == turn_id
    assert waiting["pending"]["id"] == "share"
    assert waiting["turns"][0]["by"] == "ana"
    assert since == "7"  # its last event is input.requested
    assert accepted == (202, {"turn_id": turn_id, "input_id": "share", "accepted": True})
    assert rest[0].event == "turn.started"
    assert rest[0].data["trigger"] == "resume"
    assert rest[-1].data["text"].startswith("Shared")
    assert twice[0] == 409
    assert "already" in twice[1]["error"]["message"]
    assert done["status"] == "idle"
    assert done["pending"] is None


async def test_tokens_are_required_and_checked(tmp_path):
    async with serving(tmp_path, tokens=TOKENS) as served:
        nobody = await served.client().get("/api/info")
        forged = await served.client("not-a-token-0123456789abcd").get("/api/info")
        _, ana = await served.client(ANA).get("/api/info")

    assert nobody[0] == 401
    assert "Authorization: Bearer" in nobody[1]["error"]["message"]
    assert forged[0] == 401
    assert ana == {
        "agent": "bot",
        "model": "offline demo model",
        "offline": True,
        "principal": "ana",
        "auth": "token",
    }


async def test_the_local_api_refuses_other_hosts_and_non_json_writes(tmp_path):
    async with serving(tmp_path) as served:
        client = served.client()
        rebound = await client.get("/api/info", Host="evil.example:3000")
        async with served.http.post(
            served.base_url + "/api/sessions/s1/turns",
            data='{"text": "hi"}',
            headers={"Content-Type": "text/plain"},
        ) as r:
            form_post = (r.status, await r.json())
        local = await client.get("/api/info", Host="localhost:3000")

    assert rebound[0] == 403
    assert form_post[0] == 415
    assert local[0] == 200
    assert local[1]["principal"] == "local"


async def test_bad_bodies_get_a_400_naming_the_field(tmp_path):
    async with serving(tmp_path) as served:
        client = served.client()
        missing = await client.post("/api/sessions/s1/turns", {})
        empty = await client.post("/api/sessions/s1/turns", {"text": ""})
        bad_id = await client.post("/api/sessions/s1/turns", {"text": "x", "turn_id": "a b"})
        extra = await client.post("/api/sessions/s1/turns", {"text": "x", "urgent": True})
        no_value = await client.post("/api/sessions/s1/turns/t/resume", {"input_id": "x"})
        async with served.http.post(
            served.base_url + "/api/sessions/s1/turns",
            data="{not json",
            headers={"Content-Type": "application/json"},
        ) as r:
            not_json = (r.status, await r.json())
        bad_session = await client.get("/api/sessions/has%20space")
        bad_after = await client.get("/api/sessions/s1/events?after=later")

    assert missing[0] == 400
    assert missing[1]["error"]["field"] == "text"
    assert empty[1]["error"]["field"] == "text"
    assert bad_id[1]["error"]["field"] == "turn_id"
    assert extra[1]["error"]["field"] == "urgent"
    assert no_value[0] == 400
    assert no_value[1]["error"]["field"] == "value"
    assert not_json[0] == 400
    assert not_json[1]["error"]["message"] == "the body must be a JSON object"
    assert bad_session[0] == 404
    assert bad_after[0] == 400
    assert bad_after[1]["error"]["field"] == "after"


async def test_a_failing_authorize_answer_is_a_500_and_the_answer_stays_unapplied(tmp_path):
    outage = {"on": True}

    async def authorize(check: AnswerCheck) -> bool:
        if outage["on"]:
            raise ConnectionError("directory unreachable")
        return check.by == "ana"

    @tool
    async def deploy(ctx: ToolContext) -> str:
        """Deploy once on-call agrees."""
        agreed = await ctx.request_input(
            id="go", prompt="Deploy?", answerers={"policy": "oncall"}, schema={"type": "boolean"}
        )
        return "deployed" if agreed is True else "held"

    model = ScriptedModel(
        lambda r: reply("ok") if len(r.messages) > 1 else reply("", call("deploy"))
    )
    async with serving(
        tmp_path, model=model, tools=[deploy], tokens=TOKENS, authorize_answer=authorize
    ) as served:
        ana = served.client(ANA)
        _, parked = await ana.post("/api/sessions/s1/turns", {"text": "ship it"})
        resume = f"/api/sessions/s1/turns/{parked['turn_id']}/resume"
        failed = await ana.post(resume, {"input_id": "go", "value": True})
        _, still = await ana.get("/api/sessions/s1")
        outage["on"] = False
        refused = await served.client(BOB).post(resume, {"input_id": "go", "value": True})
        accepted = await ana.post(resume, {"input_id": "go", "value": True})
        result = await served.runtime.session("bot", "http:s1").result(parked["turn_id"])

    assert failed[0] == 500
    assert failed[1]["error"]["code"] == "answer_not_applied"
    assert still["status"] == "suspended"
    assert refused[0] == 403
    assert accepted[0] == 202
    assert result.text == "ok"


async def test_a_failed_turn_is_retried_over_the_api_and_a_completed_one_refused(tmp_path):
    tries: list[str] = []

    def script(request):
        tries.append(request.turn_id)
        if request.turn_id == "t-1":
            raise ModelError("the model is down", retryable=False)
        return reply(f"answered {request.messages[0].text}")

    async with serving(tmp_path, model=ScriptedModel(script), tools=[]) as served:
        client = served.client()
        status, failed = await client.post(
            "/api/sessions/s1/turns", {"text": "hello", "turn_id": "t-1"}
        )
        retried = await client.post("/api/sessions/s1/turns/t-1/retry")
        new_id = retried[1]["turn_id"]
        done = await served.runtime.session("bot", "http:s1").result(new_id)
        refused = await client.post(f"/api/sessions/s1/turns/{new_id}/retry")
        unknown = await client.post("/api/sessions/s1/turns/nope/retry")
        _, described = await client.get("/api/sessions/s1")

    assert (status, failed["status"]) == (200, "failed")
    assert retried[0] == 202
    assert retried[1]["retry_of"] == "t-1"
    assert retried[1]["status"] in {"queued", "running", "completed"}
    assert done.text == "answered hello"
    assert tries == ["t-1", new_id]
    assert refused[0] == 409
    assert "send its input again" in refused[1]["error"]["message"]
    assert unknown[0] == 404
    assert [(t["turn_id"], t["status"], t["retry_of"]) for t in described["turns"]] == [
        ("t-1", "failed", None),
        (new_id, "completed", "t-1"),
    ]
    # why it failed, as its turn.failed said, for a console that reloads to word it
    assert (described["turns"][0]["error"], described["turns"][0]["phase"]) == (
        failed["error"],
        "model",
    )
    assert "error" not in described["turns"][1]


class Verdict(BaseModel):
    """Whether the deploy may go ahead."""

    go: bool


async def test_a_turn_of_an_agent_with_a_result_type_answers_its_output(tmp_path):
    def script(request):
        if request.messages[0].text == "bad":
            return reply("", call(OUTPUT_TOOL, {"go": "perhaps"}))
        return reply("Go ahead.", call(OUTPUT_TOOL, {"go": True}))

    model = ScriptedModel(script)
    async with serving(tmp_path, model=model, tools=[], output_type=Verdict) as served:
        client = served.client()
        good = await client.post("/api/sessions/s1/turns", {"text": "deploy?"})
        bad = await client.post("/api/sessions/s2/turns", {"text": "bad"})

    assert good == (
        200,
        {
            "turn_id": good[1]["turn_id"],
            "status": "completed",
            "text": "Go ahead.",
            "output": {"go": True},
        },
    )
    assert (bad[0], bad[1]["status"], bad[1]["phase"]) == (200, "failed", "output")
    assert "go: Input should be a valid boolean" in bad[1]["error"]


async def test_a_running_turn_is_steered_over_the_api_and_a_steer_with_none_refused(tmp_path):
    in_tool, tool_may_finish = asyncio.Event(), asyncio.Event()

    @tool
    async def look(ctx: ToolContext) -> str:
        """Look around."""
        in_tool.set()
        await tool_may_finish.wait()
        return "looked"

    def script(request):
        last = request.messages[-1]
        if getattr(last, "steer", False):
            return reply(f"steered by {last.text} from {last.user}")
        if last.text == "look":
            return reply("", call("look", id="c1"))
        return reply("no steer seen")

    async with serving(
        tmp_path, model=ScriptedModel(script), tools=[look], tokens=TOKENS
    ) as served:
        client = served.client(ANA)
        await client.post(
            "/api/sessions/s1/turns", {"text": "look", "turn_id": "t-1", "wait": False}
        )
        await asyncio.wait_for(in_tool.wait(), 10)
        body = {"text": "only the kitchen", "steer_id": "st-1"}
        steered = await client.post("/api/sessions/s1/steer", body)
        again = await client.post("/api/sessions/s1/steer", body)
        tool_may_finish.set()
        done = await served.runtime.session("bot", "http:s1").result("t-1")
        late = await client.post("/api/sessions/s1/steer", {"text": "too late"})
        empty = await client.post("/api/sessions/s1/steer", {"text": ""})
        _, described = await client.get("/api/sessions/s1")

    assert steered == (202, {"turn_id": "t-1", "steer_id": "st-1"})
    assert again == steered  # the same steer id stores nothing more
    assert done.text == "steered by only the kitchen from ana"
    assert late[0] == 409
    assert "no turn" in late[1]["error"]["message"]
    assert (empty[0], empty[1]["error"]["field"]) == (400, "text")
    [turn] = described["turns"]
    assert [(s["steer_id"], s["text"], s["by"]) for s in turn["steering"]] == [
        ("st-1", "only the kitchen", "ana")
    ]


async def test_a_running_turn_is_cancelled_and_a_reset_archives_the_session(tmp_path):
    release = asyncio.Event()

    async def script(request):
        if request.messages[-1].text == "slow":
            await release.wait()
        return reply("answered")

    async with serving(tmp_path, model=ScriptedModel(script), tools=[]) as served:
        client = served.client()
        await client.post("/api/sessions/s1/turns", {"text": "first"})
        async with client.stream(
            "POST", "/api/sessions/s1/turns", {"text": "slow", "turn_id": "slow-1"}
        ) as sse:
            await sse.until("turn.started")
            cancelled = await client.post("/api/sessions/s1/turns/slow-1/cancel")
            ending = await sse.until("turn.cancelled")
        again = await client.post("/api/sessions/s1/turns/slow-1/cancel")
        unknown = await client.post("/api/sessions/s1/turns/nope/cancel")
        _, before_reset = await client.get("/api/sessions/s1")
        reset = await client.post("/api/sessions/s1/reset")
        _, after_reset = await client.get("/api/sessions/s1")
        _, transcript = await client.get("/api/sessions/s1/transcript")
        archive = await served.runtime.session("bot", "http:s1").archived(0)
        release.set()

    assert cancelled == (200, {"turn_id": "slow-1", "cancelled": True})
    assert ending[-1].data["reason"] == "requested"
    assert again == (200, {"turn_id": "slow-1", "cancelled": False})
    assert unknown[0] == 404
    assert [t["status"] for t in before_reset["turns"]] == ["completed", "cancelled"]
    assert reset == (200, {"previous_session": "http:s1#g0", "generation": 1})
    assert after_reset["status"] == "new"
    assert after_reset["turns"] == []
    assert transcript["messages"] == []
    assert archive is not None
    assert [m.turn_id for m in archive.transcript][:1] == [before_reset["turns"][0]["turn_id"]]


async def test_a_client_that_reconnects_mid_turn_gets_every_logged_event_exactly_once(tmp_path):
    gate, tool_running = asyncio.Event(), asyncio.Event()

    @tool
    async def fetch_report(ctx: ToolContext) -> str:
        """Fetch the report."""
        tool_running.set()
        await gate.wait()
        return "the report"

    def script(request):
        if len(request.messages) == 1:
            return reply("Fetching the report now.", call("fetch_report"))
        return reply("Here is the report, summed up in a few words.")

    async with serving(tmp_path, model=ScriptedModel(script, chunk=5), tools=[fetch_report]) as s:
        client = s.client()
        async with client.stream("GET", "/api/sessions/s1/events") as sse:
            turn = asyncio.create_task(client.post("/api/sessions/s1/turns", {"text": "report"}))
            first = [await sse.next()]  # turn.started
            first.append(await sse.next())  # the first delta: then the connection drops
        await tool_running.wait()  # while nobody is connected
        await s.log.flush()
        assert (await s.store.event_bounds(KEY)).last == 3
        last_seen = str(first[-1].id)
        async with client.stream(
            "GET", "/api/sessions/s1/events", headers={"Last-Event-ID": last_seen}
        ) as sse:
            caught_up = [await sse.next(), await sse.next()]
            gate.set()  # what follows happens while this connection is open
            second = caught_up + await sse.until("turn.completed")
        await turn
        logged = [p for p, _ in await s.store.read_events(KEY, after=0, limit=99)]

    seen = [int(e.id) for e in first + second if e.id and "." not in e.id]
    assert last_seen == "1.2"
    assert seen == logged  # every committed event once, across both connections
    assert len(seen) == len(set(seen))
    assert [e.event for e in caught_up] == ["message.completed", "action.requested"]
    live_deltas = [e for e in second if e.event == "message.delta"]
    assert "".join(e.data["text"] for e in live_deltas) == (
        "Here is the report, summed up in a few words."
    )
    assert all(e.id.startswith("4.") for e in live_deltas)  # after action.completed, 4


async def test_a_client_behind_the_retention_is_told_of_the_gap_and_gets_what_is_kept(tmp_path):
    now = [1_000_000.0]
    async with serving(tmp_path, clock=lambda: now[0], retention=3600) as served:
        client = served.client()
        await client.post("/api/sessions/s1/turns", {"text": "old note"})
        await served.log.flush()
        now[0] += 7200
        await client.post("/api/sessions/s1/turns", {"text": "new note"})
        await served.log.flush()
        pruned = await served.log.prune()
        async with client.stream("GET", "/api/sessions/s1/events?after=2") as sse:
            gap = await sse.next()
            kept = await sse.until("turn.completed")

    assert pruned == 6
    assert gap.event == "gap"
    assert gap.id is None
    assert gap.data == {"after": 2, "first_kept": 7}
    assert [int(e.id) for e in kept if e.id and "." not in e.id] == [7, 8, 9, 10, 11, 12]


async def test_the_console_page_is_served_at_the_root(tmp_path):
    async with serving(tmp_path) as served:
        async with served.http.get(served.base_url + "/") as r:
            page = await r.text()
            headers = r.headers
        async with served.http.get(served.base_url + "/api/nothing-here") as r:
            missing = (r.status, await r.json())

    assert "<title>" in page
    assert headers["Content-Type"].startswith("text/html")
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert missing[0] == 404
    assert missing[1]["error"]["code"] == "not_found"


async def test_a_client_gone_mid_stream_leaves_the_server_serving(tmp_path):
    async with serving(tmp_path) as served:
        client = served.client()
        for _ in range(3):
            async with client.stream("GET", "/api/sessions/s1/events") as sse:
                sse.response.close()
        status, done = await client.post("/api/sessions/s1/turns", {"text": "still here"})
    assert status == 200
    assert done["status"] == "completed"


async def test_a_stream_ends_with_the_turn_even_when_the_log_dropped_its_last_event(tmp_path):
    class LogFailsAfterStart(SQLiteStore):
        async def append_events(self, key, bodies, *, at):
            if any(body["type"] != "turn.started" for body in bodies):
                raise StoreError("SQLite: disk I/O error")
            return await super().append_events(key, bodies, at=at)

    async with serving(tmp_path, store_class=LogFailsAfterStart, tools=[]) as served:
        client = served.client()
        async with client.stream("POST", "/api/sessions/s1/turns", {"text": "hi"}) as sse:
            # live deltas after turn.started may reach it or not, as the turn outruns the
            # stream: they carry no position of their own
            events = [e for e in await sse.until("turn.completed") if not e.event.endswith("delta")]
            rest = await sse.response.content.read()

    assert [e.event for e in events] == ["turn.started", "turn.completed"]
    assert events[0].id == "1"
    assert events[1].id is None  # told from the committed turn, not from the log
    assert rest == b""


async def test_a_stream_whose_store_fails_mid_way_ends_rather_than_hangs(tmp_path):
    class ReadsFail(SQLiteStore):
        reads = 0

        async def read_events(self, key, *, after, limit):
            ReadsFail.reads += 1
            if ReadsFail.reads > 2:
                raise StoreError("SQLite: disk I/O error")
            return await super().read_events(key, after=after, limit=limit)

    async with (
        serving(tmp_path, store_class=ReadsFail) as served,
        served.client().stream("GET", "/api/sessions/s1/events") as sse,
        asyncio.timeout(5),
    ):
        rest = await sse.response.content.read()  # a poll's read fails: the stream ends

    assert rest == b"retry: 1000\n\n"  # then nothing, and the end: the client reconnects


async def test_a_retried_stream_for_a_known_turn_tells_its_story_and_ends(tmp_path):
    async with serving(tmp_path) as served:
        client = served.client()
        body = {"text": "share the plan", "turn_id": "t-1"}
        _, parked = await client.post("/api/sessions/s1/turns", body)
        resume = "/api/sessions/s1/turns/t-1/resume"
        await client.post(resume, {"input_id": "share", "value": True})
        await served.runtime.session("bot", "http:s1").result("t-1")
        async with client.stream("POST", "/api/sessions/s1/turns", body) as sse:
            retold = await sse.until("turn.completed")
        await client.post("/api/sessions/s1/reset")
        archived = await client.post(
            "/api/sessions/s1/turns", body, headers={"Accept": "text/event-stream"}
        )

    assert parked["status"] == "suspended"
    assert retold[-1].data["text"].startswith("Shared")  # not the park it once was
    assert archived[0] == 404


async def test_a_follower_is_let_go_soon_after_its_client_leaves(tmp_path):
    async with serving(tmp_path) as served:
        async with served.client().stream("GET", "/api/sessions/s1/events"):
            async with asyncio.timeout(5):
                while served.log.followers(KEY) == 0:  # noqa: ASYNC110 - a count, no event
                    await asyncio.sleep(0.01)
        async with asyncio.timeout(5):
            while served.log.followers(KEY):  # noqa: ASYNC110 - the client left: gone at a poll
                await asyncio.sleep(0.01)

    assert served.log.followers(KEY) == 0


async def test_a_body_over_the_limit_is_refused(tmp_path):
    async with serving(tmp_path) as served:
        status, body = await served.client().post("/api/sessions/s1/turns", {"text": "x" * 300_000})
    assert status == 413
    assert body["error"]["code"] == "too_large"


async def test_a_stream_still_open_when_the_server_stops_ends_with_it(tmp_path, caplog):
    # a log that would keep a follower waiting for half a minute between two looks
    async with serving(tmp_path, poll_seconds=30.0) as served:
        async with served.http.get(served.base_url + "/api/sessions/s1/events") as response:
            assert response.status == 200
            await served.runner.cleanup()  # the server stops while the stream is open
            rest = await asyncio.wait_for(response.content.read(), 10)
        api = served.api

    assert api.stopping.is_set()
    assert b"event: " not in rest  # it ended, nothing more to tell
    errors = [r for r in caplog.records if r.name == "aiohttp.server" and r.levelno >= 40]
    assert errors == []  # aiohttp fails finishing a handler that outlived its shutdown


async def test_a_stream_whose_handler_is_cancelled_lets_its_follower_go():
    from bot.web.api.streams import following

    closed = asyncio.Event()

    class QuietLog:
        async def follow(self, key, *, after=0):
            try:
                while True:
                    await asyncio.sleep(30)  # a long poll: the cancel lands in it
                    yield None
            finally:
                closed.set()

    api = type("Api", (), {"log": QuietLog(), "stopping": asyncio.Event()})()

    async def consume():
        async for _ in following(api, KEY, 0):
            pass

    handler = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    handler.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handler  # cancelled as asked, not a RuntimeError from closing a running generator
    await asyncio.wait_for(closed.wait(), 5)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert left == []
