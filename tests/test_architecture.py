"""The layout's rules, checked on the source: layers, cycles, module size, vendor folders.

Every import counts, including those under ``TYPE_CHECKING`` and inside
functions: a cycle hidden from the interpreter is still one a reader and a
refactor must carry. The rules, from the bottom up:

agent/
    ``errors``, ``_json``        nothing of the project
    ``core/``                    pure values and rules; the two above
    ``ports``                    the seams (Protocols); core
    ``definition/``              what an agent is; ports and below
    ``engine/``                  runs turns; definition and below, never a store or a model
    ``stores/``, ``models/``     implementations of ports; ports and below, never the engine
    ``agent``, ``agent.testing`` the public face; anything
bot/
    ``__main__`` -> ``serve`` (the composition root) -> ``slack/`` | ``web/`` (siblings that
    never import each other) -> the rest of ``bot/`` -> only ``agent`` and ``agent.testing``.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "bot")
MAX_LINES = 400

# Each vendor SDK lives in one folder (or module) of the project.
VENDOR_HOMES = {
    "anthropic": ("agent.models.anthropic",),
    "httpx2": ("agent.models.anthropic",),
    "aiosqlite": ("agent.stores.sqlite",),
    "sqlite3": ("agent.stores.sqlite",),  # bot's local tools use it through ctx.store only
    "psycopg": ("agent.stores.postgres",),
    "psycopg_pool": ("agent.stores.postgres",),
    "slack_bolt": ("bot.slack",),
    "slack_sdk": ("bot.slack",),
    "apscheduler": ("bot.schedules",),
    "aiohttp": ("bot.slack", "bot.web", "bot.serve"),
}

AGENT_RANK = {
    "agent._json": 0,
    "agent.errors": 1,
    "agent.core": 2,
    "agent.ports": 3,
    "agent.definition": 4,
    "agent.engine": 5,
    "agent.stores": 5,
    "agent.models": 5,
    "agent.testing": 6,
    "agent": 6,
}
BOT_RANK = {"bot.__main__": 3, "bot.serve": 2, "bot.slack": 1, "bot.web": 1}  # the rest: 0


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # a module of the project, or the top-level name of a library
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


MODULES = project_modules()


def owning_module(dotted: str) -> str | None:
    """The project module that ``dotted`` names or lies in (``agent.core.turns.X`` -> turns)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def imports_of(name: str) -> Iterator[Import]:
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # ``from agent.core import turns`` imports the module turns, not the package
            targets = [f"{base}.{alias.name}" for alias in node.names]
            targets = [t if t in MODULES else base for t in targets]
        else:
            continue
        for target in targets:
            found = owning_module(target) or target.split(".")[0]
            if found != name:
                yield Import(name, found, node.lineno)


ALL_IMPORTS = [found for name in MODULES for found in imports_of(name)]
PROJECT_IMPORTS = [i for i in ALL_IMPORTS if i.imported in MODULES]


def group(name: str, ranks: dict[str, int]) -> str | None:
    """The longest key of ``ranks`` that is ``name`` or a package holding it."""
    matches = [key for key in ranks if name == key or name.startswith(key + ".")]
    return max(matches, key=len) if matches else None


def import_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for found in PROJECT_IMPORTS:
        edges[found.importer].add(found.imported)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    order, low, on_stack, stack = {}, {}, set(), []
    counter = itertools.count()
    found_cycles: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = next(counter)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found_cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in order:
            visit(node)
    return found_cycles


def test_the_walk_sees_every_kind_of_import():
    # the rules below are only as good as the walk: it must see relative, lazy and
    # TYPE_CHECKING imports (the engine's lazy AnthropicModel is one of each kind)
    lazy = {i.imported for i in imports_of("agent")}
    assert "agent.models.anthropic._model" in lazy
    assert "agent.engine.host" in {i.imported for i in imports_of("agent.engine.session")}
    assert len(MODULES) > 50


def test_the_cycle_finder_finds_a_cycle_through_a_long_way_round():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_no_import_cycle_in_agent_or_bot():
    assert cycles(import_graph()) == []


def test_agent_imports_go_down_the_layers():
    upward = []
    for found in PROJECT_IMPORTS:
        if not found.importer.startswith("agent") or not found.imported.startswith("agent"):
            continue
        mine, theirs = group(found.importer, AGENT_RANK), group(found.imported, AGENT_RANK)
        assert mine is not None, found
        assert theirs is not None, found
        if mine == theirs:
            continue  # inside one layer: only the cycle rule applies
        if AGENT_RANK[theirs] >= AGENT_RANK[mine]:
            upward.append(f"{found.importer}:{found.line} -> {found.imported}")
    assert upward == []


def test_engine_stores_and_models_stand_apart():
    # a store or a model adapter is an implementation of a port: it never reaches the
    # engine, and the engine reaches neither (the runtime is given its store and model)
    edge_groups = ("agent.engine", "agent.stores", "agent.models")
    crossings = [
        f"{i.importer}:{i.line} -> {i.imported}"
        for i in PROJECT_IMPORTS
        if (mine := group(i.importer, AGENT_RANK)) in edge_groups
        and (theirs := group(i.imported, AGENT_RANK)) in edge_groups
        and mine != theirs
    ]
    assert crossings == []


def test_bot_imports_go_down_its_layers():
    upward = set()
    for found in PROJECT_IMPORTS:
        if not (found.importer.startswith("bot") and found.imported.startswith("bot")):
            continue
        mine = BOT_RANK.get(group(found.importer, BOT_RANK) or "", 0)
        theirs_group = group(found.imported, BOT_RANK)
        theirs = BOT_RANK.get(theirs_group or "", 0)
        same = theirs_group is not None and theirs_group == group(found.importer, BOT_RANK)
        if theirs >= mine and not same and theirs > 0:
            upward.add((found.importer, found.imported))
    assert upward == set()


def test_bot_uses_only_the_public_face_of_agent():
    reaches = {
        (i.importer, i.imported)
        for i in PROJECT_IMPORTS
        if i.importer.startswith("bot")
        and i.imported.startswith("agent")
        and i.imported not in ("agent", "agent.testing")
    }
    assert reaches == set()


def test_each_vendor_sdk_stays_in_its_folder():
    strays = sorted(
        f"{i.importer}:{i.line} imports {i.imported}"
        for i in ALL_IMPORTS
        if i.imported in VENDOR_HOMES
        and not any(
            i.importer == home or i.importer.startswith(home + ".")
            for home in VENDOR_HOMES[i.imported]
        )
    )
    assert strays == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_small(name: str):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines"
