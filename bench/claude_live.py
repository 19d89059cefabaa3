"""One real conversation with Claude, as the bot would hold it: run it before a release.

Run it as a command, with the bot's own settings (the environment or ``.env``)::

    ANTHROPIC_API_KEY=sk-ant-... python -m bench.claude_live

What it does
    It builds the model exactly as the bot does (``ANTHROPIC_MODEL``,
    ``ANTHROPIC_THINKING``, ``ANTHROPIC_EFFORT``, ...), asks the Models API
    whether the key may use it, then runs two turns of one session through the
    real engine on a throwaway SQLite file:

    1. a question that needs the ``multiply`` tool: the model must call it,
       stream its reply in pieces, and answer with the tool's result;
    2. a follow-up in the same session, whose prompt starts with everything
       turn 1 sent (a system prompt long enough to be cached on every model):
       it must read the prompt cache.

    It prints each model call's usage and each check, and exits 1 if a check
    failed, 2 if the settings or the API refused. Without ``ANTHROPIC_API_KEY``
    it says what it needs and exits 0. It costs a few cents of tokens.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from agent import (
    Agent,
    AgentRuntime,
    ConfigError,
    SQLiteStore,
    TurnEvent,
    TurnFailedError,
    Usage,
    tool,
)
from bot.settings import Settings, load_settings

FIRST = "What is 1234 times 5678? Use the multiply tool, then tell me the number."
SECOND = "Now add 1 to that number and tell me the result."
PRODUCT = 1234 * 5678

# the shortest prompt the cache takes is 512 to 4,096 tokens depending on the model:
# about 5,000 tokens of instructions are cacheable on every one
INSTRUCTIONS = "You are a careful calculator for a team in Slack. Answer briefly.\n\n" + "\n".join(
    f"Rule {n}: when a question involves arithmetic, use the tools you are given rather "
    "than computing in your head, then state the result plainly in one sentence."
    for n in range(1, 161)
)


@tool
def multiply(a: int, b: int) -> dict[str, int]:
    """Multiply two whole numbers and return the product."""
    return {"product": a * b}


@dataclass
class _Watch:
    """What the turns emitted, counted per turn."""

    deltas: dict[str, int] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)
    tools: dict[str, list[str]] = field(default_factory=dict)

    def emit(self, event: TurnEvent) -> None:
        if event.type == "message.delta":
            self.deltas[event.turn_id] = self.deltas.get(event.turn_id, 0) + 1
        elif event.type == "reasoning.delta":
            self.notes[event.turn_id] = self.notes.get(event.turn_id, 0) + 1
        elif event.type == "action.completed" and event.error is None:
            self.tools.setdefault(event.turn_id, []).append(event.name)


def _usage_line(label: str, usage: Usage | None) -> str:
    u = usage or Usage()
    return (
        f"  {label}: input {u.input_tokens}, cache read {u.cache_read_input_tokens}, "
        f"cache write {u.cache_creation_input_tokens}, output {u.output_tokens}"
    )


async def run(settings: Settings, folder: Path) -> list[tuple[str, bool]]:
    """Both turns; each check with whether it held.

    Raises:
        ConfigError: The settings, or the Models API, refused.
    """
    from agent import AnthropicModel  # the SDK: only once there is a key

    anthropic = settings.anthropic()
    model = AnthropicModel(anthropic)
    shape = anthropic.shape()
    print(f"model {anthropic.model}: thinking {shape.thinking}, output {shape.output_config}")
    watch = _Watch()
    store = await SQLiteStore.open(folder / "live.db")
    try:
        await model.check_access()
        print("  the Models API knows the model and the key may use it")
        agent = Agent(name="live", model=model, instructions=INSTRUCTIONS, tools=[multiply])
        async with AgentRuntime(store, agent, sink=watch) as runtime:
            session = runtime.session("live", "release-check")
            first = await session.turn(FIRST, turn_id="t1")
            print(_usage_line("turn 1", first.usage))
            second = await session.turn(SECOND, turn_id="t2")
            print(_usage_line("turn 2", second.usage))
    finally:
        await store.close()
        await model.aclose()
    # not a check: a model writes a note between tool calls only when it has one to write
    print(f"  turn 1 streamed {watch.notes.get('t1', 0)} piece(s) of progress (thinking shown)")
    said = first.text.replace(",", "").replace(" ", "")
    said_next = second.text.replace(",", "").replace(" ", "")
    return [
        ("turn 1 called the multiply tool", watch.tools.get("t1") == ["multiply"]),
        ("turn 1 streamed its reply in pieces", watch.deltas.get("t1", 0) > 1),
        (f"turn 1 answered {PRODUCT}", str(PRODUCT) in said),
        (f"turn 2 answered {PRODUCT + 1}", str(PRODUCT + 1) in said_next),
        (
            "turn 2 read the prompt cache",
            second.usage is not None and second.usage.cache_read_input_tokens > 0,
        ),
    ]


def main() -> int:
    """Run the check; the process exit code."""
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"Cannot run: {exc}", file=sys.stderr)
        return 2
    if settings.anthropic_api_key is None:
        print(
            "bench.claude_live talks to the real Messages API and needs ANTHROPIC_API_KEY "
            "(and, optionally, ANTHROPIC_MODEL, ANTHROPIC_THINKING, ANTHROPIC_EFFORT as the "
            "bot would use them). Nothing was sent."
        )
        return 0
    with tempfile.TemporaryDirectory() as folder:
        try:
            checks = asyncio.run(run(settings, Path(folder)))
        except ConfigError as exc:
            print(f"Cannot run: {exc}", file=sys.stderr)
            return 2
        except TurnFailedError as exc:
            print(f"FAIL: a turn failed: {exc}", file=sys.stderr)
            return 1
    for label, held in checks:
        print(f"{'ok  ' if held else 'FAIL'} {label}")
    failed = [label for label, held in checks if not held]
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
