"""Pure values and pure rules: the transcript, model exchange, events, turns and records.

Nothing here does I/O or imports the engine; every other layer builds on it.
"""
