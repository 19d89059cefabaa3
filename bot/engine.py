"""The engine every way of running the bot shares: the agent, its model, the store, the runtime.

`open_engine` builds them in one order and closes them in the reverse order,
however far it got: a check that fails after the store is open still closes
the store, and the model's connections are closed last. Slack, the local
console, ``chat``, ``run-schedule`` and ``policies`` all open it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent import (
    Agent,
    AgentRuntime,
    ConfigError,
    EventLog,
    InboxWakeups,
    Model,
    SessionKey,
    SessionStore,
    StoreError,
    SurfacePolicy,
    Tool,
    describe_database,
    open_store,
    warn_unmounted_surfaces,
)
from bot.agent_factory import build_agent
from bot.settings import Settings

if TYPE_CHECKING:
    from agent import MemoryStore, PostgresStore, SQLiteStore

__all__ = ["PRUNE_EVERY_SECONDS", "Engine", "open_engine", "pruning"]

PRUNE_EVERY_SECONDS = 3600.0
"""How often the event log drops the events it no longer has to keep."""


@dataclass(frozen=True, slots=True)
class Engine:
    """What `open_engine` built, open until its block ends."""

    agent: Agent
    store: SessionStore
    runtime: AgentRuntime
    """Not started: the caller starts it once whatever shows its turns is ready."""
    log: EventLog | None
    """The event log (a sink of the runtime) when one was asked for."""


@contextlib.asynccontextmanager
async def open_engine(
    settings: Settings,
    tools: Sequence[Tool] | None = None,
    *,
    surfaces: Mapping[str, SurfacePolicy] | None = None,
    serving: Sequence[str] = (),
    check: Callable[[Agent], None] | None = None,
    check_access: bool = True,
    log: bool = False,
    log_only: Callable[[SessionKey], bool] | None = None,
) -> AsyncIterator[Engine]:
    """Build the agent and everything that runs it; close it all when the block ends.

    Args:
        settings: The bot's settings (the model, the database, the log's retention).
        tools: The agent's tools (by default the local ones, see `build_agent`).
        surfaces: The policy of each source (``BOT_CONFIG``'s ``[surfaces.*]``).
        serving: The sources this process takes turns from: a surface policy for
            any other source is warned about, since nothing would apply it.
        check: Runs on the agent before the store opens (a channel policy the agent
            cannot follow, say), so a refusal opens nothing.
        check_access: Ask the model's provider whether the model can be used; off
            for commands that run no turn.
        log: Keep an event log of the runtime's turns.
        log_only: With ``log``, the sessions to log (by default, every one).

    Raises:
        ConfigError: A setting, policy or model the bot cannot run with; whatever
            was opened is closed again first.
    """
    async with contextlib.AsyncExitStack() as stack:
        agent = build_agent(settings, tools, surfaces)
        stack.push_async_callback(_close_model, agent.model)
        if serving:
            warn_unmounted_surfaces(agent, list(serving))
        if check is not None:
            check(agent)
        if check_access:
            await _check_access(agent.model)
        store = await open_database(settings)
        stack.push_async_callback(store.close)
        event_log = None
        if log:
            retention = settings.event_log_retention_hours * 3600
            event_log = EventLog(store, retention=retention, only=log_only)
            stack.push_async_callback(event_log.close)
        # Closed before the log and the store: stopping its turns may still log events.
        runtime = AgentRuntime(
            store,
            agent,
            lease_seconds=settings.lease_seconds,
            # replicas on one server: work for a session another replica writes is handed
            # to it, which runs and shows the turn; a second process on one SQLite file
            # (a run-schedule beside the server) waits for the first instead
            hand_over=isinstance(store, InboxWakeups),
        )
        stack.push_async_callback(runtime.close)
        if event_log is not None:
            runtime.add_sink(event_log)
        yield Engine(agent=agent, store=store, runtime=runtime, log=event_log)


async def open_database(settings: Settings) -> SQLiteStore | MemoryStore | PostgresStore:
    """The store ``DATABASE_URL`` names, opened (and migrated).

    Raises:
        ConfigError: It cannot be opened (a server that does not answer, a schema
            newer than this code), named without its password.
    """
    try:
        return await open_store(settings.database_url)
    except StoreError as exc:
        where = describe_database(settings.database_url)
        raise ConfigError(f"cannot open the database at {where} (DATABASE_URL): {exc}") from None


@contextlib.asynccontextmanager
async def pruning(log: EventLog | None) -> AsyncIterator[None]:
    """Prune ``log`` (if there is one) at once and then hourly while the block runs."""
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


async def _check_access(model: Model) -> None:
    """Ask the provider whether ``model`` can be used, before anything is served.

    The offline model has nothing to ask (it has no ``check_access``).

    Raises:
        ConfigError: A model id the key cannot use, a key the API refuses, or a
            model whose capabilities refuse the request the bot would send.
    """
    check = getattr(model, "check_access", None)
    if check is not None:
        await check()


async def _close_model(model: Model) -> None:
    """Close the model's connections, if it holds any (Claude does; the offline model not)."""
    closing = getattr(model, "aclose", None)
    if closing is not None:
        await closing()
