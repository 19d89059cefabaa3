"""A real PostgreSQL server for the tests, started from Debian's binaries on a free port.

One server per test run (about a second to start): `initdb` into a folder under
/tmp (the ``postgres`` user cannot reach pytest's ``tmp_path``, which is root's
alone), `pg_ctl start` on 127.0.0.1 with durability off, since no test needs
the data to survive a power loss, and `pg_ctl stop` at the end. A benchmark
asks for ``durable=True``: the server's defaults (fsync, synchronous commit and
full-page writes on), so a commit waits for its WAL flush. Postgres refuses
to run as root, so as root each command runs as the ``postgres`` user. Each
test gets a schema of its own, named in the URL's ``search_path``.

Without the binaries the tests that need a server skip, except in CI
(``CI`` set), where they fail: CI cannot go green by skipping them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg

__all__ = ["PostgresServer", "find_binaries"]


def find_binaries() -> Path | None:
    """The newest Debian PostgreSQL ``bin`` folder on this machine, if any."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3])
    )
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One running server; `url` names a fresh schema of it."""

    def __init__(self, binaries: Path, *, durable: bool = False) -> None:
        self._bin = binaries
        self.durable = durable
        """Whether commits are flushed to disk (PostgreSQL's defaults) or not (fsync off)."""
        self._folder = Path(tempfile.mkdtemp(prefix="pg-tests-", dir="/tmp"))
        self._data = self._folder / "data"
        self.port = _free_port()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self._folder, "postgres", "postgres")

    def _run(self, *command: str) -> None:
        argv = [str(self._bin / command[0]), *command[1:]]
        if self._as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = self._folder / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{command[0]} failed: {done.stderr or done.stdout}\n{tail}")

    def start(self) -> None:
        self._run(
            "initdb", "-D", str(self._data), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--locale=C.UTF-8", "-N",
        )  # fmt: skip
        # initdb -N skips syncing the fresh files only; the running server's own
        # durability is what the options below leave on or turn off
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self._folder}"
        options += " -c max_connections=300"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            "pg_ctl", "-D", str(self._data), "-l", str(self._folder / "log"), "-w",
            "-o", options, "start",
        )  # fmt: skip

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self._folder, ignore_errors=True)

    @property
    def data_dir(self) -> Path:
        return self._data

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def fresh_schema(self) -> str:
        """Create an empty schema and return a URL whose connections work in it."""
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return f"{self.admin_url}?options={quote(f'-csearch_path={schema}')}"
