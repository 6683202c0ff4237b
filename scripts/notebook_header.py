"""Write the badge and the Colab setup cell at the top of every notebook, and strip outputs.

Run after adding or renaming a notebook: python scripts/notebook_header.py
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from helpers.colab import SETUP_CELL, badge_markdown

ROOT = Path(__file__).resolve().parent.parent


def notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb"))


def normalise(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    cells = notebook.cells
    badge = badge_markdown(path.relative_to(ROOT).as_posix())
    first = cells[0].source.splitlines()
    if first and first[0].startswith("[![Open In Colab]"):
        first = first[1:]
    cells[0].source = badge + "\n\n" + "\n".join(first).strip()
    setup = nbformat.v4.new_code_cell(SETUP_CELL.rstrip())
    setup.id = "colab-setup"  # a fixed id, so re-running this script changes nothing
    if len(cells) > 1 and cells[1].cell_type == "code" and cells[1].source.startswith("# Colab only"):
        cells[1] = setup
    else:
        cells.insert(1, setup)
    for cell in cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validator.normalize(notebook)
    nbformat.write(notebook, path)


if __name__ == "__main__":
    for path in notebooks():
        normalise(path)
        print(f"normalised {path.relative_to(ROOT)}")
