"""The deploy files build as shipped: checked against pyproject.toml and the code they run.

``requirements.txt`` is the lock that the Dockerfile and Heroku's Python buildpack
install; pyproject.toml keeps the ranges. The image installs the lock and then the
project, resolving nothing; the Procfile's process types run commands that exist;
and the image's health check passes on a 200 and fails otherwise.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import shlex
import sys
import tomllib
from pathlib import Path

from aiohttp import web
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from tests.fakes.local_server import serve_locally

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.txt"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def locked() -> dict[NormalizedName, Version]:
    """Each package the lock pins, and its version; every line must be a plain ``==`` pin."""
    pins: dict[NormalizedName, Version] = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        requirement = Requirement(text)
        [specifier] = requirement.specifier
        assert (specifier.operator, requirement.extras, requirement.marker, requirement.url) == (
            "==",
            set(),
            None,
            None,
        ), f"requirements.txt:{number} is not a plain pin: {text!r}"
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"requirements.txt:{number} pins {name} twice"
        pins[name] = Version(specifier.version)
    return pins


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, as (INSTRUCTION, arguments), continuations joined."""
    instructions, pending = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def test_every_runtime_dependency_is_pinned_inside_its_range():
    pins = locked()
    wrong = []
    for text in PROJECT["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name not in pins:
            wrong.append(f"{text}: not in requirements.txt")
        elif not requirement.specifier.contains(pins[name], prereleases=True):
            wrong.append(f"{text}: requirements.txt pins {pins[name]}")
        for extra in sorted(requirement.extras):  # psycopg[binary]: psycopg-binary too
            for added in _brought_by(requirement.name, extra):
                if canonicalize_name(added.name) not in pins:
                    wrong.append(f"{text}: {added.name} (of [{extra}]) not in requirements.txt")
    assert wrong == []


def test_the_lock_holds_what_each_locked_package_needs():
    # What a package needs is in its metadata, read here for each package that this
    # environment has at the locked version (after `pip install -e .` on the day the
    # lock was made, all of them); the image's `pip check` checks the whole lock again.
    pins = locked()
    checked, wrong = 0, []
    for name, version in pins.items():
        if _installed_version(name) != version:
            continue
        checked += 1
        for needed in _brought_by(name, None):
            needed_name = canonicalize_name(needed.name)
            if needed_name not in pins:
                wrong.append(f"{name} {version} needs {needed}: not in requirements.txt")
            elif not needed.specifier.contains(pins[needed_name], prereleases=True):
                wrong.append(f"{name} {version} needs {needed}: pinned {pins[needed_name]}")
    assert wrong == []
    assert checked > 0, "no locked package is installed at its locked version"


def test_one_python_version_everywhere():
    version = (ROOT / ".python-version").read_text().strip()  # what Heroku's buildpack reads
    images = [args.split()[0] for keyword, args in dockerfile() if keyword == "FROM"]

    assert images == [f"python:{version}-slim"] * 2
    assert SpecifierSet(PROJECT["requires-python"]).contains(f"{version}.0")
    assert f"for Python {version}," in LOCK.read_text().splitlines()[0]  # what it was made on


def test_the_image_installs_the_lock_and_then_the_project_resolving_nothing():
    runs = [args for keyword, args in dockerfile() if keyword == "RUN"]
    installs = [shlex.split(run.split("&&")[0]) for run in runs if "pip install" in run]
    copies = [args.split() for keyword, args in dockerfile() if keyword == "COPY"]

    assert ["requirements.txt", "/tmp/requirements.txt"] in copies
    assert installs == [
        ["pip", "install", "--no-deps", "--requirement", "/tmp/requirements.txt"],
        ["pip", "install", "--no-deps", "/tmp/wheels/*.whl"],
    ]
    assert any("pip check" in run for run in runs)  # a lock that is not whole fails the build
    assert any(run.startswith("pip wheel") and "--no-deps" in run for run in runs)


def test_the_image_runs_the_bot_as_a_user_with_sqlite_on_its_volume():
    instructions = dockerfile()
    env: dict[str, str] = {}
    for keyword, args in instructions:
        if keyword == "ENV":
            env |= dict(pair.split("=", 1) for pair in shlex.split(args))
    [user] = [args for keyword, args in instructions if keyword == "USER"]
    [volume] = [json.loads(args) for keyword, args in instructions if keyword == "VOLUME"]
    [exposed] = [args for keyword, args in instructions if keyword == "EXPOSE"]
    [cmd] = [json.loads(args) for keyword, args in instructions if keyword == "CMD"]

    assert user not in ("root", "0")
    assert volume == ["/data"]
    assert env["DATABASE_URL"] == "sqlite:////data/bot.db"
    assert exposed == env["PORT"] == "3000"
    assert cmd == ["python", "-m", "bot"]


def test_the_dockerignore_keeps_secrets_out_and_lets_in_what_the_image_copies():
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    copied = {
        source.rstrip("/")
        for keyword, args in dockerfile()
        if keyword == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    }

    assert {".env", "data/", "*.db", ".git/"} <= ignored
    assert copied == {"pyproject.toml", "README.md", "agent", "bot", "requirements.txt"}
    assert not {c for c in copied if c in ignored or f"{c}/" in ignored}


async def test_the_image_health_check_passes_on_200_and_fails_otherwise():
    [healthcheck] = [args for keyword, args in dockerfile() if keyword == "HEALTHCHECK"]
    argv = json.loads(healthcheck.partition(" CMD ")[2])
    assert argv[0] == "python"
    answer = {"status": 200}

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(status=answer["status"])

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner, url = await serve_locally(app)
    try:
        port = url.rsplit(":", 1)[1]
        codes = []
        for status in (200, 503):
            answer["status"] = status
            check = await asyncio.create_subprocess_exec(
                sys.executable,
                *argv[1:],
                env={"PORT": port},
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            codes.append(await asyncio.wait_for(check.wait(), 10))
    finally:
        await runner.cleanup()

    assert codes == [0, 1]  # Docker: 0 healthy, 1 unhealthy


def test_the_procfile_runs_the_bot_for_http_and_for_socket_mode():
    processes = dict(
        line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line
    )
    commands = {kind: shlex.split(command) for kind, command in processes.items()}

    # web gets $PORT and Heroku's router (HTTP mode); worker has neither (Socket Mode)
    assert commands == {"web": ["python", "-m", "bot"], "worker": ["python", "-m", "bot"]}
    for _, _, module, *_ in commands.values():
        assert importlib.util.find_spec(f"{module}.__main__") is not None


def _brought_by(name: str, extra: str | None) -> list[Requirement]:
    """What the installed distribution ``name`` requires on this interpreter; with
    ``extra``, only what that extra adds."""
    found = []
    for text in importlib.metadata.requires(name) or []:
        requirement = Requirement(text)
        marker = requirement.marker
        always = marker is None or marker.evaluate({"extra": ""})
        with_extra = marker is None or marker.evaluate({"extra": extra or ""})
        if always if extra is None else with_extra and not always:
            found.append(requirement)
    return found


def _installed_version(name: str) -> Version | None:
    try:
        return Version(importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        return None
