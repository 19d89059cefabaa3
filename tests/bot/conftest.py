from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.bot.slack_harness import Bot, running_bot
from tests.fakes.slack_api import FakeSlack


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[Bot]:
    """The Slack app, served on a local port against a fresh fake Slack."""
    async with running_bot(tmp_path) as running:
        yield running


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    """A fake Slack of its own, for a test that serves the bot itself."""
    async with FakeSlack() as fake:
        yield fake
