"""``python -m bot`` with no credentials runs the engine offline, durably."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropic, Reply

ROOT = Path(__file__).resolve().parents[2]


def run_bot(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_"))}
    full_env.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_without_credentials_it_says_what_it_needs_and_runs_durable_turns(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path}/bot.db"}

    first = run_bot("chat", "note one", env=env)
    second = run_bot("chat", "note two", env=env)

    assert first.returncode == 0, first.stderr
    assert "SLACK_BOT_TOKEN" in first.stdout
    assert "manifest.yml" in first.stdout
    assert "holds 1 note(s)" in first.stdout
    # a second process on the same database continues the same durable session
    assert "holds 2 note(s)" in second.stdout


def test_malformed_database_url_stops_with_one_clear_message(tmp_path):
    result = run_bot("chat", env={"DATABASE_URL": "mysql://nowhere/db"})

    assert result.returncode == 2
    assert "DATABASE_URL must look like sqlite:///" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_database_server_that_does_not_answer_stops_with_one_clear_message(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"postgres://bot:s3cret-pw@127.0.0.1:{port}/agent"
    result = run_bot("chat", env={"DATABASE_URL": url})

    assert result.returncode == 2
    assert f"cannot open the database at postgres://bot@127.0.0.1:{port}/agent" in result.stderr
    assert "Traceback" not in result.stderr
    assert "s3cret" not in result.stderr + result.stdout


def test_slack_credentials_are_never_echoed(tmp_path):
    secret = "xoxb-very-secret-token"
    result = run_bot(env={"SLACK_BOT_TOKEN": secret, "DATABASE_URL": f"sqlite:///{tmp_path}/b.db"})

    assert result.returncode == 2
    assert secret not in result.stdout + result.stderr


async def run_bot_async(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Like `run_bot`, without blocking the loop a local fake server runs on."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_"))}
    full_env.update(env, PYTHONPATH=str(ROOT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env=full_env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def chat_with_claude(
    api: FakeAnthropic, line: str, *, key: str, folder: Path
) -> tuple[int, str, str]:
    """One line of the terminal chat, with Claude's API at ``api``."""
    return await run_bot_async(
        "chat",
        line,
        env={
            "DATABASE_URL": f"sqlite:///{folder}/bot.db",
            "ANTHROPIC_API_KEY": key,
            "ANTHROPIC_BASE_URL": api.base_url,
        },
    )


async def test_with_an_anthropic_key_the_terminal_chats_with_claude(tmp_path):
    async with FakeAnthropic(api_key="sk-ant-test") as api:
        api.queue(Reply.text("The deploy is on Friday."))
        code, out, err = await chat_with_claude(
            api, "When is the deploy?", key="sk-ant-test", folder=tmp_path
        )

    assert code == 0, err
    assert "chatting with Claude (claude-sonnet-5-5)" in out
    assert "The deploy is on Friday." in out
    [body] = api.requests
    assert body["messages"][0]["content"][0]["text"] == "When is the deploy?"
    # nobody could answer an approval in the terminal: no tool asks for one
    assert [t["name"] for t in body["tools"]] == ["remember", "recall"]


async def test_a_rejected_key_stops_the_chat_at_start_without_the_key(tmp_path):
    async with FakeAnthropic(api_key="the-right-key") as api:
        code, out, err = await chat_with_claude(
            api, "hello", key="sk-ant-wrong-and-secret", folder=tmp_path
        )

    assert code == 2
    assert "the Anthropic API refused ANTHROPIC_API_KEY (401)" in err
    assert "sk-ant-wrong-and-secret" not in out + err
    assert api.requests == []  # asked the Models API only: no turn ran


async def test_a_model_the_key_cannot_use_stops_the_bot_at_start(tmp_path):
    async with FakeAnthropic(api_key="sk-ant-test") as api:
        code, _, err = await run_bot_async(
            "chat",
            "hello",
            env={
                "DATABASE_URL": f"sqlite:///{tmp_path}/bot.db",
                "ANTHROPIC_API_KEY": "sk-ant-test",
                "ANTHROPIC_BASE_URL": api.base_url,
                "ANTHROPIC_MODEL": "claude-sonet-5-5",  # a typo
            },
        )

    assert code == 2
    assert "ANTHROPIC_MODEL=claude-sonet-5-5 is not a model this API key can use" in err
    assert "Traceback" not in err
    assert api.requests == []


