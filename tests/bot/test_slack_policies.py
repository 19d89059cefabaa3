"""Policies per channel, end to end: a real bot process, the fake Slack, the fake Messages API.

The channel of a turn is the signed event's; what the model is offered is read
off the requests the fake Messages API received; ``/agent-policy`` is sent as
Slack sends a slash command (a signed form), and the Home tab is what the bot
published through ``views.publish``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.bot.test_slack_process import (
    WAIT,
    Launch,
    bot_process,
    free_port,
    launch,
    post_signed,
    signed_post,
)
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.fakes.slack_api import FakeSlack

__all__ = ["launch"]  # fixtures, used by name

SUPPORT = "C0SUPPORT"
HOOKS = itertools.count(1)
CONFIG = """\
admins = ["U0OPS"]

[surfaces.slack]
deny_tools = ["recall"]

[surfaces.email]  # no channel of this bot emits it

[channels.C0SUPPORT]
deny_tools = ["post_message"]
instructions = "This is #support: answer in two sentences at most."
"""


def mention_in(slack: FakeSlack, channel: str, text: str) -> tuple[str, dict[str, Any]]:
    said = f"<@{slack.bot_user_id}> {text}"
    ts = slack.post_user_message(channel, said)
    event = {"type": "app_mention", "user": slack.user_id, "text": said, "ts": ts}
    return ts, {
        "type": "event_callback",
        "team_id": slack.team_id,
        "event_id": f"Ev{channel}{ts}",
        "event": event | {"channel": channel, "team": slack.team_id},
    }


async def slash(port: int, slack: FakeSlack, user: str, channel: str, text: str) -> str:
    """``/agent-policy TEXT`` typed by ``user`` in ``channel``: the reply only they see."""
    hook = f"hook{next(HOOKS)}"
    body = urlencode(
        {
            "command": "/agent-policy",
            "text": text,
            "team_id": slack.team_id,
            "channel_id": channel,
            "user_id": user,
            "trigger_id": "1337.42",
            "response_url": slack.response_url(hook),
        }
    )
    status, acked, _ = await signed_post(port, body, "application/x-www-form-urlencoded")
    assert (status, acked) == (200, "")  # acknowledged at once; the answer follows
    deadline = time.monotonic() + WAIT
    while hook not in slack.command_responses:
        assert time.monotonic() < deadline, "the command was never answered"
        await asyncio.sleep(0.02)
    [answer] = slack.command_responses[hook]
    assert answer["response_type"] == "ephemeral"  # only whoever typed it sees it
    return str(answer["text"])


async def replied(slack: FakeSlack, channel: str, ts: str, text: str) -> None:
    """Wait until the thread's last reply reads ``text``, whole."""
    deadline = time.monotonic() + WAIT
    while not (slack.replies(channel, ts) and slack.replies(channel, ts)[-1].text == text):
        assert time.monotonic() < deadline, slack.replies(channel, ts)
        await asyncio.sleep(0.02)


def offered(request: dict[str, Any]) -> list[str]:
    return [spec["name"] for spec in request.get("tools", [])]


@pytest.fixture
def config(tmp_path: Path, slack: FakeSlack) -> dict[str, str | None]:
    path = tmp_path / "bot.toml"
    path.write_text(CONFIG)
    slack.add_channel(SUPPORT, name="support", members=[slack.user_id])
    slack.add_user("U0OPS", name="ops")
    slack.add_user("U0BOSS", name="boss", is_admin=True)
    return {"BOT_CONFIG": str(path)}


