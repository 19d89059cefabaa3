"""What the engine and the Claude adapter add to a streamed Messages API call.

Run it as a command (not a test)::

    python -m bench.claude_bench            # about half a minute on 2 cores
    python -m bench.claude_bench --quick

What it measures
    A local server that speaks the Messages API (`tests.fakes.anthropic_api`,
    the one the tests use) answers every request with the same reply: about
    1 KB of text streamed in 16-character deltas (64 text deltas). The server
    runs in the same process and event loop as the client, so both sides below
    pay for it equally.

    1. Raw SDK: ``AsyncAnthropic.messages.stream(...)`` consumed event by
       event, then ``get_final_message()``: the floor for one call.
    2. Engine: the same reply as a whole turn through the real engine
       (`AgentRuntime` on SQLite with ``synchronous=FULL`` -> `AgentSession.turn`
       -> `AnthropicModel`): the opening commit, one model step that streams
       64 ``message.delta`` events to a sink, and the commit of the reply with
       the turn's ending. A fresh session per turn.
    3. Time to first delta: from asking to the first text piece, raw SDK
       against the engine (which commits the turn's opening first).
    4. Prompt cache in a 10-step tool turn: per step, the input tokens sent
       fresh and read from the cache, as the fake counts them (the real API
       counts differently; the point is where breakpoints put the prefix).

How to read it
    ``median`` is the typical cost, ``p10``/``p90`` the spread. The engine's
    overhead is the difference between lines 2 and 1; most of it is the two
    fsync'ed SQLite commits a durable turn needs (see ``bench.turn_bench`` for
    what one costs here). A real Claude call takes hundreds of milliseconds to
    seconds, so the ratio that matters to a person is overhead / real latency.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic

from agent import (
    Agent,
    AgentRuntime,
    AnthropicModel,
    AnthropicSettings,
    SQLiteStore,
    TurnEvent,
    tool,
)
from tests.fakes.anthropic_api import FakeAnthropic, Reply

TEXT = ("The deploy is on Friday at noon. " * 32)[:1024]
CHUNK = 16


def _reply() -> Reply:
    return Reply([{"type": "text", "text": TEXT}], text_chunk=CHUNK)


def _percentiles(samples: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(samples, n=10)
    return cuts[0], statistics.median(samples), cuts[-1]


def _line(label: str, samples: list[float]) -> str:
    p10, median, p90 = _percentiles(samples)
    return (
        f"{label:<34} median {median * 1e3:8.2f} ms   p10 {p10 * 1e3:7.2f}   p90 {p90 * 1e3:7.2f}"
    )


async def _raw_calls(api: FakeAnthropic, n: int) -> tuple[list[float], list[float]]:
    totals: list[float] = []
    firsts: list[float] = []
    async with anthropic.AsyncAnthropic(api_key="test-key", base_url=api.base_url) as client:
        for _ in range(n):
            started = time.perf_counter()
            first: float | None = None
            async with client.messages.stream(
                model="claude-sonnet-5-5",
                max_tokens=1024,
                messages=[{"role": "user", "content": "When is the deploy?"}],
            ) as events:
                async for event in events:
                    if first is None and event.type == "content_block_delta":
                        first = time.perf_counter() - started
                await events.get_final_message()
            totals.append(time.perf_counter() - started)
            firsts.append(first or 0.0)
    return totals, firsts


async def _engine_turns(
    api: FakeAnthropic, folder: Path, n: int
) -> tuple[list[float], list[float]]:
    totals: list[float] = []
    firsts: list[float] = []
    first_delta: dict[str, float] = {}
    started_at: dict[str, float] = {}

    def watch(event: TurnEvent) -> None:
        if event.type == "message.delta" and event.session not in first_delta:
            first_delta[event.session] = time.perf_counter() - started_at[event.session]

    model = AnthropicModel(AnthropicSettings(api_key="test-key", base_url=api.base_url))
    store = await SQLiteStore.open(folder / "bench.db")
    try:
        agent = Agent(name="bench", model=model, instructions="Be brief.")
        async with AgentRuntime(store, agent, sink=_Sink(watch)) as runtime:
            for i in range(n):
                session = runtime.session("bench", f"s{i}")
                started_at[f"s{i}"] = time.perf_counter()
                await session.turn("When is the deploy?")
                totals.append(time.perf_counter() - started_at[f"s{i}"])
                firsts.append(first_delta[f"s{i}"])
    finally:
        await store.close()
        await model.aclose()
    return totals, firsts


class _Sink:
    def __init__(self, callback: Any) -> None:
        self.emit = callback


@tool
def lookup(n: int) -> dict[str, Any]:
    """Look up row n."""
    return {"n": n, "row": "x" * 200}


async def _cache_figures(api: FakeAnthropic, folder: Path) -> list[dict[str, int]]:
    calls = [Reply.tool("lookup", {"n": i}, id=f"toolu_{i}") for i in range(9)]
    api.queue(*calls, Reply.text("All ten rows read."))
    before = len(api.usages)
    model = AnthropicModel(AnthropicSettings(api_key="test-key", base_url=api.base_url))
    store = await SQLiteStore.open(folder / "cache.db")
    try:
        instructions = "You read rows for the team. " * 60  # a system prompt worth caching
        agent = Agent(name="bench", model=model, instructions=instructions, tools=[lookup])
        async with AgentRuntime(store, agent) as runtime:
            await runtime.session("bench", "cache").turn("Read rows 0 to 8.")
    finally:
        await store.close()
        await model.aclose()
    return api.usages[before:]


async def main(quick: bool) -> None:
    """Run the measurements and print them."""
    n = 60 if quick else 300
    with tempfile.TemporaryDirectory() as folder:
        async with FakeAnthropic(lambda body: _reply()) as api:
            await _raw_calls(api, 10)  # warm both paths: imports, connections, page cache
            warm = Path(folder) / "warm"
            warm.mkdir()
            await _engine_turns(api, warm, 10)
            raw, raw_first = await _raw_calls(api, n)
            engine, engine_first = await _engine_turns(api, Path(folder), n)
            usages = await _cache_figures(api, Path(folder))

    print(f"{n} calls each; reply = {len(TEXT)} characters in {len(TEXT) // CHUNK} deltas")
    print(_line("raw SDK stream, one call", raw))
    print(_line("engine turn (one model step)", engine))
    overhead = statistics.median(engine) - statistics.median(raw)
    print(
        f"{'engine overhead per turn':<34} median {overhead * 1e3:8.2f} ms"
        f"   ratio {statistics.median(engine) / statistics.median(raw):.2f}x"
    )
    print(_line("first delta, raw SDK", raw_first))
    print(_line("first delta, engine", engine_first))
    print()
    print("10-step tool turn, per step: fresh input / cache read / cache write (fake's count)")
    for step, usage in enumerate(usages, 1):
        print(
            f"  step {step:>2}: {usage['input_tokens']:>6} / "
            f"{usage['cache_read_input_tokens']:>6} / {usage['cache_creation_input_tokens']:>6}"
        )
    fresh = sum(u["input_tokens"] + u["cache_creation_input_tokens"] for u in usages)
    read = sum(u["cache_read_input_tokens"] for u in usages)
    print(f"  read from cache: {read / (fresh + read):.0%} of all input tokens")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short, noisier run")
    args = parser.parse_args()
    asyncio.run(main(args.quick))
    sys.exit(0)
