"""SIGKILL during a streamed Claude reply; a fresh process asks the step again and commits once.

The parent runs `FakeAnthropic` on its own event loop, so the children are
started with ``asyncio.create_subprocess_exec`` and every wait is bounded by
``asyncio.wait_for``. Each test goes:

1. queue the replies, the one to be cut short as a ``Hang`` that streams a few
   text deltas and then stalls;
2. start ``claude_crash_child.py`` in ``start`` phase on a SQLite file (and
   again on PostgreSQL), pointed at the fake (argv carries the base URL; the
   environment carries no ``ANTHROPIC_*`` or ``SLACK_*`` variable from outside);
3. wait until the fake says it is stalling (``api.hung``) *and* the child has
   printed ``DELTA`` lines adding up to everything the fake streamed: the
   child is mid-reply, holding text that has not committed;
4. SIGKILL it, then read the database to show that nothing of the streamed
   step committed and the turn is still running;
5. queue the whole reply and start a child in ``recover`` phase, which only
   enters a fresh runtime on the same database (start-up resumes the turn) and
   prints ``RESULT <json>``;
6. check the transcript, the tool's runs and the requests the fake received.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.agent import claude_crash_child as child
from tests.agent.crash_db import CrashDatabase
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply

CHILD = Path(__file__).with_name("claude_crash_child.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 30.0
"""The longest any one wait may take; a test that works takes a few seconds in all."""

STREAMED_DELTAS = 3
# A streamed text reply opens with message_start, ping and content_block_start;
# each later event is one text delta of `Reply.text_chunk` characters.
HANG_AFTER_EVENTS = 3 + STREAMED_DELTAS
STREAMED_TEXT = child.FINAL_TEXT[: STREAMED_DELTAS * Reply.text("x").text_chunk]
TOOL_CALL_ID = "toolu_crash_1"

T = TypeVar("T")


async def _bounded(what: str, awaitable: Awaitable[T]) -> T:
    try:
        return await asyncio.wait_for(awaitable, DEADLINE_SECONDS)
    except TimeoutError:
        pytest.fail(f"timed out after {DEADLINE_SECONDS}s waiting for {what}")


@dataclass
class Child:
    """One child process and what it has printed so far."""

    phase: str
    proc: asyncio.subprocess.Process
    stderr: Path
    lines: list[str]

    def explain(self) -> str:
        return f"{self.phase} child printed {self.lines}\nstderr:\n{self.stderr.read_text()}"

    async def line(self) -> str:
        assert self.proc.stdout is not None
        waiting_for = f"a line from the {self.phase} child (it printed {self.lines})"
        raw = await _bounded(waiting_for, self.proc.stdout.readline())
        if not raw:
            pytest.fail(f"the {self.phase} child ended early\n{self.explain()}")
        line = raw.decode().rstrip("\n")
        self.lines.append(line)
        return line

    async def streamed_text(self, expected: str) -> str:
        """Read ``DELTA`` lines until they add up to ``expected`` (or go past it)."""
        text = ""
        while len(text) < len(expected):
            line = await self.line()
            if line.startswith("DELTA "):
                _, attempt, piece = line.split(" ", 2)
                assert attempt == "1", self.explain()
                text += json.loads(piece)
        return text

    async def kill(self) -> None:
        self.proc.kill()
        out, _ = await _bounded(f"the killed {self.phase} child", self.proc.communicate())
        self.lines += out.decode().splitlines()
        assert self.proc.returncode == -signal.SIGKILL, self.explain()

    async def result(self) -> dict[str, Any]:
        """Wait for the child to print its result and exit cleanly."""
        out, _ = await _bounded(f"the {self.phase} child's result", self.proc.communicate())
        self.lines += out.decode().splitlines()
        assert self.proc.returncode == 0, self.explain()
        results = [line for line in self.lines if line.startswith("RESULT ")]
        assert len(results) == 1, self.explain()
        parsed: dict[str, Any] = json.loads(results[0].removeprefix("RESULT "))
        return parsed


@pytest.fixture
async def api() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=child.API_KEY) as server:
        yield server


@pytest.fixture
async def spawn(
    api: FakeAnthropic, tmp_path: Path, crash_db: CrashDatabase
) -> AsyncIterator[Callable[[str], Awaitable[Child]]]:
    """Start children on ``crash_db``; any still alive at teardown is SIGKILLed and reaped."""
    started: list[Child] = []
    # only what a child needs from outside: never a real key or endpoint from the shell
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SLACK_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)

    async def start(phase: str) -> Child:
        argv = [
            str(CHILD),
            crash_db.where,
            api.base_url,
            str(tmp_path / "tool-runs.log"),
            phase,
        ]
        stderr = tmp_path / f"{phase}-{len(started)}.err"
        with stderr.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=env,
                cwd=tmp_path,
            )
        started.append(Child(phase=phase, proc=proc, stderr=stderr, lines=[]))
        return started[-1]

    try:
        yield start
    finally:
        for leftover in started:
            if leftover.proc.returncode is None:
                leftover.proc.kill()
            # reap it and drain its pipe, so no transport is left open
            await asyncio.wait_for(leftover.proc.communicate(), DEADLINE_SECONDS)


@dataclass(frozen=True)
class Stored:
    """What the database holds for the test's one turn."""

    turn_status: str
    steps: set[str]
    messages: list[dict[str, Any]]

    @property
    def roles(self) -> list[str]:
        return [body["role"] for body in self.messages]

    @property
    def assistant_texts(self) -> list[str]:
        return [
            "".join(block["text"] for block in body["content"] if block["kind"] == "text")
            for body in self.messages
            if body["role"] == "assistant"
        ]


