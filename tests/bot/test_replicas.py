"""Three ``python -m bot`` replicas on one PostgreSQL database, behind a round-robin proxy.

Slack's requests reach whichever replica the proxy picks, as behind a load
balancer. One replica is SIGKILLed in the middle of a turn: another takes the
session over at once (the dead one's liveness lock is gone from the database)
and finishes the same reply, once. One is SIGSTOPped: it keeps its sessions
until their leases run out, and writes nothing when it wakes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psycopg
import pytest
from aiohttp import web

from bot.texts import SUPERSEDED
from tests.bot.slack_harness import approval_in
from tests.bot.test_schedules import DAILY
from tests.bot.test_slack_process import (
    POSTED,
    POSTING,
    WAIT,
    Running,
    bot_process,
    free_port,
    last_reply_becomes,
    mention,
    post_click,
    post_signed,
    until,
)
from tests.bot.test_slack_schedules import clear_of_a_minute_boundary
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply
from tests.fakes.slack_api import FakeSlack, Message
from tests.postgres_server import PostgresServer

FINAL = "Noted: the deploy is at noon, and I will remember it."
LEASE_SECONDS = 10.0
"""Long beside the sweep: a dead replica is seen by its lock, not by its lease running out."""
SWEEP_SECONDS = 1.0
"""How often each replica's runtime looks for turns nobody runs (AgentRuntime's default)."""


@dataclass
class Proxy:
    """A round-robin proxy for ``POST /slack/events``, body and headers kept as they are."""

    ports: list[int]
    port: int = field(default_factory=free_port)
    sent_to: list[int] = field(default_factory=list)

    async def __aenter__(self) -> Proxy:
        turns = itertools.cycle(range(len(self.ports)))
        self._http = aiohttp.ClientSession()

        async def forward(request: web.Request) -> web.Response:
            body = await request.read()
            headers = {k: v for k, v in request.headers.items() if k.lower().startswith("x-slack")}
            headers["Content-Type"] = request.headers.get("Content-Type", "application/json")
            for _ in self.ports:  # a replica that is down is skipped, as a balancer would
                port = self.ports[next(turns)]
                try:
                    async with self._http.post(
                        f"http://127.0.0.1:{port}/slack/events",
                        data=body,
                        headers=headers,
                        timeout=aiohttp.ClientTimeout(total=3),
                    ) as r:
                        self.sent_to.append(port)
                        return web.Response(status=r.status, body=await r.read())
                except (aiohttp.ClientError, TimeoutError):
                    continue
            return web.Response(status=502)

        app = web.Application()
        app.router.add_post("/slack/events", forward)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._runner.cleanup()
        await self._http.close()


Replicas = Callable[..., Awaitable[list[Running]]]


@pytest.fixture
async def replicas(
    slack: FakeSlack, tmp_path: Path, postgres_url: str
) -> AsyncIterator[Callable[..., Awaitable[list[Running]]]]:
    started: list[Running] = []

    async def start(count: int, **extra: str) -> list[Running]:
        """Start ``count`` more replicas; return them once each serves."""
        new: list[Running] = []
        for _ in range(count):
            folder = tmp_path / f"replica{len(started)}"
            folder.mkdir()
            port = free_port()
            proc = await bot_process(
                slack,
                folder,
                port,
                stderr=asyncio.subprocess.STDOUT,
                **({"DATABASE_URL": postgres_url, "LEASE_SECONDS": str(LEASE_SECONDS)} | extra),
            )
            started.append(Running(proc, port))
            new.append(started[-1])
        for running in new:
            await running.line_starting("Serving Slack events on")
        return new

    try:
        yield start
    finally:
        for running in started:
            if running.proc.returncode is None:
                running.proc.send_signal(signal.SIGCONT)
                running.proc.kill()
                await running.proc.wait()
            await running.stopped()


def holder_pid(postgres_url: str, session_id: str) -> int | None:
    """The pid of the process holding the session's lease now (its holder is host:pid:tag#n)."""
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute(
            "SELECT holder, until FROM leases WHERE session_id = %s", (session_id,)
        ).fetchone()
    if row is None or row[1] < time.time():
        return None
    return int(row[0].split(":")[-2])


async def said_until(proc: asyncio.subprocess.Process, text: bytes) -> bytes:
    """What a process printed up to and with the first line holding ``text``."""
    assert proc.stdout is not None
    said = b""
    while text not in said:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
        assert line, said
        said += line
    return said


