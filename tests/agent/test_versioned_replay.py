"""Issue 22, point 4: a turn recorded under the old loop shape finishes on that shape.

``fixtures/before_parallel.sqlite`` was written by the code before the calls of
a batch ran concurrently (see ``make_before_parallel.py``): its turn was
SIGKILLed inside the second of three remote calls, after the first one's
result committed. Today's code must resume that turn one call after another, as
it was recorded, while a turn opened today takes the concurrent shape.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from agent import AgentRuntime, Completed, SessionKey, SQLiteStore
from agent.engine.turn.patches import PARALLEL_CALLS, PATCHES, patched
from tests.agent.fixtures.make_before_parallel import (
    AGENT,
    ASK,
    CITIES,
    CRASHED,
    CRASHED_TURN,
    make_agent,
)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "before_parallel.sqlite"
WAIT = 10.0


@pytest.fixture
def old_database(tmp_path: Path) -> Path:
    path = tmp_path / "before_parallel.sqlite"
    shutil.copyfile(FIXTURE, path)
    return path


class AllStarted:
    """A pause each lookup awaits: it returns once every lookup of the batch has begun."""

    def __init__(self) -> None:
        self._arrived = 0
        self._everyone_in = asyncio.Event()

    async def __call__(self) -> None:
        self._arrived += 1
        if self._arrived == len(CITIES):
            self._everyone_in.set()
        await asyncio.wait_for(self._everyone_in.wait(), WAIT)


async def test_a_turn_recorded_before_parallel_calls_finishes_one_call_at_a_time(old_database):
    ran: list[str] = []
    store = await SQLiteStore.open(str(old_database))
    try:
        before = (await store.load(CRASHED)).turns[CRASHED_TURN]
        assert before.status == "running"
        assert before.patches == ()
        assert not patched(before, PARALLEL_CALLS)

        # each lookup yields to the loop while it works, so calls run together would
        # interleave their lines; run one after another they cannot
        async def working() -> None:
            await asyncio.sleep(0.02)

        async with AgentRuntime(store, make_agent(ran, pause=working)) as runtime:
            result = await asyncio.wait_for(
                runtime.session(AGENT, CRASHED.session_id).result(CRASHED_TURN), WAIT
            )

        assert result == Completed(
            turn_id=CRASHED_TURN, text="Skies: Oslo snow, Rome sun, Lima fog."
        )
        # Oslo's result was on disk; Rome was in flight at the kill; Lima never began
        assert ran == ["start Rome", "end Rome", "start Lima", "end Lima"]
        after = (await store.load(CRASHED)).turns[CRASHED_TURN]
        assert after.patches == ()  # it keeps the shape it was recorded under
    finally:
        await store.close()


async def test_a_turn_opened_today_in_the_same_database_runs_its_calls_together(old_database):
    ran: list[str] = []
    pauses = [_no_pause]
    store = await SQLiteStore.open(str(old_database))
    try:
        async with AgentRuntime(store, make_agent(ran, pause=lambda: pauses[-1]())) as runtime:
            old = await asyncio.wait_for(
                runtime.session(AGENT, CRASHED.session_id).result(CRASHED_TURN), WAIT
            )
            assert isinstance(old, Completed)
            ran.clear()
            pauses.append(AllStarted())
            new = await runtime.session(AGENT, "today").turn(ASK, turn_id="t-today")

        # all three lookups began before any ended: only the new shape gets past the pause
        assert ran[:3] == [f"start {city}" for city in CITIES]
        assert new.text == "Skies: Oslo snow, Rome sun, Lima fog."
        record = (await store.load(SessionKey(AGENT, "today"))).turns["t-today"]
        assert record.patches == PATCHES
        assert patched(record, PARALLEL_CALLS)
    finally:
        await store.close()


async def _no_pause() -> None:
    return None


def test_asking_for_a_marker_this_code_does_not_know_is_an_error():
    with pytest.raises(ValueError, match="unknown loop shape marker"):
        patched(None, "parallel-cals")  # type: ignore[arg-type]
