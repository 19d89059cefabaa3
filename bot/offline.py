"""What runs with no credentials: a demonstration model and three small tools.

It is the engine for real (SQLite store, checkpoints, recovery, an approval that
suspends the turn); only the model is scripted, and it says so in every reply, so a
newcomer can try the whole flow before they have any keys.
"""

from __future__ import annotations

import dataclasses
import uuid

from agent import (
    EXPIRED,
    JsonValue,
    ModelReply,
    ModelRequest,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolContext,
    ToolMessage,
    UserMessage,
    tool,
)
from agent.testing import ScriptedModel, call, reply
from bot.notebook import Notebook

__all__ = ["DEMO_MODEL_NAME", "LOCAL_TOOLS", "offline_model", "recall", "remember", "share_note"]

DEMO_MODEL_NAME = "offline demo model"
INTRO = "(Offline demo model, not Claude: set ANTHROPIC_API_KEY for real answers.)"
HINT = "Say “share …” to try an approval, or ask “what do you remember?”."

_NOTES = Notebook("notes", "session")


@tool
def remember(note: str, ctx: ToolContext) -> dict[str, int]:
    """Keep a note in this conversation's notebook; returns how many notes it holds."""
    # a local tool: the note commits with the step, exactly once, whatever crashes
    return {"notes": _NOTES.add(ctx, ctx.session_id, note)}


@tool
def recall(ctx: ToolContext) -> dict[str, list[str]]:
    """Read back every note of this conversation's notebook, oldest first."""
    return {"notes": _NOTES.read(ctx, ctx.session_id)}


@tool
async def share_note(note: str, ctx: ToolContext) -> dict[str, bool]:
    """Share a note once the person approves. A demonstration: nothing leaves this machine."""
    approved = await ctx.request_input(
        id="share",
        prompt=f"Share this note? “{note}” (a demonstration: nothing leaves this machine)",
        schema={"type": "boolean"},
    )
    return {"shared": approved is True, "expired": approved == EXPIRED}


LOCAL_TOOLS = [remember, recall, share_note]
"""The tools of a turn that is not in Slack (the web console, the terminal chat)."""


def _asked(request: ModelRequest) -> str:
    """The person's message this turn answers."""
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return message.text
    return ""


def _call(name: str, input: dict[str, JsonValue]) -> ToolCall:
    # ids unique across restarts too, as a real model's are
    return call(name, input, id=f"call_{uuid.uuid4().hex[:16]}")


NOTING_NOTE = "Storing this in the notebook first, then counting what it holds."
"""What the demonstration writes before its tool call, as Claude writes between tool calls."""
READING_NOTE = "Opening the notebook to read back every note in it."


def _answer(request: ModelRequest) -> ModelReply:
    last = request.messages[-1]
    asked = _asked(request)
    offered = {spec.name for spec in request.tools}
    wants_share = asked.lower().lstrip().startswith("share") and "share_note" in offered
    if isinstance(last, ToolMessage):
        result = last.result if isinstance(last.result, dict) else {}
        if last.name == "remember" and wants_share:
            return reply("Asking you before I share it.", _call("share_note", {"note": asked}))
        if last.name == "remember":
            hint = f" {HINT}" if "share_note" in offered else ""
            return reply(f"Noted: the notebook holds {result.get('notes', '?')} note(s).{hint}")
        if last.name == "recall":
            notes = result.get("notes") or []
            listed = "\n".join(f"- {note}" for note in notes) if notes else "nothing yet"
            return reply(f"Here is what I remember:\n{listed}")
        if last.name == "share_note" and result.get("shared"):
            return reply("Shared (in this demonstration, that means nothing left your machine).")
        if last.name == "share_note":
            why = "the request expired" if result.get("expired") else "you said no"
            return reply(f"Not shared: {why}. The note stays in the notebook.")
        return reply(f"The {last.name} tool answered: {last.result}")
    wants_recall = "remember?" in asked.lower() or asked.lower().strip().startswith("recall")
    if wants_recall and "recall" in offered:
        return _noted(f"{INTRO} Reading the notebook.", READING_NOTE, _call("recall", {}))
    return _noted(f"{INTRO} Noting that down.", NOTING_NOTE, _call("remember", {"note": asked}))


def _noted(text: str, note: str, then: ToolCall) -> ModelReply:
    """A reply shaped as Claude's newest models write one: text, a note, then the call."""
    said = reply(text, then)
    content = (TextBlock(text=text), ThinkingBlock(thinking=note, signature="offline"), then)
    return dataclasses.replace(said, content=content)


def offline_model() -> ScriptedModel:
    """The credential-free model: notes every message, and asks before it shares one."""
    return ScriptedModel(_answer, chunk=6)
