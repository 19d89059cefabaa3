"""A process that takes a session's lease and keeps it: run by ``test_leases.py``.

    python lease_child.py DB_PATH

It takes the lease of session ``a/s1`` for ten minutes, prints ``HELD``, and
sleeps until it is killed.
"""

from __future__ import annotations

import asyncio
import sys

from agent import SQLiteStore
from agent.core.records import SessionKey
from agent.engine.lease import SessionLease, new_holder


async def main(path: str) -> None:
    store = await SQLiteStore.open(path)
    lease = SessionLease(store, SessionKey("a", "s1"), new_holder(), seconds=600.0)
    assert await lease.take(wait=False)
    print("HELD", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
