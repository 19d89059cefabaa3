from __future__ import annotations

import os

import pytest

SECRET_VARS = (
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "DATABASE_URL",
)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real service with a real token from the developer's shell."""
    for name in SECRET_VARS:
        if name in os.environ:
            monkeypatch.delenv(name)
