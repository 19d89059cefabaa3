"""``python -m bot``: run the bot (offline when there are no credentials)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

from agent import AgentRuntime, ConfigError, TurnError, TurnEvent, open_store
from agent.store import database_path
from bot import messages
from bot.config import Settings
from bot.offline import offline_agent

SESSION = "offline:terminal"
DEMO_LINE = "Remember that the deploy is on Friday."


def _show(event: TurnEvent) -> None:
    if event.type == "message.delta":
        sys.stdout.write(event.text)
    elif event.type == "action.requested":
        sys.stdout.write(f"\n  -> {event.name}({event.input})")
    elif event.type == "action.completed":
        sys.stdout.write(f"  = {event.error or event.result}\n")
    elif event.type in ("turn.completed", "turn.failed"):
        sys.stdout.write("\n" if event.type == "turn.completed" else f"\n[failed: {event.error}]\n")
    sys.stdout.flush()


async def run_offline(settings: Settings, given: list[str] | None) -> None:
    """Run turns of the offline agent on the configured database."""
    where = database_path(settings.database_url) or "memory"
    print(messages.NEEDS_CREDENTIALS)
    print(messages.offline_intro(where))
    store = await open_store(settings.database_url)
    try:
        async with AgentRuntime(store, offline_agent()) as runtime:
            session = runtime.session("bot", SESSION)
            await session.observe(_show)
            async for text in _lines(given):
                with contextlib.suppress(TurnError):  # _show printed it as it happened
                    await session.turn(text)
    finally:
        await store.close()


async def _lines(given: list[str] | None) -> AsyncIterator[str]:
    """Lines from the command line, else typed at a terminal, else one demo line."""
    if given is None and sys.stdin.isatty():
        while True:
            try:
                # input() blocks: keep it off the loop so recovered turns keep running
                line = (await asyncio.to_thread(input, "you> ")).strip()
            except EOFError:
                return
            if not line:
                return
            yield line
    for line in given or [DEMO_LINE]:
        print(f"you> {line}")
        yield line


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    settings = Settings()
    try:
        database_path(settings.database_url)
    except ConfigError as exc:
        print(f"Cannot start: {exc}", file=sys.stderr)
        return 2
    if settings.has_slack:
        print(messages.SLACK_NOT_BUILT, file=sys.stderr)
        return 2
    asyncio.run(run_offline(settings, args or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
