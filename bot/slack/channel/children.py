"""What a reply shows of a sub-agent's turn: its tool calls, as task lines of the reply.

A call of the turn that delegated to another agent forwards the child turn's
events into the turn's stream, tagged with ``via``. The child's words are its
delegating call's result, which the turn's own model reads and answers from, so
they are not shown as the reply's; its requests are the turn's too (the turn
waits on a mirror of each, shown as a card of its own), so the child's
``input.requested`` adds no second card. What is left to show is the child at
work: each of its calls, named for its agent.
"""

from __future__ import annotations

from agent import ActionCompleted, ActionProgress, ActionRequested, TurnEvent
from bot.slack.reply import ThreadReply

__all__ = ["show_child_step"]


async def show_child_step(reply: ThreadReply, event: TurnEvent) -> None:
    """Show one forwarded event of a child turn in ``reply``, if it is a call's."""
    if not isinstance(event, ActionRequested | ActionCompleted | ActionProgress):
        return
    # the child's call ids are its own: keyed by its turn, they never meet the parent's
    line = f"{event.turn_id}:{event.call_id}"
    if isinstance(event, ActionProgress):
        await reply.progress(line, event.text)
        return
    title = f"{event.agent}: {event.name}"
    if isinstance(event, ActionRequested):
        await reply.task(line, title, "in_progress")
    else:
        await reply.task(line, title, "error" if event.error else "complete")
