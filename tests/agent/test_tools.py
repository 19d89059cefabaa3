"""Rules 8-12: declaring tools, local vs remote, errors as results, FatalToolError."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from agent import (
    Agent,
    AgentRuntime,
    Completed,
    ConfigError,
    Failed,
    FatalToolError,
    MemoryStore,
    ToolContext,
    ToolMessage,
    tool,
)
from agent.core.records import SessionKey
from agent.testing import RecordingSink, ScriptedModel, call, reply
from tests.agent.helpers import assistant_count, has_table, mark, select

KEY = SessionKey("a", "s1")


def calling(*calls, final="ok"):
    """A script that makes ``calls`` in one reply, then answers ``final``."""

    def script(request):
        return reply("", *calls) if assistant_count(request) == 0 else reply(final)

    return script


async def run_turn(store, tools, script, sink=None, **agent_fields):
    agent = Agent(name="a", model=ScriptedModel(script), tools=tools, **agent_fields)
    async with AgentRuntime(store, agent, sink=sink) as runtime:
        session = runtime.session("a", "s1")
        return await session.result(await session.start("go"))


async def tool_messages(store) -> list[ToolMessage]:
    stored = await store.load(KEY)
    return [m for m in stored.transcript if isinstance(m, ToolMessage)]


# -- declaring ----------------------------------------------------------------


class Address(BaseModel):
    street: str
    city: str


def test_schema_comes_from_type_hints_and_docstring():
    @tool
    def ship(
        item: Annotated[str, Field(description="what to ship")],
        to: Address,
        count: int = 1,
        ctx: ToolContext | None = None,
    ) -> str:
        """Ship an item to an address."""
        return "ok"

    spec = ship.spec
    assert spec.name == "ship"
    assert spec.description == "Ship an item to an address."
    schema = spec.input_schema
    assert schema["required"] == ["item", "to"]
    assert schema["properties"]["item"]["description"] == "what to ship"
    assert schema["properties"]["count"]["default"] == 1
    assert "ctx" not in schema["properties"]  # an optional context is still the context


def test_context_parameter_is_not_part_of_the_schema():
    @tool(name="send", description="Send it.")
    async def send_it(text: str, ctx: ToolContext) -> str:
        return text

    assert send_it.name == "send"
    assert not send_it.is_local
    assert list(send_it.spec.input_schema["properties"]) == ["text"]
    assert send_it.context_param == "ctx"


def test_plain_def_is_local_and_async_def_is_remote():
    @tool
    def local() -> int:
        """Local."""
        return 1

    @tool
    async def remote() -> int:
        """Remote."""
        return 1

    assert (local.is_local, remote.is_local) == (True, False)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        pytest.param("def f(x):\n    'Doc.'\n", "needs a type hint", id="untyped"),
        pytest.param("def f(x: int):\n    pass\n", "description or a docstring", id="no-doc"),
        pytest.param("async def f():\n    'Doc.'\n    yield 1\n", "generator", id="generator"),
    ],
)
def test_bad_declarations_are_config_errors(source, message):
    namespace: dict = {}
    exec(source, namespace)
    with pytest.raises(ConfigError, match=message):
        tool(namespace["f"])


def test_two_tools_with_one_name_is_a_config_error():
    @tool
    def dup() -> int:
        """One."""
        return 1

    with pytest.raises(ConfigError, match="two tools are named 'dup'"):
        Agent(name="a", model=ScriptedModel(lambda r: reply("x")), tools=[dup, dup])


# -- input validation ----------------------------------------------------------


async def test_invalid_input_is_an_error_result_the_model_can_read(store):
    ran = []

    @tool
    def count(n: int) -> int:
        """Count."""
        ran.append(n)
        return n

    result = await run_turn(store, [count], calling(call("count", {"n": "many"}, id="c1")))

    assert isinstance(result, Completed)
    assert ran == []
    [message] = await tool_messages(store)
    assert message.is_error
    assert message.result["error"].startswith("ToolError: invalid input for count: n:")


async def test_unknown_tool_is_an_error_result(store):
    result = await run_turn(store, [], calling(call("nope", id="c1")))

    assert isinstance(result, Completed)
    [message] = await tool_messages(store)
    assert message.result == {"error": "ToolError: unknown tool: nope"}


# -- local tools: exactly once, inside the step's transaction -----------------


@tool
def create_order(item: str, ctx: ToolContext) -> dict[str, object]:
    """Place an order."""
    ctx.store.execute("CREATE TABLE IF NOT EXISTS orders (item TEXT NOT NULL)")
    ctx.store.execute(f"INSERT INTO orders (item) VALUES ({mark(ctx.store)})", [item])
    [(n,)] = ctx.store.execute("SELECT count(*) FROM orders")
    return {"item": item, "orders": n, "thread": threading.get_ident()}


async def test_local_tool_runs_on_the_store_thread_and_commits_with_the_step(sqlite_store):
    result = await run_turn(
        sqlite_store, [create_order], calling(call("create_order", {"item": "tea"}, id="c1"))
    )

    assert isinstance(result, Completed)
    [message] = await tool_messages(sqlite_store)
    assert message.result["orders"] == 1
    assert message.result["thread"] == sqlite_store.thread_ident
    assert message.result["thread"] != threading.get_ident()
    rows = await sqlite_store._run(lambda c: c.execute("SELECT item FROM orders").fetchall())
    assert rows == [("tea",)]


async def test_a_local_tools_write_commits_once_with_its_step_on_every_store(tx_store):
    result = await run_turn(
        tx_store, [create_order], calling(call("create_order", {"item": "tea"}, id="c1"))
    )

    assert isinstance(result, Completed)
    [message] = await tool_messages(tx_store)
    assert message.result["orders"] == 1
    assert message.result["thread"] != threading.get_ident()  # never the event loop's
    assert await select(tx_store, "SELECT item FROM orders") == [("tea",)]


async def test_local_tool_that_raises_rolls_back_its_writes_and_reports(tx_store):
    @tool
    def half_done(item: str, ctx: ToolContext) -> str:
        """Write, then fail."""
        ctx.store.execute("CREATE TABLE IF NOT EXISTS orders (item TEXT NOT NULL)")
        ctx.store.execute(f"INSERT INTO orders (item) VALUES ({mark(ctx.store)})", [item])
        raise LookupError("no such warehouse")

    result = await run_turn(
        tx_store,
        [half_done],
        calling(call("half_done", {"item": "tea"}, id="c1"), final="sorry"),
    )

    assert isinstance(result, Completed)
    [message] = await tool_messages(tx_store)
    assert message.result == {"error": "LookupError: no such warehouse"}
    # even the CREATE TABLE rolled back with the failed call
    assert not await has_table(tx_store, "orders")
    steps = await tx_store.load_steps(KEY, result.turn_id)
    assert steps["tool:1:c1"]["is_error"] is True


async def test_tool_cannot_control_the_steps_transaction(tx_store):
    @tool
    def sneaky(ctx: ToolContext) -> str:
        """Commit early."""
        ctx.store.execute("COMMIT")
        return "committed?"

    await run_turn(tx_store, [sneaky], calling(call("sneaky", id="c1")))

    [message] = await tool_messages(tx_store)
    assert message.result == {"error": "StoreError: a tool cannot control the step's transaction"}


async def test_def_returning_an_awaitable_fails_that_call_naming_the_tool(store):
    async def later() -> str:
        return "late"

    @tool
    def sloppy() -> object:
        """Forgot async."""
        return later()

    result = await run_turn(store, [sloppy], calling(call("sloppy", id="c1")))

    assert isinstance(result, Completed)
    [message] = await tool_messages(store)
    assert message.is_error
    assert "tool sloppy is a plain def that returned an awaitable" in message.result["error"]


async def test_memory_store_has_no_handle_so_ctx_store_fails_the_turn():
    store = MemoryStore()
    result = await run_turn(store, [create_order], calling(call("create_order", {"item": "x"})))

    assert isinstance(result, Failed)
    assert result.phase == "tool"
    assert "FatalToolError" in result.error
    assert "transactional" in result.error


# -- remote tools ---------------------------------------------------------------


async def test_remote_tool_gets_a_stable_idempotency_key(store):
    keys = []

    @tool
    async def charge(amount: int, ctx: ToolContext) -> str:
        """Charge a card."""
        await asyncio.sleep(0)
        keys.append((ctx.turn_id, ctx.call_id, ctx.idempotency_key))
        return "charged"

    result = await run_turn(store, [charge], calling(call("charge", {"amount": 5}, id="c1")))

    [(turn_id, call_id, key)] = keys
    assert (turn_id, call_id) == (result.turn_id, "c1")
    from agent.definition.tools import idempotency_key

    assert key == idempotency_key(result.turn_id, "c1")
    assert key != idempotency_key(result.turn_id, "c2")
    assert len(key) == 32


# -- errors as results --------------------------------------------------------


class QuotaError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(QuotaError("quota exceeded"), "QuotaError: quota exceeded", id="class-prefix"),
        pytest.param(Exception("plain words"), "plain words", id="plain-exception"),
        pytest.param(ValueError(), "ValueError", id="no-message"),
        pytest.param(RuntimeError("x" * 5000), "RuntimeError: " + "x" * 1986, id="cut-to-2000"),
    ],
)
async def test_tool_that_raises_becomes_an_error_result(store, exc, expected):
    @tool
    async def fails() -> str:
        """Fail."""
        raise exc

    sink = RecordingSink()
    result = await run_turn(store, [fails], calling(call("fails", id="c1"), final="handled"), sink)

    assert isinstance(result, Completed)
    [message] = await tool_messages(store)
    assert message.result == {"error": expected}
    assert len(message.result["error"]) <= 2000
    assert "Traceback" not in message.result["error"]
    [completed] = [e for e in sink.events if e.type == "action.completed"]
    assert completed.error == expected


async def test_error_result_is_checkpointed_and_not_rerun(store):
    attempts = []

    @tool
    async def flaky() -> str:
        """Fail once."""
        attempts.append(1)
        raise OSError("disk full")

    result = await run_turn(store, [flaky], calling(call("flaky", id="c1")))
    steps = await store.load_steps(KEY, result.turn_id)

    assert steps["tool:1:c1"] == {"message": 2, "is_error": True}
    [message] = await tool_messages(store)
    assert message.result == {"error": "OSError: disk full"}
    assert attempts == [1]


@pytest.mark.parametrize("local", [True, False], ids=["local", "remote"])
async def test_fatal_tool_error_fails_the_turn_and_closes_the_batch(store, local):
    if local:

        @tool
        def doom() -> str:
            """Break."""
            raise FatalToolError("deployment is missing its bucket")

    else:

        @tool
        async def doom() -> str:
            """Break."""
            raise FatalToolError("deployment is missing its bucket")

    @tool
    async def after() -> str:
        """Never runs."""
        raise AssertionError("ran after a fatal error")

    sink = RecordingSink()
    # one call at a time: the call after the fatal one never starts
    result = await run_turn(
        store,
        [doom, after],
        calling(call("doom", id="c1"), call("after", id="c2")),
        sink,
        max_parallel_calls=1,
    )

    assert isinstance(result, Failed)
    assert (result.phase, result.step) == ("tool", "tool:1:c1")
    assert result.error == "FatalToolError: deployment is missing its bucket"
    # both calls got a closing result, so the next model call sees a valid transcript
    messages = await tool_messages(store)
    assert [(m.call_id, m.is_error) for m in messages] == [("c1", True), ("c2", True)]
    # the call that raised ran: it keeps its own error; only the call after it was not run
    assert [m.result for m in messages] == [
        {"error": "FatalToolError: deployment is missing its bucket"},
        {"error": "not run: the turn failed before this call"},
    ]
    assert sink.types()[-1] == "turn.failed"


async def test_a_fatal_error_in_a_concurrent_batch_fails_the_turn_once_the_others_end(store):
    doomed = asyncio.Event()

    @tool
    async def doom() -> str:
        """Break."""
        doomed.set()
        raise FatalToolError("deployment is missing its bucket")

    @tool
    async def slow() -> str:
        """Finish after the fatal call raised."""
        await doomed.wait()
        return "slow done"

    @tool
    async def later() -> str:
        """Start only once a slot is free."""
        raise AssertionError("started after the fatal error")

    sink = RecordingSink()
    calls = calling(call("slow", id="c0"), call("doom", id="c1"), call("later", id="c2"))
    result = await run_turn(store, [doom, slow, later], calls, sink, max_parallel_calls=2)

    assert isinstance(result, Failed)
    assert (result.phase, result.step) == ("tool", "tool:1:c1")
    messages = await tool_messages(store)
    # the call already running when the fatal one raised ran to its own result; the call
    # still waiting for a slot never started; the transcript keeps call order
    assert [(m.call_id, m.result) for m in messages] == [
        ("c0", "slow done"),
        ("c1", {"error": "FatalToolError: deployment is missing its bucket"}),
        ("c2", {"error": "not run: the turn failed before this call"}),
    ]
    assert [e.call_id for e in sink.events if e.type == "action.requested"] == ["c0", "c1"]


@pytest.mark.parametrize(
    "statement",
    [
        "/* looks harmless */ COMMIT",
        "commit",
        "  SAVEPOINT mine",
        "END",
        "-- a note\nCOMMIT",
        "SELECT 1; COMMIT",
        "/* a */ /* b */ rollback",
    ],
)
async def test_tool_cannot_end_the_transaction_however_it_spells_it(tx_store, statement):
    @tool
    def sneaky(ctx: ToolContext) -> str:
        """Write, then try to commit early."""
        ctx.store.execute("CREATE TABLE IF NOT EXISTS charges (amount INTEGER)")
        ctx.store.execute("INSERT INTO charges VALUES (5)")
        ctx.store.execute(statement)
        return "committed?"

    result = await run_turn(tx_store, [sneaky], calling(call("sneaky", id="c1")))

    assert isinstance(result, Completed)
    [message] = await tool_messages(tx_store)
    assert message.is_error
    assert not await has_table(tx_store, "charges")  # the write rolled back with the call


async def test_remote_tool_whose_awaited_work_is_cancelled_gets_an_error_result(store):
    @tool
    async def wait_on_job() -> str:
        """Await a job somebody else cancels."""
        job: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        job.cancel()
        return await job

    result = await run_turn(store, [wait_on_job], calling(call("wait_on_job", id="c1")))

    assert isinstance(result, Completed)
    [message] = await tool_messages(store)
    assert message.result == {"error": "CancelledError"}


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise KeyError("status")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(BrokenStr(), "BrokenStr", id="broken-str"),
        pytest.param(Exception(), "Exception", id="empty-plain-exception"),
    ],
)
async def test_odd_exceptions_still_become_readable_error_results(store, exc, expected):
    @tool
    async def odd() -> str:
        """Fail oddly."""
        raise exc

    result = await run_turn(store, [odd], calling(call("odd", id="c1")))

    assert isinstance(result, Completed)
    [message] = await tool_messages(store)
    assert message.result == {"error": expected}


async def test_live_result_equals_what_the_store_keeps(store):
    @tool
    def measure() -> dict[str, float]:
        """Return a value JSON cannot hold."""
        return {"ratio": float("nan"), "ok": 1.5}

    seen = []

    def script(request):
        if assistant_count(request) == 0:
            return reply("", call("measure", id="c1"))
        seen.append(request.messages[-1].result)
        return reply("done")

    result = await run_turn(store, [measure], script)

    assert isinstance(result, Completed)
    [message] = await tool_messages(store)
    assert seen == [{"ratio": None, "ok": 1.5}] == [message.result]


async def test_two_fatal_calls_of_one_batch_each_keep_their_own_error(store):
    both_in = asyncio.Event()
    ran: list[str] = []

    @tool
    async def boom(n: int, ctx: ToolContext) -> str:
        """Start something, then fail the turn."""
        ran.append(ctx.call_id)
        if len(ran) == 2:
            both_in.set()
        await both_in.wait()  # both are under way before either raises
        raise FatalToolError(f"boom {n}")

    result = await run_turn(
        store, [boom], calling(call("boom", {"n": 1}, id="c1"), call("boom", {"n": 2}, id="c2"))
    )

    assert isinstance(result, Failed)
    assert result.step == "tool:1:c1"  # the turn names the first in call order
    # each ran, so each tells the model its own error rather than "not run"
    assert [m.result for m in await tool_messages(store)] == [
        {"error": "FatalToolError: boom 1"},
        {"error": "FatalToolError: boom 2"},
    ]
