"""``python -m bot`` with no credentials runs the engine offline, durably."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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

    first = run_bot("note one", env=env)
    second = run_bot("note two", env=env)

    assert first.returncode == 0, first.stderr
    assert "SLACK_BOT_TOKEN" in first.stdout
    assert "manifest.yml" in first.stdout
    assert "holds 1 note(s)" in first.stdout
    # a second process on the same database continues the same durable session
    assert "holds 2 note(s)" in second.stdout


def test_malformed_database_url_stops_with_one_clear_message(tmp_path):
    result = run_bot(env={"DATABASE_URL": "postgres://nowhere/db"})

    assert result.returncode == 2
    assert "DATABASE_URL must look like sqlite:///" in result.stderr
    assert "Traceback" not in result.stderr


def test_slack_credentials_are_never_echoed(tmp_path):
    secret = "xoxb-very-secret-token"
    result = run_bot(env={"SLACK_BOT_TOKEN": secret, "DATABASE_URL": f"sqlite:///{tmp_path}/b.db"})

    assert result.returncode == 2
    assert secret not in result.stdout + result.stderr
