"""What a thread shows of a turn, kept in the store so that a restarted process can finish it.

The channel keeps one `DeliveryState` per turn it is showing: the reply
messages being written, the request whose buttons are up, where a turn nobody
typed was posted. The state is forgotten once the reply is finished, so a
state left in the store at start-up is a reply still owed (see
`bot.slack.channel.recovery`). It is persisted, so its keys and their values
never change meaning: a database written by an older bot must read the same
(a key added later reads as its default in an older state).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent import AgentRuntime, JsonValue, SessionKey

__all__ = ["Deliveries", "DeliveryState", "Thread", "messages_of_others", "team_of", "thread_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryState:
    """How one turn is being shown: a JSON object of up to ten keys in the store.

    A field left at its default is not written, and a key that is missing (or
    holds something of another type) reads back as the default, so the states
    of every older version read back unchanged.
    """

    reply: str | None = None
    """The ts of the reply message being written (its first, when it runs over several)."""
    more: tuple[str, ...] | None = None
    """The ts of the reply's further messages, in order (written with ``reply``)."""
    since: int | None = None
    """The transcript index the reply starts at: a continuation starts after its request."""
    asked: str | None = None
    """The id of the request whose Approve / Deny buttons are showing."""
    shown: str | None = None
    """The ts of the message that shows that request."""
    done: bool = False
    """A turn nobody typed, shown to its end: delivering its firing again posts nothing."""
    refused: str | None = None
    """Slack's error, when it refused to show a turn nobody typed (kept with ``done``)."""
    channel: str | None = None
    """Where a turn nobody typed is shown: its session id names no thread."""
    thread_ts: str | None = None
    """The thread of ``channel``; None until the turn's first message opens one. It is
    written whenever ``channel`` is, even as null."""
    opening: bool = False
    """A stream is being opened for the reply's next message, and its ts is not kept yet:
    an untagged stream of the bot's that a stopped process left in the thread is this
    reply's (a stream carries its tag only once it stops)."""

    @classmethod
    def from_json(cls, kept: JsonValue | None) -> DeliveryState:
        """Read a state as the store keeps it (nothing kept reads as the empty state)."""
        if not isinstance(kept, dict):
            return cls()
        more = kept.get("more")
        return cls(
            reply=_text(kept.get("reply")),
            more=tuple(str(ts) for ts in more) if isinstance(more, list) else None,
            since=since if isinstance(since := kept.get("since"), int) else None,
            asked=_text(kept.get("asked")),
            shown=_text(kept.get("shown")),
            done=bool(kept.get("done")),
            refused=_text(kept.get("refused")),
            channel=_text(kept.get("channel")),
            thread_ts=_text(kept.get("thread_ts")),
            opening=kept.get("opening") is True,
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The state as the store keeps it: only the keys that are set."""
        kept: dict[str, JsonValue] = {}
        for name in ("reply", "since", "asked", "shown", "refused", "channel"):
            value = getattr(self, name)
            if value is not None:
                kept[name] = value
        if self.more is not None:
            kept["more"] = list(self.more)
        if self.done:
            kept["done"] = True
        if self.opening:
            kept["opening"] = True
        if self.channel is not None or self.thread_ts is not None:
            kept["thread_ts"] = self.thread_ts  # beside its channel, even when null
        return kept


@dataclass(frozen=True, slots=True)
class Thread:
    """Where a turn's reply goes, and the session it belongs to."""

    channel: str
    thread_ts: str | None
    """None for a turn nobody typed, until its first message opens a thread."""
    session_id: str


def thread_of(session_id: str) -> Thread | None:
    """The thread of a Slack session id (``slack:<team>:<channel>:<thread_ts>``)."""
    parts = session_id.split(":")
    if len(parts) != 4 or parts[0] != "slack":
        return None
    return Thread(parts[2], parts[3], session_id)


def team_of(session_id: str) -> str | None:
    """The workspace of a Slack session id (``slack:<team>:…``)."""
    parts = session_id.split(":")
    return parts[1] if len(parts) > 2 and parts[0] == "slack" else None


@dataclass(slots=True)
class Deliveries:
    """The delivery states of one agent's turns, in the runtime's store."""

    runtime: AgentRuntime
    agent: str
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by whoever reads a state and then writes it, so two such writes never interleave."""

    async def load(self, session_id: str, turn_id: str) -> DeliveryState:
        """The state kept for a turn (the empty state when none is)."""
        key = SessionKey(self.agent, session_id)
        return DeliveryState.from_json(await self.runtime.store.load_delivery(key, turn_id))

    async def keep(self, session_id: str, turn_id: str, state: DeliveryState | None) -> None:
        """Keep (or forget, with None) what the thread shows of a turn, for the next start."""
        key = SessionKey(self.agent, session_id)
        kept = state.to_json() if state is not None else None
        await self.runtime.store.save_delivery(key, turn_id, kept)

    async def claim(self, thread: Thread, turn_id: str) -> bool:
        """Take on showing a turn nobody typed; False if someone (or something) already has."""
        key = SessionKey(self.agent, thread.session_id)
        placed = DeliveryState(channel=thread.channel, thread_ts=thread.thread_ts)
        return await self.runtime.store.claim_delivery(key, turn_id, placed.to_json())

    async def every_kept(self) -> dict[tuple[str, str], DeliveryState]:
        """Every state kept for the agent's turns, by session id and turn id."""
        found = await self.runtime.store.deliveries(self.agent)
        return {
            (key.session_id, turn_id): DeliveryState.from_json(kept) for key, turn_id, kept in found
        }

    async def held_by_others(self, session_id: str, turn_id: str) -> set[str]:
        """The ts of the messages the session's other turns are showing (read in the store)."""
        return messages_of_others(await self.every_kept(), session_id, turn_id)

    async def thread_for(self, session_id: str, turn_id: str) -> Thread | None:
        """Where a turn is shown: its session's thread, or where a turn nobody typed was put."""
        thread = thread_of(session_id)
        if thread is not None:
            return thread
        kept = await self.load(session_id, turn_id)
        channel = kept.channel
        if channel is None:
            turns = await self.runtime.session(self.agent, session_id).turns()
            target = next((t.input.target for t in turns if t.turn_id == turn_id), None)
            found = target.get("channel") if isinstance(target, dict) else None
            channel = found if isinstance(found, str) else None
        if channel is None:
            return None
        return Thread(channel, kept.thread_ts, session_id)


def messages_of_others(
    kept: Mapping[tuple[str, str], DeliveryState], session_id: str, turn_id: str
) -> set[str]:
    """The ts of the messages that states ``kept`` of the session's other turns name."""
    held: set[str] = set()
    for (session, turn), state in kept.items():
        if session == session_id and turn != turn_id:
            held.update(ts for ts in (state.reply, state.shown, *(state.more or ())) if ts)
    return held


def _text(value: JsonValue) -> str | None:
    return value if isinstance(value, str) else None
