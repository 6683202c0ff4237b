"""Keep every notebook in the course's shape: badge and Colab setup cell on top, the time it takes to run as
the results files record it (scripts/course_timings.py), no outputs except the reference outputs of cells
marked ``# NBVAL_CHECK_OUTPUT``, which nbval compares.

    python scripts/notebook_header.py [NOTEBOOK ...]                  # after adding or editing one
    python scripts/notebook_header.py --refresh-checked [NOTEBOOK ...] # take reference outputs from
                                                                      # build/executed/ (make course)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import nbformat
from course_timings import time_to_run  # a sibling script, not a package

from helpers.colab import SETUP_CELL, badge_markdown

ROOT = Path(__file__).resolve().parent.parent
EXECUTED = ROOT / "build" / "executed"
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
TIME_TO_RUN = re.compile(r"^(Time to run|\*Run time:\*)")  # the paragraph time_to_run writes (and older wordings)


def notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb"))


def is_checked(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(CHECK_MARK)


def reference_outputs(outputs: list) -> list:
    """Text only: nbval does not compare images, and pictures don't belong in git diffs."""
    kept = []
    for output in outputs:
        output = nbformat.from_dict(dict(output))
        if "data" in output:
            output.data = {k: v for k, v in output.data.items() if not k.startswith("image/")}
            if not output.data:
                continue
        if output.output_type == "execute_result":
            output.execution_count = None
        kept.append(output)
    return kept


def normalise(path: Path, refresh_checked: bool = False) -> None:
    notebook = nbformat.read(path, as_version=4)
    cells = notebook.cells
    badge = badge_markdown(path.relative_to(ROOT).as_posix())
    first = cells[0].source.splitlines()
    if first and first[0].startswith("[![Open In Colab]"):
        first = first[1:]
    cells[0].source = badge + "\n\n" + "\n".join(first).strip()
    write_time_to_run(cells, time_to_run(path.name))
    setup = nbformat.v4.new_code_cell(SETUP_CELL.rstrip())
    setup.id = "colab-setup"  # a fixed id, so re-running this script changes nothing
    if len(cells) > 1 and cells[1].cell_type == "code" and cells[1].source.startswith("# Colab only"):
        cells[1] = setup
    else:
        cells.insert(1, setup)
    executed = _executed_cells(path) if refresh_checked else {}
    code_cells = [cell for cell in cells if cell.cell_type == "code"]
    for number, cell in enumerate(code_cells, 1):
        if not is_checked(cell):
            cell.outputs, cell.execution_count = [], None
            continue
        if cell.source in executed:
            cell.outputs = reference_outputs(executed[cell.source])
        else:
            cell.outputs = reference_outputs(cell.outputs)
        # nbval skips (and rejects) a reference without an execution count; a stable number
        # keeps diffs quiet.
        cell.execution_count = number
    nbformat.validator.normalize(notebook)
    nbformat.write(notebook, path)


def time_paragraph(cells: list) -> tuple[int, int] | None:
    """(cell, paragraph) of the first Markdown paragraph that says how long the notebook takes, or None."""
    for index, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            for number, paragraph in enumerate(cell.source.split("\n\n")):
                if TIME_TO_RUN.match(paragraph.strip()):
                    return index, number
    return None


def write_time_to_run(cells: list, sentence: str) -> None:
    """Put ``sentence`` where the notebook says how long it takes (at the end of its first cell if it did not)."""
    found = time_paragraph(cells)
    if found is None:
        cells[0].source = cells[0].source.rstrip() + "\n\n" + sentence
        return
    index, number = found
    paragraphs = cells[index].source.split("\n\n")
    paragraphs[number] = sentence
    cells[index].source = "\n\n".join(paragraphs)


def _executed_cells(path: Path) -> dict[str, list]:
    copy = EXECUTED / path.name
    if not copy.exists():
        raise SystemExit(f"{copy} does not exist: run `python scripts/run_course.py {path}` first.")
    return {cell.source: cell.outputs for cell in nbformat.read(copy, as_version=4).cells if is_checked(cell)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--refresh-checked", action="store_true")
    args = parser.parse_args()
    for path in [p.resolve() for p in args.notebooks] or notebooks():
        normalise(path, args.refresh_checked)
        print(f"normalised {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
