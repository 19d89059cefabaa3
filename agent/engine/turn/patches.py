"""Versioned replay: a change of the loop's shape is gated on a marker recorded in the turn.

A turn is replayed by running the loop again over what it committed. When the
loop's shape changes (the calls of a batch run concurrently, say), a turn that
was recorded under the old shape and is still unfinished (stopped mid-batch by
a crash or a deploy, suspended for days on an answer) must finish on that old
shape: its tools were called, and its history written, on the assumption the
old code made. So each shape change gets a marker here, a turn records every
marker its opening knew (`TurnRecord.patches`), and the loop asks `patched` at
the place the shape differs: a turn opened since the change says yes, one
opened before it says no. Once no turn recorded before a change can be left
(unfinished turns of that age are ended or drained), its marker and the old
branch can go.
"""

from __future__ import annotations

from typing import Final

from agent.core.turns import TurnRecord

__all__ = ["PARALLEL_CALLS", "PATCHES", "patched"]

PARALLEL_CALLS: Final = "parallel-calls"
"""The remote calls of one reply run concurrently, each result committed as it
settles and placed in the transcript in call order; before it, calls ran one after
another, each committed as it ended."""

PATCHES: Final[tuple[str, ...]] = (PARALLEL_CALLS,)
"""Every shape change this code knows, recorded in each turn it opens. Stored: never
rename one."""


def patched(record: TurnRecord, marker: str) -> bool:
    """Whether ``record``'s turn takes the shape that ``marker`` introduced.

    Raises:
        ValueError: ``marker`` is not one this code knows (a typo would silently
            send every turn down the old branch).
    """
    if marker not in PATCHES:
        raise ValueError(f"unknown loop shape marker {marker!r} (known: {', '.join(PATCHES)})")
    return marker in record.patches
