"""One turn's loop: ask the model, run the tools it asked for, ask again.

The position is read off the transcript: the last message says what comes
next. Every step commits its memo and its transcript message in one
transaction before the next step begins, so a replay of the same turn skips
what committed and runs only what is still owed.

- `run`: `TurnRun`, which drives a turn from where it stands to its ending
  (completed, failed, cancelled or suspended) and writes that ending;
- `model_step`: asking the model, with retries, streaming its reply, and the
  cancel that abandons a reply in flight;
- `tool_step`: running one tool call, local (exactly once) or remote (at least
  once), and the answers a remote tool's ``request_input`` gets;
- `commits`: the transactions that open and end a turn, and the calls it owes;
- `context`: what a run's steps share (the session's state, committing, events,
  the cancel check).
"""
