"""What runs with no credentials: a scripted model and a note-taking tool.

It is the engine for real (SQLite store, checkpoints, recovery); only the model
is scripted, so a newcomer can see a durable turn before they have any keys.
"""

from __future__ import annotations

from agent import ModelReply, ModelRequest, ToolContext, ToolMessage, tool
from agent.testing import ScriptedModel, call, reply

__all__ = ["offline_model", "remember"]


@tool
def remember(note: str, ctx: ToolContext) -> dict[str, int]:
    """Keep a note in this session's notebook; returns how many notes it holds."""
    ctx.store.execute(
        "CREATE TABLE IF NOT EXISTS notes (session TEXT NOT NULL, note TEXT NOT NULL)"
    )
    ctx.store.execute("INSERT INTO notes VALUES (?, ?)", [ctx.session_id, note])
    [(count,)] = ctx.store.execute("SELECT count(*) FROM notes WHERE session = ?", [ctx.session_id])
    return {"notes": count}


def _answer(request: ModelRequest) -> ModelReply:
    last = request.messages[-1]
    if isinstance(last, ToolMessage):
        count = last.result.get("notes", "?") if isinstance(last.result, dict) else "?"
        return reply(f"Done. This session's notebook now holds {count} note(s).")
    text = getattr(last, "text", "")
    return reply(f"Noting that down: {text!r}.", call("remember", {"note": text}))


def offline_model() -> ScriptedModel:
    """The credential-free model: every message becomes a durable note."""
    return ScriptedModel(_answer, chunk=6)
