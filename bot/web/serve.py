"""Local mode: ``python -m bot`` with no Slack credentials serves the console and the API.

With no ``API_TOKENS`` it listens on loopback only and the person at this
machine is the attested speaker; with tokens it listens on every interface and
each token speaks for its principal.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import AsyncIterator, Callable

from agent import (
    Agent,
    AgentRuntime,
    EventLog,
    SessionKey,
    database_path,
    open_store,
    resolve_policy,
    warn_unmounted_surfaces,
)
from bot import texts
from bot.agent_factory import build_agent, check_model
from bot.config_file import load_bot_config
from bot.offline import DEMO_MODEL_NAME
from bot.settings import Settings
from bot.web.api import SOURCE, Api
from bot.web.app import listening, web_application
from bot.web.auth import ApiAuth

__all__ = ["PRUNE_EVERY_SECONDS", "api_for", "event_log_for", "pruning", "serve_local"]

logger = logging.getLogger("bot.web")

PRUNE_EVERY_SECONDS = 3600.0


def event_log_for(
    settings: Settings, runtime: AgentRuntime, *, only: Callable[[SessionKey], bool] | None = None
) -> EventLog:
    """The runtime's event log (of the sessions ``only`` names), registered as its sink."""
    log = EventLog(runtime.store, retention=settings.event_log_retention_hours * 3600, only=only)
    runtime.add_sink(log)
    return log


def api_for(
    settings: Settings,
    runtime: AgentRuntime,
    agent: Agent,
    log: EventLog,
    *,
    unavailable: tuple[str, ...] = (),
) -> Api:
    """What the API serves for ``agent`` under these settings.

    Args:
        settings: The bot's settings.
        runtime: Runs the API's turns.
        agent: The agent that answers.
        log: The event log the API's streams read.
        unavailable: Tools of the agent that cannot work in an API turn (they need a
            Slack thread): denied there, so the model is not offered them.
    """
    offline = settings.anthropic_api_key is None
    policy = resolve_policy(agent, SOURCE)
    policy = dataclasses.replace(
        policy, deny_tools=tuple(dict.fromkeys(policy.deny_tools + unavailable))
    )
    return Api(
        runtime=runtime,
        agent=agent.name,
        log=log,
        auth=ApiAuth(settings.api_principals()),
        policy=policy,
        model=DEMO_MODEL_NAME if offline else settings.anthropic_model,
        offline=offline,
    )


async def serve_local(settings: Settings) -> None:
    """Serve the console and the API until SIGTERM or Ctrl+C.

    Raises:
        ConfigError: The port is taken, or a policy the agent cannot follow.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    config = load_bot_config(settings.bot_config)
    agent = build_agent(settings, surfaces=config.surfaces)
    warn_unmounted_surfaces(agent, [SOURCE])
    await check_model(agent)
    store = await open_store(settings.database_url)
    runtime = AgentRuntime(store, agent)
    log = event_log_for(settings, runtime)
    api = api_for(settings, runtime, agent, log)
    try:
        resumed = await runtime.start()
        if resumed:
            print(f"Resumed {resumed} unfinished turn(s) from their last checkpoint.", flush=True)
        # loopback only unless tokens say who is asking
        host = "127.0.0.1" if api.auth.is_local else "0.0.0.0"
        async with listening(web_application(api), host, settings.port), pruning(log):
            address = f"http://{host}:{settings.port}/"
            where = database_path(settings.database_url) or "memory"
            print(texts.local_mode(address, api.model, api.offline, where), flush=True)
            await stop.wait()
        print("Stopping: unfinished turns stay on disk and resume at the next start.", flush=True)
    finally:
        await runtime.close()
        await log.close()
        await store.close()
        closing = getattr(agent.model, "aclose", None)
        if closing is not None:
            await closing()


@contextlib.asynccontextmanager
async def pruning(log: EventLog | None) -> AsyncIterator[None]:
    """Prune ``log`` (if any) at once and then hourly while the block runs."""
    if log is None:
        yield
        return
    task = asyncio.create_task(log.prune_every(PRUNE_EVERY_SECONDS), name="prune the event log")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