def _stored(db: CrashDatabase) -> Stored:
    [(status,)] = db.rows(f"select status from turns where turn_id = '{child.TURN_ID}'")
    steps = {str(step) for (step,) in db.rows("select step_id from steps")}
    rows = db.rows("select idx, turn_id, body from messages order by idx")
    assert [idx for idx, _, _ in rows] == list(range(len(rows)))  # no gap, no repeat
    assert {turn_id for _, turn_id, _ in rows} == {child.TURN_ID}
    return Stored(str(status), steps, [json.loads(body) for _, _, body in rows])


def _tool_runs(tmp_path: Path) -> list[str]:
    log = tmp_path / "tool-runs.log"
    return log.read_text().splitlines() if log.exists() else []


async def _kill_mid_stream(api: FakeAnthropic, first: Child) -> None:
    """Wait until ``first`` holds part of the hung reply, then SIGKILL it."""
    await _bounded("the fake to stall mid-reply", api.hung.wait())
    # the fake sent the deltas before stalling; the child must also have taken them in
    assert await first.streamed_text(STREAMED_TEXT) == STREAMED_TEXT, first.explain()
    await first.kill()


async def _recover(
    api: FakeAnthropic, spawn: Any, reply: Reply, db: CrashDatabase
) -> tuple[Any, Any]:
    """Queue the whole reply, run a recovering child, and read what it left on disk."""
    api.queue(reply)
    second = await spawn("recover")
    assert await second.result() == {"type": "Completed", "text": child.FINAL_TEXT}
    final = _stored(db)
    assert final.turn_status == "completed"
    return final, second


async def test_kill_mid_stream_of_the_first_reply_asks_it_again_and_commits_once(
    api, spawn, crash_db
):
    whole = Reply.text(child.FINAL_TEXT)
    api.queue(Hang(whole, after_events=HANG_AFTER_EVENTS))
    first = await spawn("start")
    await _kill_mid_stream(api, first)

    # nothing of the streamed step committed: the turn stands on its question alone
    killed = _stored(crash_db)
    assert killed.turn_status == "running"
    assert killed.steps == set()
    assert killed.roles == ["user"]
    assert len(api.requests) == 1

    final, second = await _recover(api, spawn, whole, crash_db)
    assert final.steps == {"model:1"}
    assert final.roles == ["user", "assistant"]
    assert final.assistant_texts == [child.FINAL_TEXT]
    # the step was asked again with the very same messages, not continued or doubled
    asked, asked_again = api.requests
    assert asked_again["messages"] == asked["messages"]
    assert asked_again == asked  # and in fact the very same request
    # the recovering process streamed the reply afresh, from its first delta
    recovered = [json.loads(line.split(" ", 2)[2]) for line in second.lines if line[:6] == "DELTA "]
    assert "".join(recovered) == child.FINAL_TEXT


async def test_kill_mid_stream_of_the_reply_after_a_tool_asks_only_that_step_again(
    api, spawn, tmp_path, crash_db
):
    whole = Reply.text(child.FINAL_TEXT)
    thinking = {"type": "thinking", "thinking": "Log it first.", "signature": "sig-crash"}
    call = Reply.tool(child.TOOL_NAME, {"note": "deploy moved"}, id=TOOL_CALL_ID)
    api.queue(
        Reply([thinking, *call.content], stop_reason="tool_use"),
        Hang(whole, after_events=HANG_AFTER_EVENTS),
    )
    first = await spawn("start")
    # the tool call carries no text, so every delta is from the second reply
    await _kill_mid_stream(api, first)

    # the tool's step committed; the reply streamed after it did not
    killed = _stored(crash_db)
    assert killed.turn_status == "running"
    assert killed.steps == {"model:1", f"tool:1:{TOOL_CALL_ID}"}
    assert killed.roles == ["user", "assistant", "tool"]
    assert len(_tool_runs(tmp_path)) == 1
    assert len(api.requests) == 2

    final, _ = await _recover(api, spawn, whole, crash_db)
    assert final.steps == {"model:1", f"tool:1:{TOOL_CALL_ID}", "model:3"}
    assert final.roles == ["user", "assistant", "tool", "assistant"]
    kept_thinking, made_call = final.messages[1]["content"]
    assert (made_call["kind"], made_call["id"]) == ("tool_call", TOOL_CALL_ID)
    assert (kept_thinking["thinking"], kept_thinking["signature"]) == ("Log it first.", "sig-crash")
    assert final.messages[2]["call_id"] == TOOL_CALL_ID
    assert final.assistant_texts == ["", child.FINAL_TEXT]
    # the tool ran once, in the killed process; recovery did not run it again
    [run] = _tool_runs(tmp_path)
    assert run == f"deploy moved pid={first.proc.pid}"
    # the first step was asked once; the final one twice, with the very same messages
    assert len(api.requests) == 3
    first_step, final_step, final_step_again = api.requests
    assert final_step_again["messages"] == final_step["messages"]
    assert final_step_again == final_step
    assert first_step["messages"] != final_step["messages"]
    assert [block["type"] for block in final_step["messages"][-1]["content"]] == ["tool_result"]
    # the process that recovered sent the killed one's thinking back exactly, signature and all
    assert final_step_again["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert final_step_again["messages"][1]["content"][0] == thinking
