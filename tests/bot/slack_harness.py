"""The Slack app under test, served for real, with a fake Slack and a scripted model.

The app is the real aiohttp server with the real Bolt app behind it; its Web
API client is the real slack_sdk client, pointed at a local fake Slack.
Requests are signed with the signing secret exactly as Slack signs them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    EXPIRED,
    Agent,
    AgentRuntime,
    ModelReply,
    ModelRequest,
    SQLiteStore,
    TextDelta,
    ThinkingBlock,
    ToolContext,
    ToolMessage,
    TriggerMessage,
    UserMessage,
    delegate_tool,
    tool,
)
from agent.core.model import ModelStreamEvent
from agent.testing import ScriptedModel, call, reply
from bot.settings import Settings
from bot.slack.app import bolt_app
from bot.slack.channel import SlackChannel
from bot.slack.http import web_app
from bot.slack.run import slack_client
from bot.slack.tools import slack_tools
from bot.web.health import add_health_check
from tests.fakes.local_server import serve_locally
from tests.fakes.slack_api import FakeSlack, Message

SECRET = "test-signing-secret"
WAIT = 5.0
ASKING = "Approval needed:"
CHECKING_NOTE = "Reading the thread first, to see what was decided."
BOTH_NOTES = ("Reading the thread first.", "Then what #general said about it.")
QUICK = 0.5
"""Seconds the ``hurry`` tool's request waits for an answer."""


@tool
async def announce(text: str, ctx: ToolContext) -> dict[str, Any]:
    """Post an announcement once the person who asked approves it."""
    approved = await ctx.request_input(id="approve", prompt=f"Announce *{text}*?")
    return {"announced": approved is True}


@tool
async def hurry(ctx: ToolContext) -> dict[str, Any]:
    """Go ahead only if the person who asked says so quickly."""
    answer = await ctx.request_input(id="quick", prompt="Go ahead right now?", ttl=QUICK)
    return {"went_ahead": answer is True, "expired": answer is EXPIRED}


def helper_agent() -> Agent:
    """The agent the bot delegates to: it announces its task, once approved."""

    def helping(request: ModelRequest) -> Any:
        task, last = request.messages[0].text, request.messages[-1]
        done = [m for m in request.messages if isinstance(m, ToolMessage)]
        if task.endswith(" twice") and len(done) == 1:  # it asks a second time
            return reply("", call("announce", {"text": f"{task} again"}, id="h-again"))
        if isinstance(last, ToolMessage):
            return reply(f"helper: {'; '.join(str(m.result) for m in done)}")
        return reply("", call("announce", {"text": task}, id="h-announce"))

    return Agent(name="helper", model=ScriptedModel(helping), tools=[announce])


def answering(hold: asyncio.Event, held: asyncio.Event) -> Callable[[ModelRequest], Awaitable[Any]]:
    """The model: it echoes, calls ``announce`` when asked, and takes its time when told to."""

    async def answer(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, UserMessage | TriggerMessage) and "slowly" in last.text:
            held.set()
            await hold.wait()
        return _answer(request)

    return answer


