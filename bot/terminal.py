"""A chat in the terminal: each line is a durable turn, printed as it streams."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

from agent import AgentRuntime, ConflictError, TurnError, TurnEvent

__all__ = ["DEMO_LINE", "SESSION", "chat"]

SESSION = "terminal:local"
DEMO_LINE = "Remember that the deploy is on Friday."


class _Printer:
    """Prints a turn's events; a retried model step starts its line again."""

    def __init__(self) -> None:
        self._attempt = 1

    def __call__(self, event: TurnEvent) -> None:
        if event.type == "message.delta":
            if event.attempt != self._attempt:
                self._attempt = event.attempt
                sys.stdout.write(f"\n  (the reply broke off; asking again, try {event.attempt})\n")
            sys.stdout.write(event.text)
        elif event.type == "action.requested":
            sys.stdout.write(f"\n  -> {event.name}({event.input})")
        elif event.type == "action.progress":
            sys.stdout.write(f"\n     {event.text}")
        elif event.type == "action.completed":
            sys.stdout.write(f"  = {event.error or event.result}\n")
        elif event.type == "input.requested":
            sys.stdout.write(
                f"\n  [waiting: {event.request['prompt']}; answer it in the web console]\n"
            )
        elif event.type == "turn.completed":
            self._attempt = 1
            sys.stdout.write("\n")
        elif event.type == "turn.failed":
            self._attempt = 1
            sys.stdout.write(f"\n[failed: {event.error}]\n")
        sys.stdout.flush()


async def chat(runtime: AgentRuntime, agent: str, given: list[str] | None) -> None:
    """Start ``runtime`` and run the lines given (or typed) as turns of one terminal session.

    The caller closes the runtime; the turns it resumed at the start, and any
    still running, stay on disk for the next start.
    """
    await runtime.start()
    session = runtime.session(agent, SESSION)
    await session.observe(_Printer())
    async for text in _lines(given):
        try:
            await session.turn(text)
        except TurnError:
            pass  # the printer showed it as it happened
        except ConflictError as exc:  # the session waits on a request another surface shows
            sys.stdout.write(f"[not started: {exc}]\n")


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
