"""The deploy files build as shipped: checked against pyproject.toml and the code they run.

``requirements.txt`` is the lock that Heroku's Python buildpack installs;
pyproject.toml keeps the ranges. The Procfile's process types run commands that exist.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shlex
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

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
    # lock was made, all of them).
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
