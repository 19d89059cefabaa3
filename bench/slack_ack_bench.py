"""How long a signed Slack event waits for its HTTP ack, 50 at once and one at a time.

Run it as a command (not a test)::

    python -m bench.slack_ack_bench            # full run, about 10 s on 2 cores
    python -m bench.slack_ack_bench --quick    # a short, noisier run

What it measures
    Slack retries an event that is not acknowledged within 3 seconds, so the
    ack must not wait for the turn. The app under test is the one the tests
    build (``tests/bot/test_slack_app.py``): the real aiohttp server
    (`bot.slack.http.web_app`) with the real Bolt app behind it, whose
    listener hands the event to `bot.slack.channel.SlackChannel`; turns run in
    the real engine (`AgentRuntime` on `SQLiteStore`, a temporary file, WAL,
    ``synchronous=FULL``) with a scripted model that answers one short line;
    replies go through the app's own Web API client (`bot.slack.run.slack_client`)
    to a local fake of Slack's Web API (`tests.fakes.slack_api.FakeSlack`),
    where they stream into each event's thread.

    Every event is an ``app_mention`` at the top of a channel (a new thread,
    so a new session and a new turn each), its JSON body signed with the
    signing secret as Slack signs it (`SignatureVerifier.generate_signature`).
    Body and signature are made before the clock starts.

    1. Concurrent: a round is 50 such events POSTed at once over one aiohttp
       session whose connector allows 100 connections (kept alive between
       rounds, so connection set-up is not in the figures). Each event's ack
       is timed from just before its POST to its response status, which must
       be 200. A round ends when ``FakeSlack.wait_for_replies`` has seen all
       50 replies finished in their threads, each with the text it should
       have. Each round posts in a channel of its own, so the fake's
       per-channel scans stay short.
    2. One at a time: after each round, 3 events posted alone, each waiting
       for its reply before the next: the ack with nothing else in flight.
    3. Cold: one warm-up round of 50 runs first, on the freshly started app
       (Bolt's lazy ``auth.test``, the client's connections, SQLite's first
       pages). It is reported on a line of its own, not in the figures above.

    "Event to reply" runs from the same start as the ack to the fake's own
    ``time.monotonic()`` stamp of the last call that wrote the reply message
    (``chat.stopStream``, as the reply streams). The replies are awaited one
    after another, after the acks: 50 concurrent ``wait_for_replies`` loops
    (each polls every 10 ms, and a poll scans the channel) would take a good
    share of the event loop from the replies they time.

    Everything (client, app, engine, fake Slack) shares one process and one
    event loop, as in the tests: the client's 50 POSTs and the 150 Web API
    calls of the replies compete with the acks for the same loop. A real
    deployment has a TLS proxy and a real network in front, which add to the
    figures here, and a real Slack answers ``auth.test`` in tens to hundreds of
    milliseconds, not one.

How to read it
    The target is Slack's: an ack within 3 s. ``p99 / limit`` is the fraction
    of that budget the 99th percentile ack uses; a ``MISS`` is reported, never
    an error (the exit status is 0 whatever the figures). "Event to reply" is
    printed so you can see that the ack does not wait for the turn: the reply
    lands well after the ack, and the report counts any that landed first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web
from slack_bolt.version import __version__ as bolt_version
from slack_sdk.signature import SignatureVerifier

from agent import Agent, AgentRuntime, ModelReply, ModelRequest, SQLiteStore, UserMessage
from agent.testing import ScriptedModel, reply
from bot.settings import Settings
from bot.slack.app import bolt_app
from bot.slack.channel import SlackChannel
from bot.slack.http import web_app
from bot.slack.run import slack_client
from tests.fakes.local_server import serve_locally
from tests.fakes.slack_api import FakeSlack

AGENT = "bench"
SECRET = "bench-signing-secret"
CONCURRENT = 50
SINGLES_PER_ROUND = 3
SLACK_ACK_LIMIT = 3.0
"""Seconds Slack waits for the ack before it retries the event."""
REPLY_WITHIN = 60.0
"""Seconds an event's reply may take before the run is called broken."""
DRAIN_GRACE = 5.0
PREFIX = "ack bench: "


