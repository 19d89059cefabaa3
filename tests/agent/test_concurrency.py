"""50 sessions x 5 turns at once, each turn writing through ctx.store in local tools."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from agent import Agent, AgentRuntime, Completed, SQLiteStore, ToolContext, ToolMessage, tool
from agent.core.records import SessionKey
from agent.testing import ScriptedModel, call, reply
from tests.agent.helpers import last_tool_results

SESSIONS = 50
TURNS = 5


@tool
def record(session: str, turn: int, part: int, ctx: ToolContext) -> dict[str, int]:
    """Append two ledger rows that must be adjacent if nothing interleaves."""
    ctx.store.execute(
        "CREATE TABLE IF NOT EXISTS ledger (session TEXT, turn INTEGER, part INTEGER, mark TEXT)"
    )
    ctx.store.execute("INSERT INTO ledger VALUES (?, ?, ?, 'begin')", [session, turn, part])
    [(begin,)] = ctx.store.execute("SELECT last_insert_rowid()")
    ctx.store.execute("INSERT INTO ledger VALUES (?, ?, ?, 'end')", [session, turn, part])
    [(end,)] = ctx.store.execute("SELECT last_insert_rowid()")
    return {"begin": begin, "end": end}


def script(request):
    # each turn: one reply with a batch of two local calls, then a final reply
    opening = next(m for m in reversed(request.messages) if m.role == "user")
    session, turn = opening.text.split("/")
    if request.messages[-1].role == "user":
        calls = [call("record", {"session": session, "turn": int(turn), "part": p}) for p in (1, 2)]
        return reply("", *calls)
    results = last_tool_results(request)
    return reply(f"{session}/{turn} rows {[r.result['begin'] for r in results]}")


async def test_fifty_sessions_of_five_turns_never_interleave_or_lose_a_write(tmp_path):
    store = await SQLiteStore.open(tmp_path / "busy.db")
    agent = Agent(name="a", model=ScriptedModel(script), tools=[record])
    async with AgentRuntime(store, agent) as runtime:

        async def drive(s: int) -> list[str]:
            session = runtime.session("a", f"s{s}")
            ids = [await session.start(f"s{s}/{t}") for t in range(TURNS)]
            return [(await session.result(i)).status for i in ids]

        statuses = await asyncio.gather(*(drive(s) for s in range(SESSIONS)))

    assert statuses == [["completed"] * TURNS] * SESSIONS
    rows = await store._run(
        lambda c: c.execute(
            "SELECT rowid, session, turn, part, mark FROM ledger ORDER BY rowid"
        ).fetchall()
    )
    # no write lost: two rows per call, two calls per turn
    assert len(rows) == SESSIONS * TURNS * 2 * 2
    # no interleaving: every call's begin/end rows are adjacent, nothing between them
    for (rid_a, *call_a, mark_a), (rid_b, *call_b, mark_b) in zip(
        rows[::2], rows[1::2], strict=True
    ):
        assert (mark_a, mark_b) == ("begin", "end")
        assert call_a == call_b
        assert rid_b == rid_a + 1
    # each session's order kept: its ledger rows go turn 0..4, part 1 then 2
    per_session: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for _, session, turn, part, mark in rows:
        if mark == "begin":
            per_session[session].append((turn, part))
    expected = [(t, p) for t in range(TURNS) for p in (1, 2)]
    assert all(order == expected for order in per_session.values())
    assert len(per_session) == SESSIONS
    # and each transcript holds its five turns in order, each whole
    for s in range(SESSIONS):
        stored = await store.load(SessionKey("a", f"s{s}"))
        roles = [m.role for m in stored.transcript]
        assert roles == ["user", "assistant", "tool", "tool", "assistant"] * TURNS
        openings = [m.text for m in stored.transcript if m.role == "user"]
        assert openings == [f"s{s}/{t}" for t in range(TURNS)]
        tools = [m for m in stored.transcript if isinstance(m, ToolMessage)]
        assert all(m.result["end"] == m.result["begin"] + 1 for m in tools)
        assert all(isinstance(r, Completed) for r in [t.result for t in stored.turns.values()])
    await store.close()
