"""``python -m bot feedback``: what people said of the replies, read from DATABASE_URL."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agent import Feedback, SessionKey, SQLiteStore
from tests.bot.test_cli import run_bot

KEY = SessionKey("bot", "slack:T0TEAM:C0GENERAL:1700000000.000100")
DAY = 24 * 3600


def seeded(path: Path, *feedback: Feedback) -> dict[str, str]:
    """A database holding ``feedback``, as the bot kept it; the environment naming it."""

    async def seed() -> None:
        async with await SQLiteStore.open(path) as store:
            for given in feedback:
                await store.save_feedback(given)

    asyncio.run(seed())
    return {"DATABASE_URL": f"sqlite:///{path}"}


def test_it_lists_the_feedback_newest_first_with_its_comments(tmp_path: Path):
    now = time.time()
    env = seeded(
        tmp_path / "bot.db",
        Feedback(key=KEY, turn_id="t-old", by="U0ALICE", rating="good", at=now - 10 * DAY),
        Feedback(
            key=KEY, turn_id="t-new", by="U0BEN", rating="bad", comment="Too\nlong.", at=now - 60
        ),
    )

    listed = run_bot("feedback", env=env)
    recent = run_bot("feedback", "--since", "7", env=env)

    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == "2 feedback: 1 good, 1 bad (newest first)"
    assert lines[1].endswith(f"  U0BEN  bad   bot {KEY.session_id} t-new")
    assert lines[2] == "    “Too long.”"
    assert lines[3].endswith(f"  U0ALICE  good  bot {KEY.session_id} t-old")
    assert lines[1][:10] == time.strftime("%Y-%m-%d", time.gmtime(now - 60))
    assert recent.returncode == 0, recent.stderr
    assert recent.stdout.splitlines()[0] == (
        "1 feedback in the last 7 day(s): 0 good, 1 bad (newest first)"
    )
    assert "t-old" not in recent.stdout


def test_it_says_so_when_there_is_none_and_refuses_a_wrong_call(tmp_path: Path):
    env = seeded(tmp_path / "empty.db")

    none = run_bot("feedback", env=env)
    none_lately = run_bot("feedback", "--since", "2", env=env)
    wrong = run_bot("feedback", "--since", "soon", env=env)

    assert (none.returncode, none.stdout.strip()) == (0, "No feedback yet.")
    assert (none_lately.returncode, none_lately.stdout.strip()) == (
        0,
        "No feedback in the last 2 day(s).",
    )
    assert wrong.returncode == 2
    assert "Usage: python -m bot feedback [--since DAYS]" in wrong.stderr
