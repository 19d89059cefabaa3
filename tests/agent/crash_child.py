"""One process of a crash test: runs (or recovers) a turn on a SQLite file or PostgreSQL.

Run by ``test_crash_recovery.py`` as a child process::

    python crash_child.py DATABASE LOG_PATH PHASE KILL_POINT

``PHASE`` is ``start`` (admit the turn, then wait for it) or ``recover`` (enter
a fresh runtime, which resumes the unfinished turn, then wait for it).
``KILL_POINT`` names a checkpoint boundary (see `KILL_POINTS`) or ``none``.
When the run reaches the kill point the process prints ``KILL-ME <point>``,
flushes, and freezes in ``time.sleep`` so that the parent can SIGKILL it
right there; nothing else is written by this process after the marker.

Every model call and every tool run is appended to ``LOG_PATH`` (one line,
flushed and fsynced), so the parent knows what each process asked for even
after a SIGKILL. On completion the process prints ``RESULT <json>``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable

from agent import (
    Agent,
    AgentRuntime,
    AssistantMessage,
    ModelReply,
    ModelRequest,
    ToolContext,
    ToolMessage,
    TurnEvent,
    tool,
)
from agent.testing import ScriptedModel, call, reply
from tests.agent.child_log import append_line
from tests.agent.child_store import open_child_store

AGENT = "shop"
SESSION = "s-crash"
TURN_ID = "turn-crash-1"
ITEM = "blue widget"
CHANNELS = ("ops", "sales")
FREEZE_SECONDS = 120  # the parent kills us long before; this only bounds an orphan

FIRST_TEXT = "I will place the order for the blue widget now."
SECOND_TEXT = "The order is placed; reserving stock and telling the team."


def final_text(order_id: int, reservation_id: int) -> str:
    """The last reply, built from the tool results in the transcript."""
    told = ", ".join(CHANNELS)
    return f"Ordered {ITEM} as order #{order_id} (reservation #{reservation_id}); told {told}."


class Child:
    """The state of this process: its log, its kill point, the step being streamed."""

    def __init__(self, log_path: str, kill_point: str) -> None:
        self.log_path = log_path
        self.kill_point = kill_point
        self.streaming_step: str | None = None

    def log(self, *fields: str) -> None:
        append_line(self.log_path, " ".join(fields))

    def freeze(self) -> None:
        """Announce the kill point and stop everything (the event loop included)."""
        print(f"KILL-ME {self.kill_point}", flush=True)
        time.sleep(FREEZE_SECONDS)
        os._exit(3)  # never reached when the parent does its job

    # -- the model -------------------------------------------------------------

    def script(self, request: ModelRequest) -> ModelReply:
        self.log("model", request.step)
        self.streaming_step = request.step
        replies = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        if replies == 0:
            return reply(FIRST_TEXT, call("place_order", {"item": ITEM}, id="c1"))
        if replies == 1:
            return reply(
                SECOND_TEXT,
                call("notify", {"channel": CHANNELS[0]}, id="c2"),
                call("reserve", {"item": ITEM}, id="c3"),
                call("notify", {"channel": CHANNELS[1]}, id="c4"),
            )
        if replies == 2:
            results = {m.call_id: m.result for m in request.messages if isinstance(m, ToolMessage)}
            return reply(final_text(results["c1"]["order_id"], results["c3"]["reservation_id"]))
        raise AssertionError(f"the model was asked a fourth time ({request.step})")

    # -- the tools ---------------------------------------------------------------

    def place_order(self, item: str, ctx: ToolContext) -> dict[str, int]:
        """Place an order (local: inside the step's transaction)."""
        return {"order_id": self._insert(ctx, "place_order", "orders", item, "local_tx")}

    def reserve(self, item: str, ctx: ToolContext) -> dict[str, int]:
        """Reserve stock (local: inside the step's transaction)."""
        return {
            "reservation_id": self._insert(ctx, "reserve", "reservations", item, "batch_local_tx")
        }

    def _insert(self, ctx: ToolContext, tool: str, table: str, item: str, kill_point: str) -> int:
        """Write one row through the step's transaction; freeze there if asked to."""
        self.log("local", tool, ctx.call_id)
        if ctx.store.paramstyle == "qmark":  # the store's own SQL: SQLite's
            ctx.store.execute(
                f"create table if not exists {table} (id integer primary key, item text not null)"
            )
            ctx.store.execute(f"insert into {table} (item) values (?)", [item])
            (row_id,) = ctx.store.execute("select last_insert_rowid()")[0]
        else:  # or PostgreSQL's
            ctx.store.execute(
                f"create table if not exists {table}"
                " (id integer generated always as identity primary key, item text not null)"
            )
            [(row_id,)] = ctx.store.execute(
                f"insert into {table} (item) values (%s) returning id", [item]
            )
        if self.kill_point == kill_point:
            self.freeze()
        return int(row_id)

    async def notify(self, channel: str, ctx: ToolContext) -> dict[str, str]:
        """Tell a channel (remote: at-least-once, deduped on the idempotency key)."""
        self.log("remote", "notify", ctx.call_id, ctx.idempotency_key)
        await asyncio.sleep(0)
        if self.kill_point == "remote_in_flight" and ctx.call_id == "c2":
            self.freeze()  # the side effect happened; its result is not committed
        return {"sent": channel}

    # -- where to stop -------------------------------------------------------------

    def is_kill_point(self, event: TurnEvent) -> bool:
        """Whether ``event`` marks this process's kill point."""
        checks: dict[str, Callable[[], bool]] = {
            # emitted right after the model step's commit
            "model_commit": lambda: event.type == "message.completed" and event.index == 1,
            "batch_model_commit": lambda: event.type == "message.completed" and event.index == 3,
            # emitted right after the tool step's commit
            "local_commit": lambda: event.type == "action.completed" and event.call_id == "c1",
            "batch_between": lambda: event.type == "action.completed" and event.call_id == "c2",
            # a delta of the second reply: streamed, not committed
            "mid_stream": lambda: (
                event.type == "message.delta" and self.streaming_step == "model:3"
            ),
        }
        check = checks.get(self.kill_point)
        return check is not None and check()

    def observe(self, event: TurnEvent) -> None:
        if self.is_kill_point(event):
            self.freeze()

    def agent(self) -> Agent:
        return Agent(
            name=AGENT,
            # the kill points stand between calls of a batch run one by one; batches
            # run concurrently are killed in test_parallel_crash.py
            max_parallel_calls=1,
            model=ScriptedModel(self.script, chunk=8),
            instructions="You run a small shop.",
            tools=[
                tool(self.place_order),
                tool(self.reserve),
                tool(self.notify),
            ],
        )


async def main(database: str, log_path: str, phase: str, kill_point: str) -> None:
    child = Child(log_path, kill_point)
    store = await open_child_store(database)
    try:
        runtime = AgentRuntime(store, child.agent())
        session = runtime.session(AGENT, SESSION)
        # subscribe before entering: entering the runtime is what resumes the turn
        await session.observe(child.observe)
        async with runtime:
            if phase == "start":
                await session.start("Please order a blue widget.", turn_id=TURN_ID)
            elif phase != "recover":
                raise SystemExit(f"unknown phase {phase!r}")
            result = await session.result(TURN_ID)
    finally:
        await store.close()
    text = getattr(result, "text", None)
    print("RESULT " + json.dumps({"type": type(result).__name__, "text": text}), flush=True)


if __name__ == "__main__":
    db, log, phase_arg, kill = sys.argv[1:5]
    asyncio.run(main(db, log, phase_arg, kill))