def rows(postgres_url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(postgres_url) as conn:
        return conn.execute(sql).fetchall()


def bot_replies(slack: FakeSlack, ts: str) -> list[Message]:
    return [m for m in slack.replies(slack.channel_id, ts) if m.user != slack.user_id]


async def reply_finished(slack: FakeSlack, ts: str) -> None:
    """Wait until the thread holds the whole final answer, its stream stopped."""
    await until(
        lambda: any(m.text == FINAL and m.stream == "stopped" for m in bot_replies(slack, ts)),
        lambda: f"the reply never finished: {bot_replies(slack, ts)}",
    )


async def streaming(slack: FakeSlack, ts: str) -> Message:
    """The thread's reply once it is being streamed, with words in it."""
    found: list[Message] = []

    def started() -> bool:
        found[:] = [m for m in bot_replies(slack, ts) if m.stream == "streaming" and m.text]
        return bool(found)

    await until(started, lambda: f"no reply streams: {bot_replies(slack, ts)}")
    return found[0]


async def test_a_replica_killed_mid_turn_is_taken_over_at_once_and_its_reply_posted_once(
    slack: FakeSlack, replicas: Replicas, postgres_url: str
):
    async with FakeAnthropic() as api:
        # a local tool step commits; then the owner's reply stalls, and it is killed there
        api.queue(
            Reply.tool("remember", {"note": "the deploy is at noon"}),
            Hang(Reply.text(FINAL), after_events=5),
            Reply.text(FINAL),
        )
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        running = await replicas(3, **claude)
        async with Proxy([r.port for r in running]) as proxy:
            ts, envelope = mention(slack, "remember that the deploy is at noon")
            session_id = f"slack:{slack.team_id}:{slack.channel_id}:{ts}"
            assert await post_signed(proxy.port, envelope) == 200
            await asyncio.wait_for(api.hung.wait(), WAIT)
            stale = await streaming(slack, ts)
            owner = holder_pid(postgres_url, session_id)
            assert owner in {r.proc.pid for r in running}

            os.kill(owner, signal.SIGKILL)
            killed = time.monotonic()
            await until(lambda: len(api.requests) == 3, "another replica asks the model again")
            taken_over_in = time.monotonic() - killed
            await reply_finished(slack, ts)

    # taken over as soon as a sweep looked (every second): the dead one's lock was gone, where
    # its lease had another ten seconds to run
    assert taken_over_in < SWEEP_SECONDS + 1.0, taken_over_in
    # the same message, finished by the replica that took over
    [reply] = [m for m in bot_replies(slack, ts) if m.stream is not None]
    assert (reply.ts, reply.text, reply.stream) == (stale.ts, FINAL, "stopped")
    # the local tool's row, written once; the turn completed once
    assert rows(postgres_url, "SELECT note FROM channel_notes") == [("the deploy is at noon",)]
    assert rows(postgres_url, "SELECT status FROM turns") == [("completed",)]


async def test_a_frozen_replica_loses_its_session_after_the_lease_and_writes_nothing_awake(
    slack: FakeSlack, replicas: Replicas, postgres_url: str
):
    woken = asyncio.Event()
    async with FakeAnthropic() as api:
        # the frozen owner's reply comes only once it is awake, after the takeover
        api.queue(
            Reply.tool("remember", {"note": "the deploy is at noon"}),
            Hang(Reply.text("A stale answer from a replica that froze."), 5, release=woken),
            Reply.text(FINAL),
        )
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        running = await replicas(3, LEASE_SECONDS="3", **claude)
        async with Proxy([r.port for r in running]) as proxy:
            ts, envelope = mention(slack, "remember that the deploy is at noon")
            session_id = f"slack:{slack.team_id}:{slack.channel_id}:{ts}"
            assert await post_signed(proxy.port, envelope) == 200
            await asyncio.wait_for(api.hung.wait(), WAIT)
            await streaming(slack, ts)
            owner = holder_pid(postgres_url, session_id)
            [frozen] = [r for r in running if r.proc.pid == owner]

            frozen.proc.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            await until(lambda: len(api.requests) == 3, "another replica takes the turn on")
            # alive to the database (its lock is held), it kept the session for its lease
            assert time.monotonic() - stopped >= 3.0 - 0.5
            await reply_finished(slack, ts)
            settled = rows(postgres_url, "SELECT idx, body FROM messages ORDER BY idx")

            frozen.proc.send_signal(signal.SIGCONT)
            woken.set()  # its model call answers now: it has a step to commit, and may not
            await frozen.line_with("took the session on")

    assert rows(postgres_url, "SELECT idx, body FROM messages ORDER BY idx") == settled
    assert rows(postgres_url, "SELECT status FROM turns") == [("completed",)]
    assert rows(postgres_url, "SELECT note FROM channel_notes") == [("the deploy is at noon",)]
    assert [m.text for m in bot_replies(slack, ts) if m.stream is not None] == [FINAL]


async def test_a_follow_up_that_reaches_another_replica_supersedes_the_reply_once(
    slack: FakeSlack, replicas: Replicas, postgres_url: str
):
    async with FakeAnthropic() as api:
        api.queue(Hang(Reply.text("A slow first answer."), 5), Reply.text("The second answer."))
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        running = await replicas(3, **claude)
        async with Proxy([r.port for r in running]) as proxy:
            ts, envelope = mention(slack, "what is the plan?")
            session_id = f"slack:{slack.team_id}:{slack.channel_id}:{ts}"
            assert await post_signed(proxy.port, envelope) == 200
            await asyncio.wait_for(api.hung.wait(), WAIT)
            first = await streaming(slack, ts)
            owner = holder_pid(postgres_url, session_id)
            owner_port = next(r.port for r in running if r.proc.pid == owner)

            _, follow_up = mention(slack, "actually, just the first step", thread_ts=ts)
            assert await post_signed(proxy.port, follow_up) == 200
            took = proxy.sent_to[-1]
            assert took != owner_port  # round robin: another replica got it
            [receiver] = [r for r in running if r.port == took]
            # it could not take the thread another replica writes: it handed the start over
            await receiver.line_with("was handed over")
            await until(
                lambda: any(m.text == "The second answer." for m in bot_replies(slack, ts)),
                lambda: f"the follow-up was never answered: {bot_replies(slack, ts)}",
            )

    streamed = [m for m in bot_replies(slack, ts) if m.stream is not None]
    assert streamed[0].ts == first.ts
    assert SUPERSEDED in streamed[0].text  # the stale reply says so, once
    assert [m.text for m in streamed].count("The second answer.") == 1
    assert rows(postgres_url, "SELECT status, cancel FROM turns ORDER BY seq") == [
        ("cancelled", "replaced"),
        ("completed", None),
    ]
    assert rows(postgres_url, "SELECT count(*) FROM inbox") == [(0,)]  # carried out, once


async def test_a_replica_starting_beside_a_live_one_leaves_its_replies_to_it(
    slack: FakeSlack, replicas: Replicas, postgres_url: str
):
    go_on = asyncio.Event()
    async with FakeAnthropic() as api:
        api.queue(Hang(Reply.text(FINAL), 5, release=go_on))
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        [first] = await replicas(1, **claude)
        ts, envelope = mention(slack, "remember that the deploy is at noon")
        assert await post_signed(first.port, envelope) == 200
        await asyncio.wait_for(api.hung.wait(), WAIT)
        stale = await streaming(slack, ts)

        # a deploy adds a replica while the first is in the middle of the reply
        [second] = await replicas(1, **claude)
        go_on.set()
        await reply_finished(slack, ts)

    assert [(m.ts, m.text) for m in bot_replies(slack, ts) if m.stream is not None] == [
        (stale.ts, FINAL)
    ]
    # it took up nothing at its start: the reply was the live replica's to finish
    assert not any("Taking up" in line or "taken over" in line for line in second.out)
    assert len(api.requests) == 1  # nobody ran the turn a second time


async def test_a_schedule_fired_by_three_replicas_in_one_minute_runs_and_posts_once(
    slack: FakeSlack, tmp_path: Path, postgres_url: str
):
    (tmp_path / "bot.toml").write_text(DAILY)
    release = asyncio.Event()
    async with FakeAnthropic() as api:
        api.queue(Hang(Reply.text("Today: the deploy moved to Friday."), 3, release=release))
        env = {
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": api.base_url,
            "BOT_CONFIG": str(tmp_path / "bot.toml"),
            "DATABASE_URL": postgres_url,
        }
        await clear_of_a_minute_boundary()  # the same minute's firing, in every replica
        firing = ("run-schedule", "daily")
        first = await bot_process(
            slack, tmp_path, free_port(), *firing, stderr=asyncio.subprocess.STDOUT, **env
        )
        await asyncio.wait_for(api.hung.wait(), WAIT)  # the first is answering
        others = [
            await bot_process(
                slack, tmp_path, free_port(), *firing, stderr=asyncio.subprocess.STDOUT, **env
            )
            for _ in range(2)
        ]
        early = [await said_until(p, b"is run by another process") for p in others]
        release.set()
        outputs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in (first, *others))), WAIT * 3
        )

    said = [out.decode() for out, _ in outputs]
    said[1:] = [before.decode() + rest for before, rest in zip(early, said[1:], strict=True)]
    assert [p.returncode for p in (first, *others)] == [0, 0, 0], said
    for text in said:
        assert "Schedule daily: its reply is in C0GENERAL" in text
        assert "Traceback" not in text
    top = [m.text for m in slack.messages(slack.channel_id) if m.thread_ts is None]
    assert top == ["Today: the deploy moved to Friday."]
    assert len(api.requests) == 1
    assert rows(postgres_url, "SELECT count(*), min(status) FROM turns") == [(1, "completed")]


