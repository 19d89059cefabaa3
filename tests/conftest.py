from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.crash_db import CrashDatabase
from tests.postgres_server import PostgresServer, find_binaries

SECRET_VARS = (
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "DATABASE_URL",
)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real service with a real token from the developer's shell."""
    for name in SECRET_VARS:
        if name in os.environ:
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def postgres_binaries() -> Path:
    """Debian's PostgreSQL binaries: a test that needs them skips without, except in CI."""
    binaries = find_binaries()
    if binaries is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the PostgreSQL tests: install Debian's postgresql package")
        pytest.skip("no PostgreSQL binaries in /usr/lib/postgresql (apt-get install postgresql)")
    return binaries


@pytest.fixture(scope="session")
def postgres_server(postgres_binaries: Path) -> Iterator[PostgresServer]:
    """A PostgreSQL server for the whole run (see `tests.postgres_server`)."""
    server = PostgresServer(postgres_binaries)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_postgres_server(postgres_binaries: Path) -> Iterator[PostgresServer]:
    """A server of the test's own, to stop under a store or a bot (the run's stays up)."""
    server = PostgresServer(postgres_binaries)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A ``postgresql://`` URL whose connections work in a schema of this test's own."""
    return postgres_server.fresh_schema()


@pytest.fixture(params=["sqlite", "postgres"])
def crash_db(request: pytest.FixtureRequest, tmp_path: Path) -> CrashDatabase:
    """The database of a crash test's processes: a SQLite file, or a PostgreSQL schema."""
    if request.param == "sqlite":
        return CrashDatabase("sqlite", str(tmp_path / "sessions.db"))
    return CrashDatabase("postgres", request.getfixturevalue("postgres_url"))
