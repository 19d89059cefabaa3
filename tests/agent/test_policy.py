"""Rule 23: surface policies, assembled from the agent's folder and enforced in code."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from agent import (
    Agent,
    AgentRuntime,
    ConfigError,
    InboundEvent,
    ModelReply,
    ModelRequest,
    SurfacePolicy,
    Suspended,
    ToolContext,
    ToolMessage,
    TurnInput,
    resolve_policy,
    tool,
    warn_unmounted_surfaces,
)
from agent.testing import ScriptedModel, call, reply

ran: list[str] = []


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    ran.append(f"lookup {order}")
    return f"order {order}: shipped"


@tool
def issue_refund(order: str) -> str:
    """Refund an order."""
    ran.append(f"refund {order}")
    return f"refunded {order}"


@tool
async def escalate(reason: str, ctx: ToolContext) -> str:
    """Hand the case to a person, once one agrees."""
    agreed = await ctx.request_input(id="agree", prompt=f"Escalate: {reason}?", schema={})
    ran.append(f"escalate {reason}")
    return f"escalated: {agreed}"


TOOLS = [lookup, issue_refund, escalate]


def folder_with(tmp_path: Path, **overlays: str) -> Path:
    (tmp_path / "instructions.md").write_text("You help customers.\n")
    for source, text in overlays.items():
        (tmp_path / f"instructions.{source}.md").write_text(text)
    return tmp_path


def agent_from(folder: Path, model: Any = None, **surfaces: SurfacePolicy) -> Agent:
    return Agent.from_folder(
        folder,
        name="ops",
        model=model or ScriptedModel(lambda request: reply("ok")),
        tools=TOOLS,
        surfaces=surfaces,
    )


def test_an_overlay_is_laid_over_the_base_and_a_replace_stands_alone(tmp_path: Path):
    folder = folder_with(tmp_path, slack="In Slack, use Markdown.", email="Write a letter.")
    agent = agent_from(
        folder, slack=SurfacePolicy(), email=SurfacePolicy(mode="replace", deny_tools=("lookup",))
    )

    slack = resolve_policy(agent, "slack")
    assert slack.system == "You help customers.\n\nIn Slack, use Markdown."
    assert slack.deny_tools == ()
    email = resolve_policy(agent, "email")
    assert (email.system, email.deny_tools) == ("Write a letter.", ("lookup",))
    assert resolve_policy(agent, "cli").system == "You help customers."  # no policy: the base


def test_a_mode_without_its_instructions_and_an_unknown_tool_are_refused_at_assembly(
    tmp_path: Path,
):
    folder = folder_with(tmp_path, slack="In Slack, use Markdown.")
    with pytest.raises(ConfigError, match=r"surface 'email' sets mode 'replace'.*email\.md"):
        agent_from(folder, email=SurfacePolicy(mode="replace"))
    with pytest.raises(ConfigError, match=r"surface 'slack': deny_tools names no tool.*refund_all"):
        agent_from(folder, slack=SurfacePolicy(deny_tools=("refund_all",)))
    (tmp_path / "instructions.md").unlink()
    with pytest.raises(ConfigError, match=r"instructions\.md is missing"):
        agent_from(folder)


def test_a_policy_for_a_source_no_channel_emits_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    agent = agent_from(folder_with(tmp_path), slack=SurfacePolicy(), email=SurfacePolicy())

    with caplog.at_level(logging.WARNING, logger="agent"):
        assert warn_unmounted_surfaces(agent, ["slack"]) == ["email"]
    assert "agent ops has a policy for source 'email', but no channel here emits it" in caplog.text


def test_a_channel_refines_its_source(tmp_path: Path):
    folder = folder_with(tmp_path, slack="In Slack, use Markdown.")
    agent = agent_from(folder, slack=SurfacePolicy(deny_tools=("issue_refund", "escalate")))

    support = SurfacePolicy(
        deny_tools=("lookup",), allow_tools=("escalate",), instructions="Two sentences at most."
    )
    refined = resolve_policy(agent, "slack", place="C0SUPPORT", refined=support)
    assert refined.system == (
        "You help customers.\n\nIn Slack, use Markdown.\n\nTwo sentences at most."
    )
    assert refined.deny_tools == ("issue_refund", "lookup")
    assert refined.place == "C0SUPPORT"
    alone = SurfacePolicy(instructions="Only say hello.", mode="replace")
    assert resolve_policy(agent, "slack", place="C0X", refined=alone).system == "Only say hello."


async def test_denied_tools_are_not_listed_and_a_call_to_one_fails_as_unknown(store, tmp_path):
    ran.clear()

    def answer(request: ModelRequest) -> ModelReply:
        if isinstance(request.messages[-1], ToolMessage):
            return reply(f"saw: {request.messages[-1].result}")
        # a prompt injection talked it into tools it was never shown, one that asks a person
        return reply("", call("issue_refund", {"order": "A1"}), call("escalate", {"reason": "x"}))

    model = ScriptedModel(answer)
    denied = SurfacePolicy(deny_tools=("issue_refund", "escalate"))
    agent = agent_from(folder_with(tmp_path), model, slack=denied)
    async with AgentRuntime(store, agent) as runtime:
        opening = TurnInput(text="refund A1", policy=resolve_policy(agent, "slack"))
        done = await runtime.session("ops", "s1").turn(opening)  # turn() refuses a park

    assert [spec.name for spec in model.requests[0].tools] == ["lookup"]
    # the same words as for a tool the agent never had: nothing tells the model it exists
    assert done.text == "saw: {'error': 'ToolError: unknown tool: escalate'}"
    results = [m.result for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert results == [
        {"error": "ToolError: unknown tool: issue_refund"},
        {"error": "ToolError: unknown tool: escalate"},
    ]
    assert ran == []  # neither ran, and nobody was asked to approve anything


async def test_a_parked_turn_keeps_the_policy_it_started_under(sqlite_store, tmp_path: Path):
    ran.clear()

    def answer(request: ModelRequest) -> ModelReply:
        if isinstance(request.messages[-1], ToolMessage):
            return reply("escalated")
        return reply("", call("escalate", {"reason": "angry"}, id="c1"))

    folder = folder_with(tmp_path, slack="In Slack, use Markdown.")
    before = ScriptedModel(answer)
    agent = agent_from(folder, before, slack=SurfacePolicy(deny_tools=("issue_refund",)))
    async with AgentRuntime(sqlite_store, agent) as runtime:
        opening = TurnInput(text="escalate", policy=resolve_policy(agent, "slack"))
        turn_id = await runtime.session("ops", "s1").start(opening)
        parked = await runtime.session("ops", "s1").result(turn_id)
        assert isinstance(parked, Suspended)
        assert parked.policy == opening.policy

    # meanwhile the operator changed the configuration, and the bot restarted
    (folder / "instructions.slack.md").write_text("In Slack, write haiku.")
    after = ScriptedModel(answer)
    changed = agent_from(folder, after, slack=SurfacePolicy(deny_tools=("lookup",)))
    async with AgentRuntime(sqlite_store, changed) as runtime:
        await runtime.session("ops", "s1").resume(turn_id, "agree", True)
        done = await runtime.session("ops", "s1").result(turn_id)

    assert done.text == "escalated"
    [resumed] = after.requests
    assert resumed.system == "You help customers.\n\nIn Slack, use Markdown."
    assert [spec.name for spec in resumed.tools] == ["lookup", "escalate"]
    assert ran == ["escalate angry"]


async def test_a_turn_admitted_without_a_policy_runs_under_its_sources(store, tmp_path: Path):
    model = ScriptedModel(lambda request: reply("ok"))
    folder = folder_with(tmp_path, slack="In Slack, use Markdown.")
    agent = agent_from(folder, model, slack=SurfacePolicy(deny_tools=("issue_refund",)))
    async with AgentRuntime(store, agent) as runtime:
        # admitted before policies existed (or by a channel that sets none)
        event = InboundEvent(source="slack", user="U1", attested=True)
        await runtime.session("ops", "s1").turn(TurnInput(text="hi", user="U1", event=event))
        await runtime.session("ops", "s2").turn(TurnInput(text="hi"))  # no event: the base

    with_event, without = model.requests
    assert with_event.system == "You help customers.\n\nIn Slack, use Markdown."
    assert [spec.name for spec in with_event.tools] == ["lookup", "escalate"]
    assert without.system == "You help customers."
    assert [spec.name for spec in without.tools] == ["lookup", "issue_refund", "escalate"]


def test_instructions_a_policy_gives_come_before_the_folders(tmp_path: Path):
    folder = folder_with(tmp_path, slack="In Slack, use Markdown.")
    agent = agent_from(folder, slack=SurfacePolicy(instructions="In Slack, be terse."))
    assert resolve_policy(agent, "slack").system == "You help customers.\n\nIn Slack, be terse."
