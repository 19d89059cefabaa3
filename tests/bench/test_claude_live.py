"""``python -m bench.claude_live``: what it does without a key, and its checks, run on the fake.

Against the real API it is run by hand before a release; here the strict fake
stands in, so the checks themselves are shown to pass on a good conversation
and to fail on a bad one.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropic, Reply

ROOT = Path(__file__).resolve().parents[2]


async def run_live(env: dict[str, str], folder: Path) -> tuple[int, str, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_"))}
    full.update(env, PYTHONPATH=str(ROOT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.claude_live",
        env=full,
        cwd=folder,  # no .env of the developer's is read
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def calculator(*, right: bool) -> Any:
    def answer(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]["content"][-1]
        if last.get("type") == "tool_result":
            return Reply.text("1234 times 5678 is 7,006,652.")
        if len(messages) > 1:  # the follow-up
            return Reply.text("That makes 7006653." if right else "I am not sure.")
        call = {"type": "tool_use", "id": "toolu_1", "name": "multiply"}
        return Reply([{**call, "input": {"a": 1234, "b": 5678}}], stop_reason="tool_use")

    return answer


async def test_without_a_key_it_says_what_it_needs_and_sends_nothing(tmp_path):
    code, out, _ = await run_live({}, tmp_path)

    assert code == 0
    assert "needs ANTHROPIC_API_KEY" in out
    assert "Nothing was sent" in out


async def test_a_good_conversation_passes_every_check_and_prints_the_usage(tmp_path):
    async with FakeAnthropic(calculator(right=True), min_cache_tokens="model") as api:
        code, out, err = await run_live(
            {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}, tmp_path
        )

    assert code == 0, out + err
    assert "5 passed, 0 failed" in out
    assert "the Models API knows the model" in out
    assert "turn 2: input" in out
    assert len(api.requests) == 3  # the tool call, the answer, the follow-up
    assert api.usages[-1]["cache_read_input_tokens"] > 0


async def test_a_wrong_answer_fails_its_check_and_the_run(tmp_path):
    async with FakeAnthropic(calculator(right=False)) as api:
        code, out, _ = await run_live(
            {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.base_url}, tmp_path
        )

    assert code == 1
    assert "FAIL turn 2 answered 7006653" in out


async def test_a_model_the_key_cannot_use_stops_it_before_any_turn(tmp_path):
    async with FakeAnthropic() as api:
        code, _, err = await run_live(
            {
                "ANTHROPIC_API_KEY": "test-key",
                "ANTHROPIC_BASE_URL": api.base_url,
                "ANTHROPIC_MODEL": "claude-sonnet-55",
            },
            tmp_path,
        )

    assert code == 2
    assert "ANTHROPIC_MODEL=claude-sonnet-55 is not a model" in err
    assert api.requests == []