async def test_each_channel_offers_its_own_tools_and_a_denied_call_runs_nothing(
    slack: FakeSlack, launch: Launch, config: dict[str, str | None]
):
    async with FakeAnthropic() as api:
        api.queue(
            # talked into posting where it must not: the call is made all the same
            Reply.tool("post_message", {"channel": "#general", "text": "hi all"}, id="toolu_1"),
            Reply.text("I cannot post from here."),
            Reply.text("Sure."),
        )
        bot = await launch(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=api.base_url, **config)
        support_ts, in_support = mention_in(slack, SUPPORT, "post 'hi all' in #general")
        await post_signed(bot.port, in_support)
        await replied(slack, SUPPORT, support_ts, "I cannot post from here.")
        general_ts, in_general = mention_in(slack, slack.channel_id, "hello")
        await post_signed(bot.port, in_general)
        await replied(slack, slack.channel_id, general_ts, "Sure.")

    first, after_the_call, in_general_request = api.requests
    assert offered(first) == ["read_thread", "read_channel", "remember"]
    assert "two sentences at most" in json.dumps(first["system"])
    assert "in the team's Slack workspace" in json.dumps(first["system"])  # the source's too
    for denied in ("post_message", "recall"):  # nothing tells the model they exist
        assert denied not in json.dumps(first["system"])
    [result] = [b for b in after_the_call["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["is_error"] is True
    assert "unknown tool: post_message" in json.dumps(result["content"])
    assert not any("Approval needed" in m.text for m in slack.messages(SUPPORT))
    assert [m.text for m in slack.messages(slack.channel_id) if m.thread_ts is None] == [
        f"<@{slack.bot_user_id}> hello"
    ]  # nothing was posted in #general
    assert offered(in_general_request) == [
        "read_thread",
        "read_channel",
        "post_message",
        "remember",
    ]
    assert "two sentences at most" not in json.dumps(in_general_request["system"])


async def test_admins_change_a_channel_from_slack_and_everyone_else_is_refused(
    slack: FakeSlack, launch: Launch, config: dict[str, str | None], tmp_path: Path
):
    async with FakeAnthropic() as api:
        api.queue(Reply.text("Bonjour."))
        claude = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}
        bot = await launch(**claude, **config)

        # only admins may look (a policy may say what the channel keeps quiet) or change
        for asked in ("", "deny read_channel"):
            refused = await slash(bot.port, slack, slack.user_id, SUPPORT, asked)
            assert refused.startswith("Only workspace admins (and the bot's admins in BOT_CONFIG)")
        shown = await slash(bot.port, slack, "U0OPS", SUPPORT, "show")
        assert shown.splitlines()[0] == f"*<#{SUPPORT}> (BOT_CONFIG)*"
        kept = await slash(bot.port, slack, "U0BOSS", SUPPORT, "allow post_message")
        assert kept.startswith("Nothing changed: post_message is denied here by BOT_CONFIG")
        unreadable = await slash(bot.port, slack, "U0BOSS", SUPPORT, "deny")
        assert unreadable.startswith("I cannot read `deny`.")

        # a workspace admin, as Slack's users.info says, and an admin the file names
        denied = await slash(bot.port, slack, "U0BOSS", SUPPORT, "deny read_channel")
        assert denied.startswith("Changed; from the next turn here:")
        assert "tools denied: post_message, read_channel, recall" in denied
        told = await slash(bot.port, slack, "U0OPS", SUPPORT, "instructions Answer in French.")
        assert "the channel's instructions: “Answer in French.”" in told
        unknown = await slash(bot.port, slack, "U0OPS", SUPPORT, "deny nuke")
        assert unknown.startswith("Nothing changed: there is no tool 'nuke'")

        ts, event = mention_in(slack, SUPPORT, "hello")
        await post_signed(bot.port, event)
        await replied(slack, SUPPORT, ts, "Bonjour.")

    [request] = api.requests
    assert offered(request) == ["read_thread", "remember"]
    assert "Answer in French." in json.dumps(request["system"])
    assert "two sentences" not in json.dumps(request["system"])  # Slack's text took its place

    # the operator sees it too, from the command line, beside the file's
    listing = await bot_process(
        slack, tmp_path, free_port(), "policies", stderr=asyncio.subprocess.STDOUT, **config
    )
    out, _ = await asyncio.wait_for(listing.communicate(), WAIT)
    said = out.decode()
    assert listing.returncode == 0, said
    assert f"Channel {SUPPORT} (BOT_CONFIG; changed in Slack by U0OPS on " in said
    assert "  tools denied: post_message, read_channel, recall" in said
    assert "Default for Slack (any other channel, DMs)\n  tools offered: " in said


async def test_the_home_tab_shows_admins_the_policies_and_others_how_to_use_the_bot(
    slack: FakeSlack, launch: Launch, config: dict[str, str | None]
):
    bot = await launch(**config)
    warned = "agent bot has a policy for source 'email', but no channel here emits it (only slack)"
    assert any(warned in line for line in bot.out), bot.out
    for user in ("U0BOSS", slack.user_id):
        opened = {
            "type": "event_callback",
            "team_id": slack.team_id,
            "event_id": f"EvHome{user}",
            "event": {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home"},
        }
        assert await post_signed(bot.port, opened) == 200

    deadline = time.monotonic() + WAIT
    while len(slack.home_views) < 2:
        assert time.monotonic() < deadline, slack.home_views
        await asyncio.sleep(0.02)
    admin = json.dumps(slack.home_views["U0BOSS"])
    assert "*Policies* (change one with `/agent-policy`)" in admin
    assert f"<#{SUPPORT}> (BOT_CONFIG)" in admin
    assert "tools denied: post_message, recall" in admin
    member = json.dumps(slack.home_views[slack.user_id])
    assert "Mention me in a thread" in member
    assert "Policies" not in member


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        (
            'deny_tools = ["nuke"]',
            "BOT_CONFIG channels.C0SUPPORT: deny_tools names no tool of this agent: nuke",
        ),
        ('mode = "replace"', "BOT_CONFIG channels.C0SUPPORT: mode 'replace' needs instructions"),
        ('mode = "append"', "BOT_CONFIG: channels.C0SUPPORT.mode: Input should be 'overlay'"),
    ],
)
async def test_a_channel_policy_the_agent_cannot_follow_stops_the_bot_naming_it(
    slack: FakeSlack, tmp_path: Path, policy: str, said: str
):
    path = tmp_path / "bot.toml"
    path.write_text(f"[channels.C0SUPPORT]\n{policy}\n")
    for command in (("policies",), ()):
        proc = await bot_process(
            slack,
            tmp_path,
            free_port(),
            *command,
            stderr=asyncio.subprocess.STDOUT,
            BOT_CONFIG=str(path),
        )
        out, _ = await asyncio.wait_for(proc.communicate(), WAIT)
        assert proc.returncode == 2, out.decode()
        assert said in out.decode()
        assert "Traceback" not in out.decode()


def add_daily_summary(path: Path) -> None:
    schedule = f'name = "daily"\ncron = "0 9 * * 1-5"\nchannel = "{SUPPORT}"\nprompt = "Sum up."'
    path.write_text(f"{CONFIG}\n[[schedules]]\n{schedule}\n")


async def test_a_schedule_posting_into_a_channel_runs_under_that_channels_policy(
    slack: FakeSlack, tmp_path: Path, config: dict[str, str | None]
):
    add_daily_summary(Path(str(config["BOT_CONFIG"])))
    async with FakeAnthropic() as api:
        api.queue(Reply.text("A quiet day."))
        proc = await bot_process(
            slack,
            tmp_path,
            free_port(),
            "run-schedule",
            "daily",
            stderr=asyncio.subprocess.STDOUT,
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=api.base_url,
            **config,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), WAIT)

    assert proc.returncode == 0, out.decode()
    [request] = api.requests
    assert offered(request) == ["read_thread", "read_channel", "remember"]
    assert "two sentences at most" in json.dumps(request["system"])
