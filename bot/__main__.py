"""``python -m bot``: run the bot (a terminal chat when there are no Slack credentials)."""

from __future__ import annotations

import asyncio
import logging
import sys

from agent import ConfigError, open_store
from agent.store import database_path
from bot import messages
from bot.agents import build_agent
from bot.config import Settings, load_settings
from bot.terminal import chat


async def run_terminal(settings: Settings, given: list[str] | None) -> None:
    """Chat in the terminal with the configured agent, on the configured database."""
    agent = build_agent(settings)
    where = database_path(settings.database_url) or "memory"
    if settings.anthropic_api_key is not None:
        print(messages.terminal_with_claude(settings.anthropic_model, where))
    else:
        print(messages.NEEDS_CREDENTIALS)
        print(messages.offline_intro(where))
    store = await open_store(settings.database_url)
    try:
        await chat(store, agent, given)
    finally:
        await store.close()
        closing = getattr(agent.model, "aclose", None)
        if closing is not None:
            await closing()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    try:
        settings = load_settings()
    except ConfigError as exc:
        problems = "\n".join(f"  - {line}" for line in str(exc).splitlines())
        print(f"Cannot start; fix these settings first:\n{problems}", file=sys.stderr)
        return 2
    if settings.has_slack:
        from bot.slack.serve import serve_slack  # Bolt and aiohttp: only when serving Slack

        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        try:
            asyncio.run(serve_slack(settings))
        except ConfigError as exc:
            print(f"Cannot start: {exc}", file=sys.stderr)
            return 2
        return 0
    asyncio.run(run_terminal(settings, args or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
