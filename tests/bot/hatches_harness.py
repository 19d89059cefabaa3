"""The Slack app under test with request kinds beyond yes / no, and a fake Slack with modals.

`ModalSlack` is the fake Slack plus ``views.open``, as docs.slack.dev/reference/
methods/views.open describes it: it exchanges a ``trigger_id`` once (again:
``exchanged_trigger_id``; not of the form ``123.456.abc``: ``invalid_trigger_id``;
past its 3 seconds, as a test says with ``expired``: ``expired_trigger_id``; none:
``invalid_arguments``), opens only a ``modal`` with a plain_text title of
at most 24 characters and at most 100 valid blocks, a ``private_metadata`` of at
most 3,000 characters and, with an input block, a ``submit``.

The payloads a test sends are shaped after slackapi/bolt-python's scenario tests
(tests/scenario_tests_async/test_view_submission.py and test_shortcut.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from agent import Agent, AgentRuntime, AnswerCheck, ModelRequest, SQLiteStore, ToolContext, tool
from agent.testing import ScriptedModel, call, reply
from bot.config_file import Approvals
from bot.settings import Settings
from bot.slack.app import bolt_app
from bot.slack.channel import SlackChannel
from bot.slack.http import web_app
from bot.slack.run import slack_client
from bot.slack.tools import slack_tools
from tests.bot.slack_harness import SECRET, Bot, PausingModel, announce, answering, hurry
from tests.fakes.local_server import serve_locally
from tests.fakes.slack_api import FakeSlack, Message
from tests.fakes.slack_blocks import MAX_VIEW_BLOCKS, Refusal, checked_blocks

MAX_TITLE_CHARS = 24
MAX_METADATA_CHARS = 3_000
_TRIGGER = re.compile(r"[0-9]+\.[0-9]+\.[0-9a-zA-Z]+")


class ModalSlack(FakeSlack):
    """The fake Slack, which also opens modals (``views.open``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.opened: list[dict[str, Any]] = []
        """The views opened, in order."""
        self._exchanged: set[str] = set()
        self.expired: set[str] = set()
        """Triggers past their 3 seconds (add one to have views.open refuse it)."""
        self._handlers["views.open"] = self._open_view

    def _open_view(self, params: Any) -> dict[str, Any]:
        trigger = params.text("trigger_id")
        if not trigger:
            raise Refusal("invalid_arguments", messages=["missing required field: trigger_id"])
        if not _TRIGGER.fullmatch(trigger):
            raise Refusal("invalid_trigger_id")
        if trigger in self._exchanged:
            raise Refusal("exchanged_trigger_id")
        if trigger in self.expired:
            raise Refusal("expired_trigger_id")
        view = params.structured("view", "invalid_arguments")
        if not isinstance(view, dict) or view.get("type") != "modal":
            raise Refusal("invalid_arguments", messages=["view must be an object of type modal"])
        title = view.get("title")
        text = title.get("text") if isinstance(title, dict) else None
        if not isinstance(text, str) or not 0 < len(text) <= MAX_TITLE_CHARS:
            raise Refusal("invalid_arguments", messages=["must be less than 25 characters"])
        blocks = checked_blocks(view.get("blocks"), limit=MAX_VIEW_BLOCKS) or ()
        if any(b.get("type") == "input" for b in blocks) and "submit" not in view:
            raise Refusal("invalid_arguments", messages=["submit is required with input blocks"])
        if len(str(view.get("private_metadata", ""))) > MAX_METADATA_CHARS:
            raise Refusal("invalid_arguments", messages=["private_metadata is too long"])
        self._exchanged.add(trigger)
        opened = {"id": f"V{len(self.opened) + 1:08d}", **view}
        self.opened.append(opened)
        return {"view": opened}


@tool
async def pick(ctx: ToolContext) -> dict[str, Any]:
    """Ask for one of two colours."""
    answer = await ctx.request_input(
        id="pick", prompt="Which colour?", schema={"enum": ["red", "green"]}
    )
    return {"picked": answer}


@tool
async def count(ctx: ToolContext) -> dict[str, Any]:
    """Ask how many, at least one."""
    answer = await ctx.request_input(
        id="count", prompt="How many?", schema={"type": "integer", "minimum": 1}
    )
    return {"count": answer}


@tool
async def page(ctx: ToolContext) -> dict[str, Any]:
    """Ask whoever is on call."""
    answer = await ctx.request_input(
        id="page", prompt="Page the team?", answerers={"policy": "oncall"}
    )
    return {"paged": answer is True}


ON_CALL = "U0ONCALL"
ASKS = {"pick a colour": "pick", "how many": "count", "page the team": "page"}


def _on_call_only(check: AnswerCheck) -> bool:
    return check.policy == "oncall" and check.by == ON_CALL


@asynccontextmanager
async def running_hatches_bot(
    tmp_path: Path, approvals: Approvals | None = None
) -> AsyncIterator[Bot]:
    """The real app on a local port, with tools whose requests are not yes / no."""
    hold, held = asyncio.Event(), asyncio.Event()
    echo = answering(hold, held)

    async def answer(request: ModelRequest) -> Any:
        last = request.messages[-1]
        text = getattr(last, "text", "")
        if text in ASKS:
            return reply("", call(ASKS[text], {}))
        return await echo(request)

    model = PausingModel(ScriptedModel(answer), hold, held)
    async with ModalSlack() as slack, aiohttp.ClientSession() as http:
        store = await SQLiteStore.open(tmp_path / "bot.db")
        client = slack_client(
            Settings(slack_bot_token=slack.token, slack_api_url=slack.base_url, _env_file=None)
        )
        tools = [announce, hurry, pick, count, page, *slack_tools(client, approvals)]
        agent = Agent(name="bot", model=model, tools=tools, authorize_answer=_on_call_only)
        runtime = AgentRuntime(store, agent)
        await runtime.start()
        channel = SlackChannel(runtime, "bot", client, bot_user_id=slack.bot_user_id)
        runner, url = await serve_locally(web_app(bolt_app(channel, client, SECRET), SECRET))
        try:
            yield Bot(slack, url, http, model, runtime, hold, held, channel, client)
        finally:
            await runner.cleanup()
            await channel.drain(grace=1.0)
            channel.close()
            await runtime.close()
            await store.close()


async def post_interaction(bot: Bot, payload: dict[str, Any]) -> tuple[int, str]:
    """Post a signed interaction payload as Slack does (form-encoded); status and body."""
    body = urlencode({"payload": json.dumps(payload)})
    headers = bot.signed(body) | {"Content-Type": "application/x-www-form-urlencoded"}
    async with bot.http.post(f"{bot.url}/slack/events", data=body, headers=headers) as r:
        return r.status, await r.text()


def click_payload(
    bot: Bot, element: dict[str, Any], block_id: str, user: str, card: Message
) -> dict[str, Any]:
    """A ``block_actions`` payload for a click on ``element`` of ``card``, with a trigger."""
    return {
        "type": "block_actions",
        "user": {"id": user, "team_id": bot.slack.team_id},
        "team": {"id": bot.slack.team_id},
        "api_app_id": bot.slack.app_id,
        "trigger_id": f"{int(time.time())}.98765.abcd{len(bot.slack.calls)}",
        "container": {
            "type": "message",
            "message_ts": card.ts,
            "channel_id": card.channel,
            "is_ephemeral": False,
        },
        "channel": {"id": card.channel},
        "message": {"ts": card.ts, "thread_ts": card.thread_ts, "text": card.text},
        "actions": [
            {
                "type": "button",
                "action_id": element["action_id"],
                "block_id": block_id,
                "value": element["value"],
            }
        ],
    }


async def click_on(bot: Bot, card: Message, label: str, user: str) -> tuple[int, str]:
    """A signed click on the button labelled ``label`` of ``card``."""
    [actions] = [b for b in card.blocks if b["type"] == "actions"]
    [element] = [e for e in actions["elements"] if e["text"]["text"] == label]
    return await post_interaction(bot, click_payload(bot, element, actions["block_id"], user, card))


def submission(bot: Bot, view: dict[str, Any], user: str, typed: str) -> dict[str, Any]:
    """A ``view_submission`` of an opened modal with ``typed`` in its one input.

    Shaped as bolt-python's tests/scenario_tests_async/test_view_submission.py ``body``.
    """
    [field] = [b for b in view["blocks"] if b["type"] == "input"]
    action_id = field["element"]["action_id"]
    return {
        "type": "view_submission",
        "team": {"id": bot.slack.team_id, "domain": "workspace-domain"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T0TEAM"},
        "api_app_id": bot.slack.app_id,
        "token": "verification_token",
        "trigger_id": "111.222.valid",
        "view": {
            **view,
            "team_id": bot.slack.team_id,
            "state": {
                "values": {
                    field["block_id"]: {action_id: {"type": "plain_text_input", "value": typed}}
                }
            },
            "hash": "1596530361.3wRYuk3R",
            "previous_view_id": None,
            "root_view_id": view["id"],
            "app_id": bot.slack.app_id,
            "external_id": "",
            "bot_id": bot.slack.bot_id,
        },
        "response_urls": [],
    }


def shortcut(bot: Bot, user: str, message: Message) -> dict[str, Any]:
    """A ``message_action`` on ``message``: bolt-python's test_shortcut.py message_shortcut_body."""
    return {
        "type": "message_action",
        "token": "verification_token",
        "action_ts": "1583637157.207593",
        "team": {"id": bot.slack.team_id, "domain": "test-test"},
        "user": {"id": user, "name": user.lower()},
        "channel": {"id": message.channel, "name": "general"},
        "callback_id": "thread_reset",
        "trigger_id": "111.222.xxx",
        "message_ts": message.ts,
        "message": {
            "type": "message",
            "text": message.text,
            "user": message.user,
            "ts": message.ts,
            **({"thread_ts": message.thread_ts} if message.thread_ts else {}),
            "team": bot.slack.team_id,
        },
        "response_url": "https://hooks.slack.com/app/T111/111/xxx",
    }


def wait_until(done: Callable[[], bool], what: str) -> Any:
    """Poll ``done`` with a deadline (the channel offers no event for these)."""

    async def waiting() -> None:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            if done():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"never: {what}")

    return waiting()
