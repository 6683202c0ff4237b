"""Write the learner's lab with the worked answers filled in: the copy CI validates end to end.

The learner version (``labs/learner/``) runs unanswered: every check prints "not yet". This script
puts the solutions in, so that nbval on its output proves the checks accept correct work, on the
learner's own run: the ``answer = None`` cells get, in order, the Python blocks under the
numbered headings ("## N · ...") of ``docs/solutions/<lab>.md`` (a question with two answer
cells has two blocks); ``send_one`` gets ``docs/solutions/lab_client.py``;
a prediction (``my_guess = None``) gets a number. A solution that no longer matches the notebook
(a question without a solution block, a cell that moved) stops the script with what to fix.

    .venv/bin/python scripts/fill_learner_lab.py [--out build/filled]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "labs" / "learner" / "01_concurrency_lab.ipynb"
SOLUTIONS = ROOT / "docs" / "solutions"
ANSWER_CELL = re.compile(r"^answer = None\b", re.M)
GUESS_CELL = re.compile(r"^my_guess = None\b", re.M)
CLIENT_CELL = "async def send_one("


def solution_blocks(markdown: str) -> list[str]:
    """Every ```python block under a numbered heading ("## N · ..."), in the document's order."""
    blocks = []
    for match in re.finditer(r"^## \d+ · .*?\n(.*?)(?=^## |\Z)", markdown, re.M | re.S):
        blocks += re.findall(r"```python\n(.*?)```", match.group(1), re.S)
    return blocks


def filled(notebook: nbformat.NotebookNode, blocks: list[str], client: str) -> nbformat.NotebookNode:
    answers = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if ANSWER_CELL.search(cell.source):
            answers += 1
            if answers > len(blocks):
                break
            # the cell's "answer = None  # unit" line becomes the worked answer; the check after it stays
            cell.source = re.sub(r"^answer = None.*$", lambda _: blocks[answers - 1].rstrip(), cell.source,
                                 count=1, flags=re.M)
        elif GUESS_CELL.search(cell.source):
            cell.source = GUESS_CELL.sub("my_guess = 5", cell.source, count=1)
        elif CLIENT_CELL in cell.source:
            cell.source = client
    if answers != len(blocks):
        raise SystemExit(f"{len(blocks)} solution blocks in docs/solutions for {answers} answer cells in the lab: "
                         "they disagree; give every `answer = None` cell one block, in order")
    return notebook


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "filled")
    args = parser.parse_args(argv)
    notebook = nbformat.read(LAB, as_version=4)
    blocks = solution_blocks((SOLUTIONS / "01_concurrency_lab.md").read_text())
    notebook = filled(notebook, blocks, (SOLUTIONS / "lab_client.py").read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / LAB.name
    nbformat.write(notebook, path)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


if __name__ == "__main__":
    sys.exit(main() and 0)
