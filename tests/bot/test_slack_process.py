"""``python -m bot`` with Slack credentials, as a real process: it serves, answers, and stops.

The bot runs as a child process on a real port; Slack's Web API is the local fake
(``SLACK_API_URL``); events are posted to it signed as Slack signs them. With no
Anthropic key the offline agent answers, which is still the whole engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from slack_sdk.signature import SignatureVerifier

from agent import SQLiteStore
from agent.core.records import SessionKey
from tests.bot.slack_harness import approval_in
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply
from tests.fakes.slack_api import FakeSlack, Message

ROOT = Path(__file__).resolve().parents[2]
SECRET = "process-test-signing-secret"
WAIT = 20.0


def free_port() -> int:
    """A port for a bot to listen on, kept out of the kernel's range for outgoing connections.

    A bot killed and started again listens on the same port, and in between any
    connection going out (to the fake Slack, say) may be given that very port if it
    lies in the ephemeral range, so the restart would fail with "address in use".
    """
    low, _high = _ephemeral_ports()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    raise AssertionError(f"no free port below {low}")


def _ephemeral_ports() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return int(low), int(high)


@dataclass
class Running:
    """A bot process, with every line it printed so far.

    Its output is read all the time: a pipe nobody reads fills up, and a bot that
    then writes a log line blocks in the middle of its work.
    """

    proc: asyncio.subprocess.Process
    port: int
    out: list[str] = field(default_factory=list)
    _grew: asyncio.Event = field(default_factory=asyncio.Event)
    _reading: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self._reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while raw := await self.proc.stdout.readline():
            self.out.append(raw.decode(errors="replace").rstrip("\n"))
            self._grew.set()
        self._grew.set()

    async def line_starting(self, prefix: str) -> str:
        return await self.line_where(lambda line: line.startswith(prefix), prefix)

    async def line_with(self, text: str) -> str:
        return await self.line_where(lambda line: text in line, text)

    async def line_where(self, matches: Callable[[str], bool], what: str) -> str:
        """The first line printed that ``matches``, waiting until it comes."""
        async with asyncio.timeout(WAIT):
            while True:
                self._grew.clear()
                for line in self.out:
                    if matches(line):
                        return line
                assert self._reading is not None
                if self._reading.done():
                    raise AssertionError(f"the bot ended without {what!r}: {self.out}")
                await self._grew.wait()

    async def stopped(self) -> None:
        """Wait for its output to end (the process has ended or closed it)."""
        assert self._reading is not None
        await self._reading


async def until(
    condition: Callable[[], Any], what: str | Callable[[], str], *, wait: float = WAIT
) -> None:
    """Poll ``condition`` (sync or async) until it holds; fail after ``wait`` naming ``what``
    (a callable is asked only then, so it can tell what there is instead)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        held = condition()
        if asyncio.iscoroutine(held):
            held = await held
        if held:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never: {what() if callable(what) else what}")


Launch = Callable[..., Awaitable[Running]]


async def bot_process(
    slack: FakeSlack,
    folder: Path,
    port: int,
    *args: str,
    stderr: int = asyncio.subprocess.PIPE,
    **extra: str | None,
) -> asyncio.subprocess.Process:
    """``python -m bot ARGS`` in ``folder``, on the fake Slack; ``extra`` sets (None unsets)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.base_url,
        "PORT": str(port),
        "DATABASE_URL": f"sqlite:///{folder}/bot.db",
    }
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env=env,
        cwd=folder,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )


@pytest.fixture
async def launch(slack: FakeSlack, tmp_path: Path) -> AsyncIterator[Launch]:
    """Start bot processes on one database and port; any left alive is killed at the end."""
    port = free_port()
    started: list[Running] = []

    async def start(*, ready: str = "Serving Slack events on", **extra: str | None) -> Running:
        proc = await bot_process(slack, tmp_path, port, stderr=asyncio.subprocess.STDOUT, **extra)
        running = Running(proc, port)
        started.append(running)
        await running.line_starting(ready)
        return running

    try:
        yield start
    finally:
        for running in started:
            if running.proc.returncode is None:
                running.proc.kill()
                await running.proc.wait()
            await running.stopped()


def mention(
    slack: FakeSlack, text: str, *, thread_ts: str | None = None
) -> tuple[str, dict[str, Any]]:
    """A person's mention in the fake Slack, and its event as Slack would deliver it."""
    said = f"<@U0BOT> {text}"
    ts = slack.post_user_message(slack.channel_id, said, thread_ts=thread_ts)
    event = {
        "type": "app_mention",
        "user": slack.user_id,
        "text": said,
        "ts": ts,
        "channel": slack.channel_id,
        "team": slack.team_id,
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return ts, {
        "type": "event_callback",
        "team_id": slack.team_id,
        "event_id": f"Ev{ts}",
        "event": event,
    }


async def post_signed(port: int, envelope: dict[str, Any]) -> int:
    """An Events API envelope, signed and posted to the bot on ``port``."""
    return await post_body(port, json.dumps(envelope), "application/json")


async def post_body(port: int, body: str, content_type: str) -> int:
    """``body`` signed as Slack signs it, posted to the bot's ``/slack/events``."""
    status, _, _ = await signed_post(port, body, content_type)
    return status


async def signed_post(port: int, body: str, content_type: str) -> tuple[int, str, str]:
    """``body`` signed and posted as Slack does: the answer's status, text and content type."""
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=stamp, body=body)
    assert signature is not None
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature,
        "Content-Type": content_type,
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}/slack/events", data=body, headers=headers) as r,
    ):
        return r.status, await r.text(), r.content_type