async def test_an_approval_clicked_at_another_replica_resumes_the_turn_and_posts_once(
    slack: FakeSlack, replicas: Replicas, postgres_url: str
):
    slack.add_channel("C0RANDOM", members=[slack.user_id])
    async with FakeAnthropic() as api:
        api.queue(*POSTING)
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        running = await replicas(3, **claude)
        async with Proxy([r.port for r in running]) as proxy:
            ts, envelope = mention(slack, "tell #random the deploy is at noon")
            assert await post_signed(proxy.port, envelope) == 200
            approval = await approval_in(slack, ts)
            asked_at = proxy.sent_to[-1]

            clicked = post_click(proxy.port, "turn_approve", slack.user_id, approval, slack.team_id)
            assert await clicked == 200
            assert proxy.sent_to[-1] != asked_at  # the click reached another replica
            await last_reply_becomes(slack, ts, POSTED)

    assert [m.text for m in slack.messages("C0RANDOM")] == ["Deploy at noon."]
    decided = next(m for m in slack.replies(slack.channel_id, ts) if m.ts == approval.ts)
    assert f"Approved by <@{slack.user_id}>" in json.dumps(decided.blocks)
    assert len(api.requests) == 2
    assert [m.text for m in bot_replies(slack, ts)].count(POSTED) == 1