def script(request: ModelRequest) -> ModelReply:
    """Answer with one short line that names the question (so each reply can be checked)."""
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return reply(f"{PREFIX}{last.text}")


# -- statistics ----------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Median, p90, p99 and max of some samples, in milliseconds."""

    median: float
    p90: float
    p99: float
    max: float
    n: int

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Spread:
        """Summarise ``seconds`` in milliseconds."""
        values = [s * 1e3 for s in seconds]
        if len(values) < 2:
            only = values[0] if values else float("nan")
            return cls(only, only, only, only, len(values))
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        return cls(statistics.median(values), cuts[89], cuts[98], max(values), len(values))


@dataclass
class Results:
    """Every sample, in seconds."""

    ack: list[float] = field(default_factory=list)
    to_reply: list[float] = field(default_factory=list)
    single_ack: list[float] = field(default_factory=list)
    single_to_reply: list[float] = field(default_factory=list)
    cold_ack: list[float] = field(default_factory=list)
    """The warm-up round's acks: the first burst a freshly started app takes."""
    cold_auth_tests: int = 0
    """``auth.test`` calls Bolt made during the warm-up round."""


# -- the app under test --------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One signed event, ready to POST: the clock starts after it is made."""

    channel: str
    ts: str
    question: str
    body: str
    headers: dict[str, str]


@dataclass(frozen=True)
class Sent:
    """An event that was acknowledged: when it was POSTed and how long its ack took."""

    event: Event
    started: float
    """``time.monotonic()`` just before the POST (the fake stamps its calls with it too)."""
    acked: float


@dataclass
class Bench:
    """The served app, the fake Slack it answers in, and the client that plays Slack."""

    slack: FakeSlack
    url: str
    http: aiohttp.ClientSession
    _verifier: SignatureVerifier = field(default_factory=lambda: SignatureVerifier(SECRET))
    _count: int = 0

    def channel(self, channel_id: str) -> str:
        """A new public channel that the person and the bot are in."""
        self.slack.add_channel(channel_id, members=[self.slack.user_id])
        return channel_id

    def event(self, channel: str) -> Event:
        """A new top-level mention of the bot in ``channel``, signed as Slack signs it."""
        slack = self.slack
        self._count += 1
        question = f"question {self._count}"
        text = f"<@{slack.bot_user_id}> {question}"
        ts = slack.post_user_message(channel, text)
        envelope = {
            "type": "event_callback",
            "team_id": slack.team_id,
            "api_app_id": slack.app_id,
            "event_id": f"EvBENCH{self._count:06d}",
            "event_time": int(time.time()),
            "event": {
                "type": "app_mention",
                "user": slack.user_id,
                "text": text,
                "ts": ts,
                "channel": channel,
                "team": slack.team_id,
            },
        }
        body = json.dumps(envelope)
        stamp = str(int(time.time()))
        signature = self._verifier.generate_signature(timestamp=stamp, body=body)
        assert signature is not None
        headers = {
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature,
            "Content-Type": "application/json",
        }
        return Event(channel, ts, question, body, headers)

    async def post(self, event: Event) -> Sent:
        """POST ``event`` as Slack does; it must be answered 200."""
        started = time.monotonic()
        async with self.http.post(
            f"{self.url}/slack/events", data=event.body, headers=event.headers
        ) as response:
            acked = time.monotonic() - started
            status = response.status
            await response.read()
        if status != 200:
            raise SystemExit(f"event {event.ts} was answered {status}, not 200")
        return Sent(event, started, acked)

    async def replies(self, sent: Sequence[Sent], since: int) -> list[float]:
        """Seconds from each event's POST until its reply was finished in the fake Slack.

        Waits for every reply (one poller at a time) and checks its text; the time
        is the fake's own stamp of the last call that wrote the reply message
        (``chat.stopStream`` when it streamed), among the calls from ``since`` on.
        """
        reply_ts: list[str] = []
        for one in sent:
            event = one.event
            try:
                found = await self.slack.wait_for_replies(
                    event.channel, event.ts, within=REPLY_WITHIN
                )
            except AssertionError as exc:
                raise SystemExit(f"event {event.ts} got no reply: {exc}") from None
            if [m.text for m in found] != [f"{PREFIX}{event.question}"]:
                raise SystemExit(f"event {event.ts} got {[m.text for m in found]}")
            reply_ts.append(found[0].ts)
        written: dict[tuple[str, str], float] = {}
        for call in self.slack.calls[since:]:
            ts = call.params.get("ts") or call.response.get("ts")
            if call.ok and isinstance(ts, str):
                key = (str(call.params.get("channel")), ts)
                written[key] = max(written.get(key, call.at), call.at)
        return [
            written[(one.event.channel, ts)] - one.started
            for one, ts in zip(sent, reply_ts, strict=True)
        ]