async def test_the_bot_process_answers_a_mention_and_stops_cleanly_on_sigterm(
    slack: FakeSlack, launch: Launch
):
    bot = await launch()
    ts, envelope = mention(slack, "the deploy moved to Friday")

    assert await post_signed(bot.port, envelope) == 200

    [answer] = [m.text for m in await slack.wait_for_replies(slack.channel_id, ts, within=WAIT)]
    assert "notebook holds 1 note(s)" in answer
    began = time.monotonic()
    bot.proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(10):
        code = await bot.proc.wait()
    assert code == 0
    assert time.monotonic() - began < 10
    await bot.line_starting("Stopping: no new events")
    assert slack.token not in "\n".join(bot.out)


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
async def test_a_bot_stopped_mid_reply_finishes_the_same_message_at_its_next_start(
    slack: FakeSlack, launch: Launch, stop: signal.Signals, tmp_path: Path
):
    full = "The deploy moved to Friday at noon, after the freeze."
    async with FakeAnthropic() as api:
        # the first process gets a reply that stalls after its first words; the next, all of it
        api.queue(Hang(Reply.text(full), after_events=5), Reply.text(full))
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        first = await launch(**claude)
        ts, envelope = mention(slack, "when is the deploy?")
        await post_signed(first.port, envelope)
        await asyncio.wait_for(api.hung.wait(), WAIT)
        [stale] = await _streaming_reply(slack, ts)
        # stopped once the bot has kept which message it is writing: a kill between Slack
        # opening the stream and that commit is another window (the next start posts anew)
        await _kept_reply(tmp_path / "bot.db", slack, ts, stale.ts)

        began = time.monotonic()
        first.proc.send_signal(stop)
        code = await first.proc.wait()
        if stop == signal.SIGTERM:  # a deploy: out within 10 s, the turn left to resume
            assert (code, time.monotonic() - began < 10) == (0, True)
        second = await launch(**claude)

        await second.line_starting("Resumed 1 unfinished turn(s)")
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            replies = slack.replies(slack.channel_id, ts)
            if replies and replies[-1].text == full:
                break
            await asyncio.sleep(0.02)
        assert [(m.ts, m.text) for m in slack.replies(slack.channel_id, ts)] == [(stale.ts, full)]
        assert len(api.requests) == 2


async def _kept_reply(db: Path, slack: FakeSlack, ts: str, reply_ts: str) -> None:
    """Wait until the bot's store holds that it is writing ``reply_ts`` for the turn of ``ts``."""
    key = SessionKey("bot", f"slack:{slack.team_id}:{slack.channel_id}:{ts}")
    turn_id = f"{slack.team_id}:{slack.channel_id}:{ts}"
    store = await SQLiteStore.open(db)
    try:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            kept = await store.load_delivery(key, turn_id)
            if isinstance(kept, dict) and kept.get("reply") == reply_ts:
                return
            await asyncio.sleep(0.01)
    finally:
        await store.close()
    raise AssertionError(f"the bot never kept reply {reply_ts} of {turn_id}")


async def _streaming_reply(slack: FakeSlack, ts: str) -> list[Message]:
    """The thread's streamed replies once one of them is being streamed.

    The message holding the turn's Stop button, posted beside it, is not streamed.
    """
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        replies = [m for m in slack.replies(slack.channel_id, ts) if m.stream is not None]
        if any(m.stream == "streaming" and m.text for m in replies):
            return replies
        await asyncio.sleep(0.01)
    raise AssertionError(f"no reply started streaming: {slack.replies(slack.channel_id, ts)}")


async def test_a_token_slack_refuses_stops_the_bot_at_start_naming_it(
    slack: FakeSlack, tmp_path: Path
):
    wrong = "xoxb-not-the-right-token"
    proc = await bot_process(slack, tmp_path, free_port(), SLACK_BOT_TOKEN=wrong)
    out, err = await asyncio.wait_for(proc.communicate(), WAIT)

    assert proc.returncode == 2
    said = (out + err).decode()
    assert "Slack refused SLACK_BOT_TOKEN (invalid_auth)" in said
    assert wrong not in said
    assert "Traceback" not in said


