"""Issue 19, point 4: a turn whose tool kills the process is held, not resumed forever.

A real child process runs a turn whose tool SIGKILLs its own process; each
restart on the same database (a SQLite file, and again PostgreSQL) resumes it
and dies again, until the third death in a row: the next start ends the turn
`interrupted` (reason ``held``), tells its stream once (``turn.interrupted``),
and the session's next turn runs. An operator then lists, retries or drops the
held turn (``python -m bot turns``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from agent import (
    Agent,
    AgentRuntime,
    Completed,
    ConflictError,
    Interrupted,
    SQLiteStore,
    ToolMessage,
    UnknownTurnError,
    held_turns,
)
from agent.core.messages import UserMessage
from agent.core.records import Commit, SessionKey, StoredMessage
from agent.core.turns import POISON_RUNS, TurnInput, TurnRecord
from agent.models.anthropic.wire import api_messages
from agent.testing import ScriptedModel, reply
from tests.agent.child_process import ChildProcess, start_children
from tests.agent.crash_db import CrashDatabase
from tests.bot.test_cli import run_bot

from .wire_checks import assert_valid_api_messages

CHILD = Path(__file__).with_name("poison_child.py")
KEY = SessionKey("a", "s-poison")


def killed_by_its_tool(process: ChildProcess) -> None:
    """The child printed that its tool runs, then died of its own SIGKILL."""
    process.wait_for("EXPLODING")
    assert process.proc.wait(timeout=30) == -signal.SIGKILL, process.explain()


async def test_a_turn_that_kills_its_process_three_times_is_held_then_retried_or_dropped(
    tmp_path, crash_db
):
    db = crash_db.where
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        killed_by_its_tool(start("start", [db, "start"]))
        for n in (1, 2):
            killed_by_its_tool(start(f"recover{n}", [db, "recover"]))
        held = start("recover3", [db, "recover"])
        held.finish()
        again = start("recover4", [db, "recover"])
        again.finish()

    assert not held.printed("EXPLODING")  # the fourth start did not run the tool again
    outcome = json.loads(held.printed("RESULT ")[0])
    # the session was held with the turn: the next turn waited until it was resumed
    assert outcome["held"].startswith("turn poison is held: the process stopped 3 times")
    assert (outcome["status"], outcome["waited"], outcome["after"]) == (
        "interrupted",
        "timeout",
        "completed",
    )
    assert json.loads(again.printed("RESULT ")[0])["held"] is None  # resumed for good
    assert held.printed("EVENT ") == ["turn.interrupted"]  # the thread is told, once
    assert again.printed("EVENT ") == []  # and not again at the next start
    assert not again.printed("EXPLODING")

    store = await crash_db.open()
    state = await store.load(KEY)
    record = state.turns["poison"]
    assert record.status == "interrupted"
    assert isinstance(record.result, Interrupted)
    assert record.result.reason == "held"
    assert "3 times in a row" in record.result.detail
    [closed] = [m for m in state.transcript if isinstance(m, ToolMessage)]
    assert closed.result["interrupted"] is True  # the call the process died in has a result
    assert_valid_api_messages(api_messages(list(state.transcript)))
    [listed] = await held_turns(store)
    assert (listed.key, listed.record.turn_id) == (KEY, "poison")
    await store.close()

    env = {"DATABASE_URL": crash_db.url}
    shown = run_bot("turns", "--held", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "a s-poison poison: the process stopped 3 times in a row" in shown.stdout

    retried = run_bot("turns", "--held", "--retry", "poison", env=env)
    assert retried.returncode == 0, retried.stderr
    assert "queued again as poison.retry" in retried.stdout
    assert run_bot("turns", "--held", env=env).stdout.strip() == "No held turns."
    assert run_bot("turns", "--held", "--drop", "poison", env=env).returncode == 1

    store = await crash_db.open()
    retry = (await store.load(KEY)).turns["poison.retry"]
    assert (retry.status, retry.retry_of, retry.input.text) == ("queued", "poison", "go")
    await store.close()
    # the retry runs at the next start: the tool runs (and kills the process) again
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        killed_by_its_tool(start("retried", [db, "recover"]))


async def test_an_agent_that_does_not_resume_lost_turns_interrupts_one_after_a_sigkill(
    tmp_path, crash_db
):
    """Issue 21, point 1: ``Agent(on_lost="interrupt")`` gives a lost turn up at once.

    The default (``resume``) runs the tool again at each start, as the test above shows;
    this agent ends the turn ``interrupted`` (reason ``lost``) at the first restart,
    without running anything of it again, and without holding the session.
    """
    db = crash_db.where
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        killed_by_its_tool(start("start", [db, "start", "interrupt"]))
        given_up = start("recover", [db, "recover", "interrupt"])
        given_up.finish()

    assert not given_up.printed("EXPLODING")
    outcome = json.loads(given_up.printed("RESULT ")[0])
    assert outcome == {
        "status": "interrupted",
        "reason": "lost",
        "held": None,
        "waited": "completed",  # the session is not held: the next turn runs at once
        "after": "completed",
    }
    assert given_up.printed("EVENT ") == ["turn.interrupted"]
    store = await crash_db.open()
    state = await store.load(KEY)
    result = state.turns["poison"].result
    assert isinstance(result, Interrupted)
    assert "does not resume lost turns" in result.detail
    [closed] = [m for m in state.transcript if isinstance(m, ToolMessage)]
    assert closed.result["interrupted"] is True
    assert_valid_api_messages(api_messages(list(state.transcript)))
    await store.close()


async def test_an_operators_retry_runs_in_the_running_process_without_a_restart(tmp_path, crash_db):
    db = crash_db.where
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        killed_by_its_tool(start("start", [db, "start"]))
        for n in (1, 2):
            killed_by_its_tool(start(f"recover{n}", [db, "recover"]))
        start("recover3", [db, "recover"]).finish()
        serving = start("serving", [db, "serve"])  # a bot that keeps running
        serving.wait_for("SERVING")

        env = {"DATABASE_URL": crash_db.url}
        retried = run_bot("turns", "--held", "--retry", "poison", env=env)
        assert retried.returncode == 0, retried.stderr
        assert "queued again as poison.retry" in retried.stdout
        # the running process finds the retry and runs it: its tool kills the process
        killed_by_its_tool(serving)

    store = await crash_db.open()
    state = await store.load(KEY)
    await store.close()
    retry = state.turns["poison.retry"]
    assert (retry.status, retry.retry_of, retry.runs) == ("running", "poison", 1)
    # the serving process's own turn and the retry were numbered apart: it read the
    # session again before it wrote, though it had it in memory
    assert sorted(t.seq for t in state.turns.values()) == [1, 2, 3, 4]


async def test_an_operator_drops_a_held_turn(tmp_path, crash_db):
    db = crash_db.where
    with start_children(ChildProcess, CHILD, tmp_path) as start:
        killed_by_its_tool(start("start", [db, "start"]))
        for n in (1, 2):
            killed_by_its_tool(start(f"recover{n}", [db, "recover"]))
        start("recover3", [db, "recover"]).finish()

    env = {"DATABASE_URL": crash_db.url}
    dropped = run_bot("turns", "--held", "--drop", "poison", env=env)
    assert dropped.returncode == 0, dropped.stderr
    assert "dropped" in dropped.stdout
    assert run_bot("turns", "--held", env=env).stdout.strip() == "No held turns."
    store = await crash_db.open()
    assert (await store.load(KEY)).turns["poison"].status == "interrupted"
    await store.close()


STOP_CHILD = Path(__file__).with_name("stop_child.py")
LONG = SessionKey("a", "s-long")


def stopped_cleanly(process: ChildProcess) -> None:
    """Stop a child in its long tool with SIGTERM, as a deploy does: it closes cleanly."""
    process.wait_for("WAITING")
    process.proc.send_signal(signal.SIGTERM)
    process.finish()
    assert process.printed("STOPPED") == [""], process.explain()


async def long_turn(db: CrashDatabase) -> tuple[str, int]:
    store = await db.open()
    record = (await store.load(LONG)).turns["long"]
    await store.close()
    return record.status, record.runs


async def test_a_turn_stopped_cleanly_three_times_is_not_held_and_completes(tmp_path, crash_db):
    # three deploys in the middle of one long turn are no deaths of the process
    db = crash_db.where
    with start_children(ChildProcess, STOP_CHILD, tmp_path) as start:
        stopped_cleanly(start("start", [db, "hang", "start"]))
        assert await long_turn(crash_db) == ("running", 0)  # the stopped run is not counted
        for n in (1, 2):
            stopped_cleanly(start(f"recover{n}", [db, "hang"]))
            assert await long_turn(crash_db) == ("running", 0)
        done = start("recover3", [db, "finish"])
        done.finish()

    assert done.printed("RESULT ") == ["completed"], done.explain()
    assert await long_turn(crash_db) == ("completed", 1)


async def test_a_clean_stop_between_deaths_neither_counts_nor_forgives_them(tmp_path, crash_db):
    db = crash_db.where
    with start_children(ChildProcess, STOP_CHILD, tmp_path) as start:
        killed_by_its_tool(start("start", [db, "kill", "start"]))
        stopped_cleanly(start("stopped", [db, "hang"]))
        assert await long_turn(crash_db) == ("running", 1)  # the death stays counted
        for n in (1, 2):
            killed_by_its_tool(start(f"recover{n}", [db, "kill"]))
        held = start("held", [db, "finish"])
        held.finish()

    assert held.printed("RESULT ") == ["interrupted"], held.explain()


async def test_a_held_turn_is_retried_through_the_live_session(tmp_path):
    store = await SQLiteStore.open(tmp_path / "live.db")
    key = SessionKey("a", "s")
    # what a process that died under the turn's every allowed run left behind
    died = TurnRecord(
        turn_id="t",
        seq=1,
        status="running",
        input=TurnInput(text="hi"),
        opening_index=0,
        runs=POISON_RUNS,
    )
    opening = StoredMessage(0, UserMessage(turn_id="t", text="hi"))
    await store.commit(key, Commit(messages=(opening,), turns=(died,), status="running"))
    agent = Agent(name="a", model=ScriptedModel(lambda request: reply(f"re {request.turn_id}")))
    async with AgentRuntime(store, agent, sweep_seconds=None) as runtime:
        session = runtime.session("a", "s")
        assert isinstance(await session.result("t"), Interrupted)

        first = await session.retry("t")  # runs now: no restart, no sweep
        done = await session.result(first)
        assert isinstance(done, Completed)
        assert done.text == "re t.retry"
        assert await held_turns(store) == []  # the retry decided the hold
        second = await session.retry("t")  # twice: two linked retries
        assert isinstance(await session.result(second), Completed)

        turns = {t.turn_id: t for t in await session.turns()}
        assert (first, second) == ("t.retry", "t.retry'")
        assert [turns[first].retry_of, turns[second].retry_of] == ["t", "t"]
        assert turns[first].input.text == turns[second].input.text == "hi"
        with pytest.raises(
            ConflictError, match="is completed; only a failed, cancelled or interrupted"
        ):
            await session.retry(first)  # a completed turn
        with pytest.raises(UnknownTurnError):
            await session.retry("nope")
    await store.close()