@contextlib.asynccontextmanager
async def serving(folder: Path, n: int) -> AsyncIterator[Bench]:
    """The app as the tests build it, served on 127.0.0.1; everything closed afterwards.

    The client may open ``2 * n`` connections (at least 100), so no POST waits for one.
    """
    connector = aiohttp.TCPConnector(limit=max(100, 2 * n))
    async with (
        FakeSlack() as slack,
        aiohttp.ClientSession(connector=connector) as http,
        aiohttp.ClientSession() as app_http,  # the app's own, as `python -m bot` shares one
    ):
        store = await SQLiteStore.open(folder / "bot.db")
        runtime = AgentRuntime(store, Agent(name=AGENT, model=ScriptedModel(script)))
        channel: SlackChannel | None = None
        runner: web.AppRunner | None = None
        try:
            await runtime.start()
            client = slack_client(
                Settings(slack_bot_token=slack.token, slack_api_url=slack.base_url, _env_file=None),
                app_http,
            )
            channel = SlackChannel(runtime, AGENT, client, bot_user_id=slack.bot_user_id)
            runner, url = await serve_locally(web_app(bolt_app(channel, client, SECRET), SECRET))
            yield Bench(slack, url, http)
        finally:
            if runner is not None:
                await runner.cleanup()
            if channel is not None:
                await channel.drain(grace=DRAIN_GRACE)
            await runtime.close()
            await store.close()


# -- the measurements ----------------------------------------------------------


async def concurrent_round(bench: Bench, channel: str, n: int) -> tuple[list[float], list[float]]:
    """``n`` events at once; their ack times and event-to-reply times, in seconds."""
    events = [bench.event(channel) for _ in range(n)]
    since = len(bench.slack.calls)
    sent = await asyncio.gather(*(bench.post(event) for event in events))
    return [one.acked for one in sent], await bench.replies(sent, since)


async def lone_event(bench: Bench, channel: str) -> tuple[float, float]:
    """One event with nothing else in flight; its ack time and event-to-reply time."""
    since = len(bench.slack.calls)
    sent = await bench.post(bench.event(channel))
    [replied] = await bench.replies([sent], since)
    return sent.acked, replied


async def measure(bench: Bench, rounds: int, n: int, out: Results) -> None:
    """A warm-up round (kept apart: a cold app), then ``rounds`` rounds, each with lone events."""
    started = time.monotonic()
    out.cold_ack, _ = await concurrent_round(bench, bench.channel("C0WARMUP"), n)
    out.cold_auth_tests = len(bench.slack.calls_to("auth.test"))
    for _ in range(SINGLES_PER_ROUND):
        await lone_event(bench, "C0WARMUP")
    for r in range(rounds):
        channel = bench.channel(f"C0ROUND{r:03d}")
        gc.collect()
        acks, replies = await concurrent_round(bench, channel, n)
        out.ack += acks
        out.to_reply += replies
        for _ in range(SINGLES_PER_ROUND):
            ack, replied = await lone_event(bench, channel)
            out.single_ack.append(ack)
            out.single_to_reply.append(replied)
        ack_ms, reply_ms = Spread.of(acks), Spread.of(replies)
        sys.stderr.write(
            f"[{time.monotonic() - started:5.1f} s] round {r + 1}/{rounds}: "
            f"ack median {ack_ms.median:.1f} ms, max {ack_ms.max:.1f} ms; "
            f"reply median {reply_ms.median:.0f} ms, max {reply_ms.max:.0f} ms\n"
        )
        sys.stderr.flush()


