"""The helpers' house rules: rooms by chapter, one role a module, arrows that only point back.

Read from the source with ``ast`` (nothing is imported), so a rule broken anywhere in
helpers/ fails here with the module's name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parent.parent / "helpers"
# Rooms in order: a room may use the shared top level and the rooms before it, never a later one.
# ``load`` (the one client and poller) comes first: every chapter's room sends requests through it.
ROOMS = ("load", "serve", "paged", "batching", "tuning", "lab", "traffic", "route")
MAX_LINES = 300
DRAWING = ("matplotlib", "ipywidgets", "IPython.display")
IO = ("urllib", "httpx", "openai", "subprocess", "psutil", "socket", "signal")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(HELPERS.rglob("*.py")):
        if "_avx2_site" in path.parts:  # a sitecustomize for server processes, not a helpers module
            continue
        parts = path.relative_to(HELPERS.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(path: Path) -> set[str]:
    """Every module this file imports, at its top or inside functions."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def helpers_imports(path: Path, known: dict[str, Path]) -> set[str]:
    return {name for name in imports_of(path) if name in known and name != "helpers"}


def room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ROOMS else None


def test_no_module_is_longer_than_a_screenful_or_two():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by role (over {MAX_LINES} lines): {long}"


def test_no_module_both_draws_and_does_io():
    mixed = []
    for name, path in modules().items():
        imported = imports_of(path)
        draws = any(i == d or i.startswith(d + ".") for i in imported for d in DRAWING)
        talks = any(i == d or i.startswith(d + ".") for i in imported for d in IO)
        if draws and talks:
            mixed.append(name)
    assert not mixed, f"drawing and I/O in one module: {mixed}"


def test_the_import_graph_has_no_circle():
    known = modules()
    graph = {name: helpers_imports(path, known) for name, path in known.items()}
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                pytest.fail("import circle: " + " -> ".join(trail[trail.index(nxt):] + [node, nxt]))
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = "done"

    for name in graph:
        if name not in state:
            visit(name, [])


def test_arrows_only_point_to_earlier_rooms_or_the_shared_top_level():
    known = modules()
    backwards = []
    for name, path in known.items():
        here = room(name)
        for target in helpers_imports(path, known):
            there = room(target)
            if there is None:
                continue
            if here is None or ROOMS.index(there) > ROOMS.index(here):
                backwards.append(f"{name} -> {target}")
    assert not backwards, f"imports that point up or forward: {backwards}"


def test_every_room_opens_with_a_docstring_that_names_its_modules():
    for name in ROOMS:
        init = HELPERS / name / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        modules_here = sorted(p.stem for p in init.parent.glob("*.py") if not p.stem.startswith("_"))
        missing = [m for m in modules_here if f"``{m}``" not in doc and f"helpers.{name}.{m}`" not in doc]
        assert not missing, f"helpers/{name}/__init__.py does not describe {missing}"


def test_no_public_name_means_two_things():
    owners: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                owners.setdefault(node.name, []).append(name)
    clashes = {n: where for n, where in owners.items() if len(where) > 1}
    assert not clashes, f"one name, several definitions: {clashes}"