def _answer(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        batch: list[ToolMessage] = []
        for message in reversed(request.messages):
            if not isinstance(message, ToolMessage):
                break
            batch.insert(0, message)
        return reply("done: " + "; ".join(str(m.result) for m in batch))
    text = last.text
    if "explode" in text:
        raise RuntimeError("the model's backend is down")
    if text == "announce it and hurry":  # two asking calls of one step; hurry's expires soon
        announce_it = call("announce", {"text": "it"}, id="c-announce")
        return reply("", announce_it, call("hurry", {}, id="c-hurry"))
    if text.startswith("announce both "):  # two calls of one step, each asking
        first, _, second = text.removeprefix("announce both ").partition(" and ")
        calls = [
            call("announce", {"text": first}, id="c-first"),
            call("announce", {"text": second}, id="c-second"),
        ]
        return reply("", *calls)
    if text.startswith("announce "):
        return reply("", call("announce", {"text": text.removeprefix("announce ")}))
    if text.startswith("delegate both "):  # two helpers at once, each a child turn
        first, _, second = text.removeprefix("delegate both ").partition(" and ")
        tasks = [("c-d1", first), ("c-d2", second)]
        return reply("", *(call("ask_helper", {"task": t}, id=c) for c, t in tasks))
    if text.startswith("delegate "):  # the helper agent does it, as a child turn
        return reply("", call("ask_helper", {"task": text.removeprefix("delegate ")}, id="c-d"))
    asks: dict[str, tuple[str, dict[str, Any]]] = {
        "hurry": ("hurry", {}),
        "read the channel I have open": ("read_channel", {}),
        "read the thread": ("read_thread", {}),
        "recall": ("recall", {}),
    }
    if text in asks:
        name, arguments = asks[text]
        return reply("", call(name, arguments))
    if text == "check the thread":  # as Claude writes between tool calls: a thinking block
        return reply("", call("read_thread", {}), thinking=CHECKING_NOTE)
    if text == "check the thread and #general":  # one step, two calls, a note before each
        notes = [ThinkingBlock(thinking=n, signature="scripted") for n in BOTH_NOTES]
        calls = [call("read_thread", {}), call("read_channel", {"channel": "#general"})]
        return ModelReply(content=(notes[0], calls[0], notes[1], calls[1]), stop_reason="tool_use")
    period = re.search(r"read_channel takes since=([0-9.]+)", text)
    if period:  # a schedule's seed: read the channel over the period it names
        return reply("", call("read_channel", {"channel": "C0GENERAL", "since": period[1]}))
    command, _, rest = text.partition(" ")
    if command == "remember":
        return reply("", call("remember", {"note": rest}))
    if command == "read":  # read <channel>
        return reply("", call("read_channel", {"channel": rest}))
    if command == "post":  # post <channel> <text>
        channel, _, words = rest.partition(" ")
        return reply("", call("post_message", {"channel": channel, "text": words}))
    return reply(f"you said: {text}")


class PausingModel:
    """The scripted model; a question asked "in two parts" pauses between them until ``hold``."""

    def __init__(self, inner: ScriptedModel, hold: asyncio.Event, held: asyncio.Event) -> None:
        self.inner, self.hold, self.held = inner, hold, held

    @property
    def requests(self) -> Any:
        return self.inner.requests

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        asked = [m for m in request.messages if isinstance(m, UserMessage | TriggerMessage)][-1]
        # "announce ... in two parts" first calls the tool; its continuation pauses
        calls_first = asked.text.startswith("announce") and request.messages[-1] is asked
        if "in two parts" not in asked.text or calls_first:
            async for event in self.inner.stream(request):
                yield event
            return
        self.inner.requests.append(request)
        yield TextDelta(text="Part one. ")
        self.held.set()
        await self.hold.wait()
        yield TextDelta(text="Part two.")
        yield reply("Part one. Part two.")


@dataclass
class Bot:
    slack: FakeSlack
    url: str
    http: aiohttp.ClientSession
    model: PausingModel
    runtime: AgentRuntime
    hold: asyncio.Event
    """Set it to let a question asked "slowly" be answered."""
    held: asyncio.Event
    """Set once the model holds a question asked "slowly"."""
    channel: SlackChannel
    client: AsyncWebClient

    def signed(self, body: str, *, at: float | None = None, secret: str = SECRET) -> dict[str, str]:
        stamp = str(int(at if at is not None else time.time()))
        signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
        assert signature is not None
        return {
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature,
            "Content-Type": "application/json",
        }

    async def deliver(self, envelope: dict[str, Any], **signing: Any) -> int:
        body = json.dumps(envelope)
        headers = self.signed(body, **signing)
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=headers) as r:
            return r.status

    def envelope(self, event_type: str, text: str, ts: str, **event: Any) -> dict[str, Any]:
        slack = self.slack
        inner = {
            "type": event_type,
            "user": slack.user_id,
            "text": text,
            "ts": ts,
            "channel": slack.channel_id,
            "team": slack.team_id,
            **event,
        }
        return {
            "type": "event_callback",
            "team_id": slack.team_id,
            "api_app_id": slack.app_id,
            "event_id": f"Ev{event_type}{ts}",
            "event_time": int(time.time()),
            "event": inner,
        }

    async def click(
        self, button: str, user: str, approval: Message, *, without: tuple[str, ...] = ()
    ) -> int:
        """A signed click on a button of ``approval``, as Slack posts it (less ``without``)."""
        [actions] = [b for b in approval.blocks if b["type"] == "actions"]
        [element] = [e for e in actions["elements"] if e["action_id"] == button]
        payload = {
            "type": "block_actions",
            "user": {"id": user, "team_id": self.slack.team_id},
            "team": {"id": self.slack.team_id},
            "api_app_id": self.slack.app_id,
            "container": {
                "type": "message",
                "message_ts": approval.ts,
                "channel_id": approval.channel,
                "is_ephemeral": False,
            },
            "channel": {"id": approval.channel},
            "message": {"ts": approval.ts, "thread_ts": approval.thread_ts, "text": approval.text},
            "actions": [
                {
                    "type": "button",
                    "action_id": button,
                    "block_id": actions["block_id"],
                    "value": element["value"],
                }
            ],
        }
        for key in without:
            del payload[key]
        body = urlencode({"payload": json.dumps(payload)})
        headers = self.signed(body) | {"Content-Type": "application/x-www-form-urlencoded"}
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=headers) as r:
            return r.status

    async def ephemerals_to(self, user: str, count: int = 1) -> list[str]:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            found = [e.text for e in self.slack.ephemerals if e.user == user]
            if len(found) >= count:
                return found
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {count} private messages to {user}")

    async def replies_in(self, thread_ts: str, count: int = 1) -> list[str]:
        """The words of a thread's replies, once there are ``count`` and they are written."""
        return [m.words for m in await self.written_replies(thread_ts, count)]

    async def written_replies(
        self,
        thread_ts: str,
        count: int = 1,
        *,
        channel: str | None = None,
        shown_by: SlackChannel | None = None,
    ) -> list[Message]:
        """A thread's replies, once there are ``count`` and they are written.

        A reply that is posted, not streamed, exists before its last update: it is
        written once the channel showing it (``shown_by``, this bot's by default)
        shows nothing more: every turn has ended or waits.
        """
        where = channel or self.slack.channel_id
        await self.slack.wait_for_replies(where, thread_ts, count)
        showing = shown_by or self.channel
        deadline = time.monotonic() + WAIT
        # the channel offers no event for "idle": its count of tasks is polled
        while showing.in_flight and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        return self.slack.replies(where, thread_ts)