# -- the report ----------------------------------------------------------------


def _row(label: str, spread: Spread) -> str:
    cells = "".join(f"{v:>9.1f}" for v in (spread.median, spread.p90, spread.p99, spread.max))
    return f"  {label:<36}{spread.n:>7}{cells}"


def report(out: Results, rounds: int, n: int, seconds: float) -> str:
    """The results as a table, with Slack's 3 s limit as the target."""
    ack = Spread.of(out.ack)
    ratio = ack.p99 / (SLACK_ACK_LIMIT * 1e3)
    mark = "PASS" if ratio <= 1.0 else "MISS"
    single = Spread.of(out.single_ack)
    before = sum(
        1
        for acked, replied in zip(
            out.ack + out.single_ack, out.to_reply + out.single_to_reply, strict=True
        )
        if replied <= acked
    )
    total = len(out.ack) + len(out.single_ack)
    lines = [
        f"slack_ack_bench: {n} concurrent signed app_mention events per round, "
        f"{rounds} rounds (+1 warm-up); {SINGLES_PER_ROUND} lone events after each round",
        "  real aiohttp server + Bolt app + SlackChannel + engine on SQLite (WAL, FULL);"
        " replies to a local fake Slack",
        f"  Python {platform.python_version()}, aiohttp {aiohttp.__version__}, "
        f"slack_bolt {bolt_version}, {os.cpu_count()} CPUs, {seconds:.0f} s in all",
        "",
        f"{'ms':<38}{'n':>7}{'median':>9}{'p90':>9}{'p99':>9}{'max':>9}",
        _row(f"ack, {n} concurrent", ack),
        _row("ack, one at a time", single),
        _row(f"event to reply, {n} concurrent", Spread.of(out.to_reply)),
        _row("event to reply, one at a time", Spread.of(out.single_to_reply)),
        _row(f"ack, {n} concurrent, cold (warm-up)", Spread.of(out.cold_ack)),
        f"    cold: the app's first burst; Bolt called auth.test {out.cold_auth_tests} times in it",
        f"    replies that landed before their own ack: {before} of {total}",
        "",
        f"{'target':<38}{'measured':>16}   limit",
        f"  {'ack p99 (' + str(n) + ' concurrent) / Slack limit':<36}"
        f"{ack.p99:>10.1f} ms = {ratio:.3f}   <= 1 of {SLACK_ACK_LIMIT:.0f} s   {mark}",
        f"  (single-event ack median {single.median:.1f} ms; "
        f"concurrent p99 is {ack.p99 / single.median:.1f}x that)",
    ]
    return "\n".join(lines)


# -- entry point ---------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.slack_ack_bench",
        description="Time the HTTP ack of signed Slack events, 50 at once and one at a time.",
    )
    parser.add_argument("--rounds", type=int, help="concurrent rounds (default 20, quick 3)")
    parser.add_argument(
        "--events", type=int, default=CONCURRENT, help=f"events per round (default {CONCURRENT})"
    )
    parser.add_argument("--quick", action="store_true", help="a short, noisier run")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 20)
    if args.rounds < 1 or args.events < 1:
        parser.error("--rounds and --events must be at least 1")
    return args


async def run(args: argparse.Namespace) -> str:
    """Serve the app from a temporary folder, measure, and return the report."""
    started = time.monotonic()
    out = Results()
    with tempfile.TemporaryDirectory(prefix="slack_ack_bench-") as folder:
        async with serving(Path(folder), args.events) as bench:
            await measure(bench, args.rounds, args.events, out)
    return report(out, args.rounds, args.events, time.monotonic() - started)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; always 0, a miss is a finding."""
    print(asyncio.run(run(parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
