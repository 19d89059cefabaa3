"""The policy book: the file's channel policies, with what admins changed from Slack on top."""

from __future__ import annotations

import asyncio

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agent import ConfigError, MemoryStore, SessionStore, SQLiteStore, SurfacePolicy
from bot.agent_factory import build_agent
from bot.config_file import BotConfig
from bot.policies import PolicyBook, PolicyChange
from bot.settings import Settings
from bot.slack.tools import slack_tools

SUPPORT = "C0SUPPORT"


def book(store: SessionStore | None = None) -> PolicyBook:
    config = BotConfig(
        surfaces={"slack": SurfacePolicy(deny_tools=("recall",))},
        channels={
            SUPPORT: SurfacePolicy(deny_tools=("post_message",), instructions="Two sentences.")
        },
    )
    agent = build_agent(
        Settings(_env_file=None), slack_tools(AsyncWebClient()), surfaces=config.surfaces
    )
    return PolicyBook(agent, config, store or MemoryStore())


async def test_changes_from_slack_lie_over_the_files_and_reset_goes_back_to_it():
    policies = book()
    await policies.change(SUPPORT, PolicyChange("deny", "read_channel"), by="U1")
    changed = await policies.for_channel(SUPPORT)
    assert changed.deny_tools == ("post_message", "read_channel", "recall")
    assert changed.system.endswith("\n\nTwo sentences.")  # the file's text still applies
    await policies.change(SUPPORT, PolicyChange("allow", "read_channel"), by="U1")
    assert (await policies.for_channel(SUPPORT)).deny_tools == ("post_message", "recall")

    await policies.change(SUPPORT, PolicyChange("instructions", "Only French."), by="U2")
    assert (await policies.for_channel(SUPPORT)).system.endswith("\n\nOnly French.")
    await policies.change(SUPPORT, PolicyChange("mode", "replace"), by="U2")
    assert (await policies.for_channel(SUPPORT)).system == "Only French."
    view = await policies.describe(SUPPORT)
    assert (view.changed_by, view.from_file) == ("U2", True)
    assert view.prompt == ("the channel's instructions: “Only French.”",)

    await policies.change(SUPPORT, PolicyChange("reset"), by="U2")
    back = await policies.for_channel(SUPPORT)
    assert back.deny_tools == ("post_message", "recall")
    assert back.system.endswith("\n\nTwo sentences.")
    assert (await policies.describe(SUPPORT)).changed_by is None


async def test_slack_cannot_allow_what_the_file_denies():
    policies = book()
    for denied_by_the_file in ("post_message", "recall"):  # the channel's, the source's
        with pytest.raises(ConfigError, match=f"{denied_by_the_file} is denied here by BOT_CONFIG"):
            await policies.change(SUPPORT, PolicyChange("allow", denied_by_the_file), by="U1")
    assert (await policies.for_channel(SUPPORT)).deny_tools == ("post_message", "recall")


async def test_changes_made_at_once_are_all_kept(tmp_path):
    async with await SQLiteStore.open(tmp_path / "bot.db") as store:  # its reads yield
        policies = book(store)
        tools = ("read_thread", "read_channel", "remember")
        await asyncio.gather(
            *(policies.change(SUPPORT, PolicyChange("deny", tool), by="U1") for tool in tools)
        )
        assert set(tools) <= set((await policies.for_channel(SUPPORT)).deny_tools)


async def test_a_channel_only_slack_configured_is_listed_and_others_get_the_default():
    policies = book()
    await policies.change("C0RANDOM", PolicyChange("deny", "remember"), by="U1")

    listed = [view.channel for view in await policies.describe_all()]
    assert listed == [None, "C0RANDOM", SUPPORT]
    elsewhere = await policies.for_channel("C0ELSE")
    assert elsewhere.deny_tools == ("recall",)
    assert elsewhere.place is None  # refined by nothing: the source's policy alone


async def test_a_change_naming_no_tool_or_mode_changes_nothing():
    policies = book()
    with pytest.raises(ConfigError, match="there is no tool 'nuke'"):
        await policies.change(SUPPORT, PolicyChange("deny", "nuke"), by="U1")
    with pytest.raises(ConfigError, match="the mode is overlay or replace, not 'append'"):
        await policies.change(SUPPORT, PolicyChange("mode", "append"), by="U1")
    with pytest.raises(ConfigError, match="instructions are at most 4000 characters"):
        await policies.change(SUPPORT, PolicyChange("instructions", "x" * 4001), by="U1")
    await policies.change("C0BARE", PolicyChange("deny", "remember"), by="U1")
    with pytest.raises(ConfigError, match="mode replace needs instructions"):
        await policies.change("C0BARE", PolicyChange("mode", "replace"), by="U1")
    assert (await policies.describe(SUPPORT)).changed_by is None


def test_history_retention_and_compaction_are_set_from_the_environment(monkeypatch):
    monkeypatch.setenv("HISTORY_RETENTION_DAYS", "30")
    monkeypatch.setenv("COMPACT_KEEP_TURNS", "25")
    agent = build_agent(Settings(_env_file=None))
    assert agent.history_retention == 30 * 86_400
    assert agent.compacting is not None
    assert (agent.compacting.keep_turns, agent.compacting.every) == (25, 25)

    monkeypatch.setenv("HISTORY_RETENTION_DAYS", "0")
    monkeypatch.setenv("COMPACT_KEEP_TURNS", "0")
    assert Settings(_env_file=None).problems() == [
        "HISTORY_RETENTION_DAYS must be a positive number of days",
        "COMPACT_KEEP_TURNS must be 1 or more",
    ]
    monkeypatch.delenv("HISTORY_RETENTION_DAYS")
    monkeypatch.delenv("COMPACT_KEEP_TURNS")
    unset = build_agent(Settings(_env_file=None))
    assert (unset.history_retention, unset.compacting) == (None, None)