async def test_when_the_models_api_cannot_be_reached_the_bot_warns_and_goes_on(
    tmp_path, unused_tcp_port
):
    code, out, err = await run_bot_async(
        "chat",
        "hello",
        env={
            "DATABASE_URL": f"sqlite:///{tmp_path}/bot.db",
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{unused_tcp_port}",
            "ANTHROPIC_MAX_RETRIES": "0",
        },
    )

    assert code == 0, err
    assert "could not ask the Models API about claude-sonnet-5-5" in err
    assert "[failed: could not reach the model provider" in out  # the turn says so itself


def test_anthropic_settings_the_api_would_refuse_stop_the_bot_at_start(tmp_path):
    result = run_bot(
        env={
            "DATABASE_URL": f"sqlite:///{tmp_path}/bot.db",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_THINKING": "false",
            "ANTHROPIC_EFFORT": "xhigh",
            "ANTHROPIC_THINKING_BUDGET": "10",
        }
    )
    assert result.returncode == 2
    assert "ANTHROPIC_THINKING_BUDGET must be at least 1024" in result.stderr
    # the default model turns thinking off only up to high effort: both settings named
    assert "ANTHROPIC_EFFORT=xhigh cannot go with ANTHROPIC_THINKING=false" in result.stderr
    assert "Traceback" not in result.stderr


async def test_model_tokens_effort_and_thinking_come_from_the_environment(tmp_path):
    async with FakeAnthropic(api_key="sk-ant-test") as api:
        runs = []
        for model, extra in (
            ("claude-opus-5-5", {"ANTHROPIC_EFFORT": "low"}),
            (
                "claude-haiku-4-5",
                {"ANTHROPIC_THINKING": "true", "ANTHROPIC_THINKING_BUDGET": "2048"},
            ),
        ):
            runs.append(
                await run_bot_async(
                    "chat",
                    "hi",
                    env={
                        "DATABASE_URL": f"sqlite:///{tmp_path}/{model}.db",
                        "ANTHROPIC_API_KEY": "sk-ant-test\n",  # as read from a secrets file
                        "ANTHROPIC_BASE_URL": api.base_url,
                        "ANTHROPIC_MODEL": model,
                        "ANTHROPIC_MAX_TOKENS": "4096",
                        **extra,
                    },
                )
            )

    assert [code for code, _, _ in runs] == [0, 0], [err for _, _, err in runs]
    opus, haiku = api.requests
    assert (opus["model"], opus["max_tokens"]) == ("claude-opus-5-5", 4096)
    assert opus["thinking"] == {"type": "adaptive", "display": "summarized"}  # always thinks
    assert opus["output_config"] == {"effort": "low"}
    assert haiku["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "output_config" not in haiku


def test_a_blank_anthropic_key_means_no_key(tmp_path):
    result = run_bot(
        "chat", "note", env={"DATABASE_URL": f"sqlite:///{tmp_path}/b.db", "ANTHROPIC_API_KEY": " "}
    )
    assert result.returncode == 0, result.stderr
    assert "holds 1 note(s)" in result.stdout  # the offline agent answered


def test_the_terminal_chat_offers_no_approval_it_could_not_take(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path}/bot.db"}
    result = run_bot("chat", "share the plan", "and this too", env=env)
    again = run_bot("chat", "one more", env=env)

    assert result.returncode == 0, result.stderr
    assert "holds 2 note(s)" in result.stdout  # noted, never parked for an approval
    assert "Traceback" not in result.stderr + again.stderr
    assert "holds 3 note(s)" in again.stdout


def test_turns_held_lists_nothing_on_a_fresh_database_and_refuses_a_wrong_call(tmp_path):
    env = {"DATABASE_URL": f"sqlite:///{tmp_path}/bot.db"}

    listed = run_bot("turns", "--held", env=env)
    wrong = run_bot("turns", "--held", "--retry", env=env)
    unknown = run_bot("turns", "--held", "--drop", "nope", env=env)

    assert (listed.returncode, listed.stdout.strip()) == (0, "No held turns.")
    assert wrong.returncode == 2
    assert "--retry TURN" in wrong.stderr
    assert unknown.returncode == 1
    assert "no held turn nope" in unknown.stderr
