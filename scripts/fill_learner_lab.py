"""Write a learner lab with the worked answers filled in: the copy CI validates end to end.

The learner version (``labs/learner/<lab>.ipynb``) runs unanswered: every check prints "not yet". This script
puts the solutions in, so that running its output proves the checks accept correct work, on the
learner's own run: the ``answer = None`` cells get, in order, the Python blocks under the
numbered headings ("## N · ...") of ``docs/solutions/<lab>.md`` (a question with two answer
cells has two blocks); ``send_one``, in a lab that has it (lab 1), gets ``docs/solutions/lab_client.py``;
a prediction (``my_guess = None``, ``my_budget_guess = None``) gets a number or "up". A solution that no
longer matches the notebook (a question without a solution block, a cell that moved) stops the script with
what to fix.

``--both`` fills the instructor version instead (``labs/<lab>.ipynb``: every cell of the learner version, the
same code, plus the cells tagged ``instructor``) and keeps each answer cell as the learner finds it, unanswered,
before its filled copy: one run of that notebook executes every cell of both versions, and each check twice,
"not yet" and then accepting the worked answer. ``tests/test_filled_learner_lab.py`` runs it; CI runs no other
copy of a lab (one lab on a 2-core CPU takes 5-7 minutes).

    .venv/bin/python scripts/fill_learner_lab.py [--lab 01_concurrency_lab | 02_serving_real_traffic] [--both] [--out build/filled]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
LEARNER = ROOT / "labs" / "learner"
SOLUTIONS = ROOT / "docs" / "solutions"
CLIENT = SOLUTIONS / "lab_client.py"
DEFAULT_LAB = "01_concurrency_lab"
ANSWER_CELL = re.compile(r"^answer = None\b", re.M)
GUESS_CELL = re.compile(r"^(my_guess|my_budget_guess) = None\b", re.M)
CLIENT_CELL = "async def send_one("
# any answer of the right kind: a prediction is compared with the run, never graded
GUESSES = {"my_guess": "5", "my_budget_guess": '"up"'}


def labs() -> list[str]:
    """The learner labs that have a solutions file, e.g. ``["01_concurrency_lab", "02_serving_real_traffic"]``."""
    return sorted(path.stem for path in LEARNER.glob("*.ipynb") if (SOLUTIONS / f"{path.stem}.md").is_file())


def solution_blocks(markdown: str) -> list[str]:
    """Every ```python block under a numbered heading ("## N · ..."), in the document's order."""
    blocks = []
    for match in re.finditer(r"^## \d+ · .*?\n(.*?)(?=^## |\Z)", markdown, re.M | re.S):
        blocks += re.findall(r"```python\n(.*?)```", match.group(1), re.S)
    return blocks


def filled(notebook: nbformat.NotebookNode, blocks: list[str], client: str | None = None, *,
           solutions: str = "docs/solutions", unanswered_first: bool = False) -> nbformat.NotebookNode:
    """``notebook`` with its answer cells, prediction and (where it has one) ``send_one`` cell filled in;
    with ``unanswered_first``, each answer cell also stays as it was, just before its filled copy."""
    answers = 0
    cells = []
    for cell in notebook.cells:
        cells.append(cell)
        if cell.cell_type != "code":
            continue
        if ANSWER_CELL.search(cell.source):
            answers += 1
            if answers > len(blocks):
                break
            if unanswered_first:
                cells.insert(-1, nbformat.v4.new_code_cell(cell.source, id=f"{cell.get('id', 'answer')}-unanswered"))
            # the cell's "answer = None  # unit" line becomes the worked answer; the check after it stays
            cell.source = re.sub(r"^answer = None.*$", lambda _: blocks[answers - 1].rstrip(), cell.source,
                                 count=1, flags=re.M)
        elif GUESS_CELL.search(cell.source):
            cell.source = GUESS_CELL.sub(lambda match: f"{match[1]} = {GUESSES[match[1]]}", cell.source, count=1)
        elif CLIENT_CELL in cell.source:
            if client is None:
                raise SystemExit("this lab has a `send_one` cell but no client solution was given")
            cell.source = client
    if answers != len(blocks):
        raise SystemExit(f"{len(blocks)} solution blocks in {solutions} for {answers} answer cells in the lab: "
                         "they disagree; give every `answer = None` cell one block, in order")
    notebook.cells = cells
    return notebook


def fill(lab: str = DEFAULT_LAB, *, both: bool = False) -> nbformat.NotebookNode:
    """The learner version of ``lab`` (a file stem under ``labs/learner/``) with ``docs/solutions/<lab>.md`` in it;
    with ``both``, the instructor version, each answer cell run unanswered and then answered (module docstring)."""
    path, solutions = (LEARNER.parent if both else LEARNER) / f"{lab}.ipynb", SOLUTIONS / f"{lab}.md"
    for needed in (path, solutions):
        if not needed.is_file():
            raise SystemExit(f"no {needed.relative_to(ROOT)}: labs with both a learner version and solutions: "
                             + ", ".join(labs()))
    notebook = nbformat.read(path, as_version=4)
    return filled(notebook, solution_blocks(solutions.read_text()), CLIENT.read_text(),
                  solutions=str(solutions.relative_to(ROOT)), unanswered_first=both)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default=DEFAULT_LAB,
                        help=f"the lab's file stem under labs/learner/ (default {DEFAULT_LAB}; with solutions: "
                             + ", ".join(labs()) + ")")
    parser.add_argument("--both", action="store_true",
                        help="fill the instructor version, each answer cell unanswered then answered (what CI runs)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "filled")
    args = parser.parse_args(argv)
    notebook = fill(args.lab.removesuffix(".ipynb"), both=args.both)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.lab.removesuffix('.ipynb')}.ipynb"
    nbformat.write(notebook, path)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


if __name__ == "__main__":
    sys.exit(main() and 0)