async def post_click(port: int, button: str, user: str, approval: Message, team: str) -> int:
    """A signed click on ``button`` of ``approval``, form-encoded as Slack posts it."""
    body = urlencode({"payload": json.dumps(click(button, user, approval, team))})
    return await post_body(port, body, "application/x-www-form-urlencoded")


def click(button: str, user: str, approval: Message, team: str) -> dict[str, Any]:
    """The ``block_actions`` payload of a click on ``button`` of ``approval``."""
    [actions] = [b for b in approval.blocks if b["type"] == "actions"]
    [element] = [e for e in actions["elements"] if e["action_id"] == button]
    return {
        "type": "block_actions",
        "user": {"id": user, "team_id": team},
        "team": {"id": team},
        "container": {"type": "message", "message_ts": approval.ts, "channel_id": approval.channel},
        "channel": {"id": approval.channel},
        "message": {"ts": approval.ts, "thread_ts": approval.thread_ts, "text": approval.text},
        "actions": [{"type": "button", "action_id": button, "value": element["value"]}],
    }


POSTED = "Posted it to <#C0RANDOM>."
POSTING = (
    Reply.tool("post_message", {"channel": "C0RANDOM", "text": "Deploy at noon."}),
    Reply.text(POSTED),
)
"""Claude's side of a turn that posts to #random once it is approved."""


