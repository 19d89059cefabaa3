"""A process that takes a session's lease and keeps it: run by ``test_leases.py``.

    python lease_child.py DATABASE [HOLDER]

``DATABASE`` is a SQLite file's path or a ``postgresql://`` URL. It takes the
lease of session ``a/s1`` for ten minutes, as ``HOLDER`` if given (a name of
another host's runtime, so that only the store can tell it died), prints
``HELD``, and sleeps until it is killed or stopped.
"""

from __future__ import annotations

import asyncio
import sys

from agent.core.records import SessionKey
from agent.engine.lease import SessionLease, new_holder
from tests.agent.child_store import open_child_store


async def main(where: str, holder: str | None) -> None:
    store = await open_child_store(where)
    lease = SessionLease(store, SessionKey("a", "s1"), holder or new_holder(), seconds=600.0)
    assert await lease.take(wait=False)
    print("HELD", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
