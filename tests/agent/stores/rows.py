"""What the contract tests commit: a session key or two, and builders of rows."""

from __future__ import annotations

from agent import MemoryStore, SQLiteStore, TurnInput, UserMessage
from agent.core.records import Commit, SessionKey, StoredMessage, StoredStep
from agent.core.turns import TurnRecord, TurnStatus
from agent.stores.postgres import PostgresStore

Store = MemoryStore | SQLiteStore | PostgresStore
"""Every store `conftest.STORES` opens."""

KEY = SessionKey("a", "s1")
OTHER = SessionKey("a", "s2")


def message(i: int, turn_id: str = "t1") -> StoredMessage:
    return StoredMessage(i, UserMessage(turn_id=turn_id, text=f"m{i}"))


def record(turn_id: str, seq: int, status: TurnStatus = "queued", text: str = "x") -> TurnRecord:
    return TurnRecord(turn_id=turn_id, seq=seq, status=status, input=TurnInput(text=text))


def step(step_id: str, turn_id: str = "t1", result: object = None) -> StoredStep:
    return StoredStep(step_id, turn_id, {"of": step_id} if result is None else result)


async def a_session_of_two_turns(store: Store) -> None:
    await store.commit(
        KEY,
        Commit(
            messages=(message(0), message(1)),
            steps=(step("model:1"),),
            turns=(record("t1", 1, "completed", text="first"),),
            status="idle",
        ),
    )
    await store.commit(
        KEY,
        Commit(
            messages=(message(2, "t2"),),
            steps=(step("model:3", "t2"),),
            turns=(record("t2", 2, "cancelled"),),
            cancels=(("t2", "reset"),),
        ),
    )