@asynccontextmanager
async def running_bot(tmp_path: Path, **channel_options: Any) -> AsyncIterator[Bot]:
    """The app served on a local port, its client talking to a fresh fake Slack.

    ``channel_options`` go to the `SlackChannel` (``reply_retries``...).
    """
    hold, held = asyncio.Event(), asyncio.Event()
    model = PausingModel(ScriptedModel(answering(hold, held)), hold, held)
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        store = await SQLiteStore.open(tmp_path / "bot.db")
        client = slack_client(
            Settings(slack_bot_token=slack.token, slack_api_url=slack.base_url, _env_file=None)
        )
        tools = [announce, hurry, delegate_tool("helper"), *slack_tools(client)]
        agents = [Agent(name="bot", model=model, tools=tools), helper_agent()]
        runtime = AgentRuntime(store, agents)
        await runtime.start()
        channel = SlackChannel(
            runtime, "bot", client, bot_user_id=slack.bot_user_id, **channel_options
        )
        app = web_app(bolt_app(channel, client, SECRET), SECRET)
        add_health_check(app, store)  # as bot.serve composes it
        runner, url = await serve_locally(app)
        try:
            yield Bot(slack, url, http, model, runtime, hold, held, channel, client)
        finally:
            await runner.cleanup()
            await channel.drain(grace=1.0)
            channel.close()
            await runtime.close()
            await store.close()


async def ask_for_approval(bot: Bot, text: str = "announce the deploy") -> tuple[str, Message]:
    ts = bot.slack.post_user_message(bot.slack.channel_id, f"<@U0BOT> {text}")
    await bot.deliver(bot.envelope("app_mention", f"<@U0BOT> {text}", ts))
    return ts, await approval_in(bot.slack, ts)


async def approval_in(slack: FakeSlack, ts: str) -> Message:
    """The thread's request for an approval, once it is shown."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        asking = [m for m in slack.replies(slack.channel_id, ts) if m.text.startswith(ASKING)]
        if asking:
            [approval] = asking
            return approval
        await asyncio.sleep(0.01)
    raise AssertionError(f"no approval was asked for in {ts}")