async def test_a_slack_retry_that_reaches_other_replicas_is_still_one_turn_and_one_reply(
    slack: FakeSlack, replicas: Replicas, postgres_url: str
):
    go_on = asyncio.Event()
    async with FakeAnthropic() as api:
        api.queue(Hang(Reply.text(FINAL), 5, release=go_on))
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        running = await replicas(3, **claude)
        async with Proxy([r.port for r in running]) as proxy:
            ts, envelope = mention(slack, "remember that the deploy is at noon")
            # Slack sends the event again when an answer is slow or lost: each copy
            # reaches the next replica
            statuses = await asyncio.gather(*(post_signed(proxy.port, envelope) for _ in range(3)))
            assert statuses == [200, 200, 200]
            assert len(set(proxy.sent_to[-3:])) == 3
            await asyncio.wait_for(api.hung.wait(), WAIT)
            go_on.set()
            await reply_finished(slack, ts)

    assert [m.text for m in bot_replies(slack, ts) if m.stream is not None] == [FINAL]
    assert rows(postgres_url, "SELECT count(*) FROM turns") == [(1,)]
    assert len(api.requests) == 1


async def test_a_deploys_sigterm_with_the_database_gone_stops_the_bot_inside_herokus_grace(
    slack: FakeSlack, tmp_path: Path, own_postgres_server: PostgresServer
):
    async with FakeAnthropic() as api:
        api.queue(Hang(Reply.text(FINAL), 5))
        port = free_port()
        proc = await bot_process(
            slack,
            tmp_path,
            port,
            stderr=asyncio.subprocess.STDOUT,
            DATABASE_URL=own_postgres_server.fresh_schema(),
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=api.base_url,
        )
        bot = Running(proc, port)
        await bot.line_starting("Serving Slack events on")
        _, envelope = mention(slack, "remember that the deploy is at noon")
        assert await post_signed(port, envelope) == 200
        await asyncio.wait_for(api.hung.wait(), WAIT)  # a turn is running, its lease held

        own_postgres_server.stop()  # the database goes away (a failover, an outage)
        proc.send_signal(signal.SIGTERM)
        # Heroku sends SIGKILL 30 s after SIGTERM: the bot is out long before
        assert await asyncio.wait_for(proc.wait(), 25) == 0
        await bot.stopped()
    assert not any("Traceback" in line for line in bot.out)
