"""Every name a notebook's cell reads is made by that cell or an earlier one, or is a builtin.

Run top to bottom, a cell that reads a name only a later cell makes, or one no cell makes any more (an import moved
to another exercise), stops "Run all" with a NameError, on whichever machine runs it first. Lab 2's question 2 read
`check_number` after question 1 stopped importing it, and that was first seen on the GPU. This reads the cells
instead of running them, so it holds for every notebook on every machine, the learner labs included.
"""

from __future__ import annotations

import ast
import builtins
import json
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("labs/*.ipynb"), *ROOT.glob("labs/learner/*.ipynb")])
# What IPython puts in every kernel's namespace.
KERNEL_NAMES = {"display", "get_ipython", "In", "Out", "_", "__", "___", "exit", "quit"}


def parse_cell(source: str) -> ast.Module:
    """A cell as Python: IPython's magics and shell lines dropped, top-level await allowed."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    body = textwrap.indent("\n".join(lines) + "\npass", "    ")
    return ast.parse(f"async def _cell():\n{body}\n")


def made_and_read(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names the cell binds anywhere (assignments, imports, defs, loop and `with` targets, parameters...) and the
    names it reads. A name bound anywhere in the cell counts as made for the whole cell: order inside one cell is
    the interpreter's to check, the order of cells is this test's."""
    made: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else made).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            made.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            made.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            made.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            made.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            made.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            made.add(node.name)
    return made - {"_cell"}, read


def names_read_before_made(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    known = set(dir(builtins)) | KERNEL_NAMES
    problems = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        made, read = made_and_read(parse_cell("".join(cell["source"])))
        known |= made
        problems += [f"cell {index} reads {name}, which no cell up to it makes" for name in sorted(read - known)]
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_a_cell_reads_is_made_above_it(path: Path) -> None:
    assert not names_read_before_made(path), names_read_before_made(path)


def test_the_check_finds_a_name_whose_import_went_away(tmp_path: Path) -> None:
    cell = lambda source: {"cell_type": "code", "source": source, "metadata": {}, "outputs": []}  # noqa: E731
    notebook = tmp_path / "n.ipynb"
    notebook.write_text(json.dumps({"cells": [
        cell("answer = None\nfrom helpers.traffic.exercises import check_slot_ratio\ncheck_slot_ratio(answer)"),
        cell("await asyncio.sleep(0)\n%time x = 1\nprint([y for y in range(3)], answer)"),
        cell("check_number(answer, 1.0)")]}))
    assert names_read_before_made(notebook) == ["cell 1 reads asyncio, which no cell up to it makes",
                                                "cell 2 reads check_number, which no cell up to it makes"]