async def last_reply_becomes(slack: FakeSlack, ts: str, text: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        said = [m.text for m in slack.replies(slack.channel_id, ts)]
        if said and said[-1] == text:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the thread's last reply never became {text!r}: {said}")


async def test_an_approval_clicked_after_a_restart_resumes_the_turn_and_posts_once(
    slack: FakeSlack, launch: Launch
):
    slack.add_channel("C0RANDOM", members=[slack.user_id])
    async with FakeAnthropic() as api:
        api.queue(*POSTING)
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        first = await launch(**claude)
        ts, envelope = mention(slack, "tell #random the deploy is at noon")
        await post_signed(first.port, envelope)
        approval = await approval_in(slack, ts)
        first.proc.send_signal(signal.SIGTERM)  # a deploy, days before anyone clicks
        assert await first.proc.wait() == 0
        second = await launch(**claude)

        assert (
            await post_click(second.port, "turn_approve", slack.user_id, approval, slack.team_id)
            == 200
        )

        await last_reply_becomes(slack, ts, POSTED)
        assert [m.text for m in slack.messages("C0RANDOM")] == ["Deploy at noon."]
        decided = next(m for m in slack.replies(slack.channel_id, ts) if m.ts == approval.ts)
        assert f"Approved by <@{slack.user_id}>" in json.dumps(decided.blocks)
        assert len(api.requests) == 2


async def test_in_socket_mode_events_and_clicks_come_over_the_socket_and_are_acked(
    slack: FakeSlack, launch: Launch
):
    slack.add_channel("C0RANDOM", members=[slack.user_id])
    async with FakeAnthropic() as api:
        api.queue(*POSTING)
        await launch(
            ready="Connected to Slack in Socket Mode.",
            SLACK_APP_TOKEN=slack.app_token,
            SLACK_SIGNING_SECRET=None,  # no public URL, no signature: the socket is attested
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=api.base_url,
        )
        sockets = slack.socket_mode
        ts, envelope = mention(slack, "tell #random the deploy is at noon")

        first = await sockets.push("events_api", envelope)
        retried = await sockets.push("events_api", envelope, retry_attempt=1)

        assert await sockets.ack_of(first) == {"envelope_id": first}
        assert await sockets.ack_of(retried) == {"envelope_id": retried}
        approval = await approval_in(slack, ts)

        clicked = await sockets.push(
            "interactive", click("turn_approve", slack.user_id, approval, slack.team_id)
        )

        assert (await sockets.ack_of(clicked))["envelope_id"] == clicked
        await last_reply_becomes(slack, ts, POSTED)
        assert [m.text for m in slack.messages("C0RANDOM")] == ["Deploy at noon."]
        assert len(api.requests) == 2  # the retried envelope made no second turn


@pytest.mark.parametrize("socket_mode", [False, True], ids=["http", "socket-mode"])
async def test_the_bot_process_answers_its_health_check_on_port_in_either_mode(
    slack: FakeSlack, launch: Launch, socket_mode: bool
):
    if socket_mode:  # no event comes over HTTP: the port serves the health check alone
        bot = await launch(
            ready="Serving the health check on",
            SLACK_APP_TOKEN=slack.app_token,
            SLACK_SIGNING_SECRET=None,
        )
    else:
        bot = await launch()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{bot.port}/healthz") as r:
            health = (r.status, await r.text())
        async with http.get(f"http://127.0.0.1:{bot.port}/api/info") as r:
            api = r.status

    assert health == (200, "ok")
    assert api == 404  # no API_TOKENS: no console, no API
    if socket_mode:
        await bot.line_starting("Connected to Slack in Socket Mode.")
        assert not any("Serving Slack events" in line for line in bot.out)


async def test_the_api_and_console_are_served_beside_slack_only_with_tokens(
    slack: FakeSlack, launch: Launch
):
    token = "ops-token-0123456789abcdef0123"
    without = await launch()
    async with aiohttp.ClientSession() as http, FakeAnthropic() as claude_api:
        async with http.get(f"http://127.0.0.1:{without.port}/api/info") as r:
            closed = r.status
        without.proc.send_signal(signal.SIGTERM)
        await without.proc.wait()

        claude_api.queue(Reply.text("Noted for the console."), Reply.text("Noted in Slack."))
        bot = await launch(
            API_TOKENS=json.dumps({token: "ops"}),
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=claude_api.base_url,
        )
        await bot.line_starting("Serving the web console and the API on")
        base = f"http://127.0.0.1:{bot.port}"
        auth = {"Authorization": f"Bearer {token}"}
        async with http.get(base + "/api/info") as r:
            anonymous = r.status
        async with http.post(
            base + "/api/sessions/ops/turns",
            json={"text": "the runbook is in the wiki"},
            headers=auth,
        ) as r:
            answered = await r.json()
        ts, envelope = mention(slack, "the deploy moved to Friday")
        assert await post_signed(bot.port, envelope) == 200
        await slack.wait_for_replies(slack.channel_id, ts, within=WAIT)
        async with http.get(base + "/api/sessions", headers=auth) as r:
            listed = await r.json()
    from_api, from_slack = claude_api.requests

    assert closed == 404
    assert any("set API_TOKENS" in line for line in without.out)
    assert anonymous == 401
    assert answered == {
        "turn_id": answered["turn_id"],
        "status": "completed",
        "text": "Noted for the console.",
    }
    # an API turn is not in a Slack thread: the tool that reads one is not offered there
    assert "read_thread" not in [t["name"] for t in from_api["tools"]]
    assert "read_thread" in [t["name"] for t in from_slack["tools"]]
    # the API sees its own sessions, never a Slack thread's
    assert [s["session"] for s in listed["sessions"]] == ["ops"]


async def test_on_its_default_settings_the_bot_answers_slack_and_the_console_as_claude_allows(
    slack: FakeSlack, launch: Launch
):
    token = "ops-token-0123456789abcdef0123"
    note = {"type": "thinking", "thinking": "Saving it to the notes.", "signature": "sig-n"}

    def noting(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]["content"][0]
        if last["type"] == "tool_result":
            return Reply.text("Noted.")
        call = {"type": "tool_use", "id": f"toolu_{len(body['messages'])}", "name": "remember"}
        return Reply([note, {**call, "input": {"note": last["text"]}}], stop_reason="tool_use")

    async with aiohttp.ClientSession() as http, FakeAnthropic(noting) as claude_api:
        # nothing but a key: the model, thinking and effort are the bot's defaults
        bot = await launch(
            API_TOKENS=json.dumps({token: "ops"}),
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=claude_api.base_url,
        )
        auth = {"Authorization": f"Bearer {token}"}
        async with http.post(
            f"http://127.0.0.1:{bot.port}/api/sessions/ops/turns",
            json={"text": "the runbook is in the wiki"},
            headers=auth,
        ) as r:
            console = await r.json()
        ts, envelope = mention(slack, "the deploy moved to Friday")
        assert await post_signed(bot.port, envelope) == 200
        [answer] = await slack.wait_for_replies(slack.channel_id, ts, within=WAIT)

    assert [r["path"] for r in claude_api.models_requests] == ["/v1/models/claude-sonnet-5-5"]
    assert console["text"] == "Noted."
    assert answer.text == "Noted."
    requests = claude_api.requests
    assert len(requests) == len(claude_api.usages) == 4  # each one answered: none refused
    for body in requests:
        assert body["model"] == "claude-sonnet-5-5"
        assert body["thinking"] == {"type": "between_tools"}
        assert not {"output_config", "temperature", "top_p", "top_k", "tool_choice"} & set(body)
    # the note Claude wrote before its tool call went back unchanged, and Slack showed it
    assert [r["messages"][1]["content"][0] for r in (requests[1], requests[3])] == [note] * 2
    [task] = answer.tasks.values()
    assert (task["title"], task["details"]) == ("remember", note["thinking"])
    assert claude_api.dropped_thinking == []
