"""Settings: every problem is found at once and named, and no secret is ever repeated."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import ConfigError
from bot.settings import SLACK_API_URL, load_settings
from tests.bot.test_cli import run_bot

BOT_TOKEN = "xoxb-1-secret-bot-token"
SIGNING_SECRET = "0123456789abcdef-signing-secret"
APP_TOKEN = "xapp-1-secret-app-token"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """An environment with no bot settings, in a folder with no ``.env`` file."""
    monkeypatch.chdir(tmp_path)
    for name in (
        "SLACK_BOT_TOKEN",
        "SLACK_SIGNING_SECRET",
        "SLACK_APP_TOKEN",
        "SLACK_API_URL",
        "PORT",
        "DATABASE_URL",
        "BOT_CONFIG",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def problems_of(env: pytest.MonkeyPatch, **values: str) -> list[str]:
    for name, value in values.items():
        env.setenv(name, value)
    try:
        load_settings()
    except ConfigError as exc:
        return str(exc).splitlines()
    return []


def test_defaults_and_a_complete_slack_setup_start(env):
    assert problems_of(env) == []
    settings = load_settings()
    assert (settings.port, settings.slack_api_url) == (3000, SLACK_API_URL)
    assert settings.database_url == "sqlite:///data/bot.db"
    http = problems_of(env, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET)
    assert http == []
    env.delenv("SLACK_SIGNING_SECRET")
    assert problems_of(env, SLACK_APP_TOKEN=APP_TOKEN) == []  # Socket Mode


def test_a_bot_token_alone_names_what_is_missing(env):
    [problem] = problems_of(env, SLACK_BOT_TOKEN=BOT_TOKEN)
    assert "SLACK_SIGNING_SECRET" in problem
    assert "SLACK_APP_TOKEN" in problem


def test_a_signing_secret_without_a_bot_token_is_refused(env):
    [problem] = problems_of(env, SLACK_SIGNING_SECRET=SIGNING_SECRET)
    assert problem.startswith("SLACK_BOT_TOKEN is missing")


def test_tokens_of_the_wrong_kind_are_refused_without_being_repeated(env):
    found = problems_of(env, SLACK_BOT_TOKEN="xapp-wrong-kind", SLACK_APP_TOKEN="xoxb-wrong-kind")
    assert len(found) == 2
    assert "SLACK_BOT_TOKEN must be a bot token" in found[0]
    assert "SLACK_APP_TOKEN must be an app-level token" in found[1]
    assert "wrong-kind" not in "\n".join(found)


def test_every_problem_is_named_at_once(env, tmp_path):
    broken = tmp_path / "bot.toml"
    broken.write_text("[channels\n")
    found = problems_of(
        env,
        DATABASE_URL="mysql://admin:hunter2@db.internal/bot",
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_API_URL="slack.com/api",
        PORT="70000",
        BOT_CONFIG=str(broken),
    )

    text = "\n".join(found)
    assert len(found) == 5, text
    for setting in ("DATABASE_URL", "SLACK_SIGNING_SECRET", "SLACK_API_URL", "PORT", "BOT_CONFIG"):
        assert setting in text
    assert "hunter2" not in text
    assert BOT_TOKEN not in text


def test_a_setting_of_the_wrong_type_is_named_without_its_value(env):
    [problem] = problems_of(env, PORT="http")
    assert problem.startswith("PORT:")
    assert "'http'" not in problem


def test_a_missing_config_file_is_named(env, tmp_path):
    [problem] = problems_of(env, BOT_CONFIG=str(tmp_path / "nope.toml"))
    assert "BOT_CONFIG" in problem
    assert "does not exist" in problem


def test_the_bot_stops_at_start_listing_each_problem_and_no_secret(tmp_path):
    result = run_bot(
        env={
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "DATABASE_URL": "mysql://admin:hunter2@db.internal/bot",
            "PORT": "0",
        }
    )

    assert result.returncode == 2
    assert result.stderr.startswith("Cannot start; fix these settings first:")
    assert result.stderr.count("\n  - ") == 3, result.stderr
    assert "Traceback" not in result.stderr
    for secret in (BOT_TOKEN, "hunter2"):
        assert secret not in result.stdout + result.stderr
