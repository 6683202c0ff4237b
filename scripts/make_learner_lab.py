"""Write the learner version of a lab: the same notebook without its cells tagged ``instructor``.

The lab in ``labs/`` is the instructor version: after the learner's guided questions it shows the
explanation computed from the run. The learner version in ``labs/learner/`` leaves that out, so the
last question (write the explanation) stays the learner's; worked answers live in
``docs/solutions/``. Run this after editing a lab; ``tests/test_notebook_shape.py`` fails while the
committed learner version differs from what this script writes.

    .venv/bin/python scripts/make_learner_lab.py [labs/01_concurrency_lab.ipynb ...]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_header import ROOT, normalise  # a sibling script, not a package

INSTRUCTOR_TAG = "instructor"
LEARNER_DIR = ROOT / "labs" / "learner"
NOTE = ("*Learner version.* The section that writes the explanation from your numbers is left out: the last "
        "question asks you for it. The complete notebook is `labs/{name}`, and the worked answers are in "
        "`docs/solutions/` (for instructors, and for you once you have written yours).")


def learner_path(lab: Path) -> Path:
    return LEARNER_DIR / lab.name


def instructor_lab(path: Path) -> Path:
    """``path`` resolved, when it is an instructor lab (``labs/*.ipynb``); otherwise SystemExit saying which are.

    A learner lab given back would gain a second "(learner version)"; a chapter notebook would land in labs/learner/.
    """
    resolved = path.resolve()
    labs = sorted(p.name for p in (ROOT / "labs").glob("*.ipynb"))
    if resolved.parent != ROOT / "labs" or resolved.suffix != ".ipynb" or not resolved.is_file():
        raise SystemExit(f"{path} is not an instructor lab: give a notebook of labs/ ({', '.join(labs)}), or no "
                         "argument for all of them. The learner versions in labs/learner/ are written from those.")
    return resolved


def learner_version(lab: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The notebook without instructor cells, with a note under its title saying what is missing."""
    notebook = copy.deepcopy(lab)
    notebook.cells = [cell for cell in notebook.cells if INSTRUCTOR_TAG not in cell.metadata.get("tags", [])]
    title = notebook.cells[0]
    lines = title.source.splitlines()
    heading = next((i for i, line in enumerate(lines) if line.startswith("# ")), None)
    if heading is None:
        raise ValueError(f"{name}: its first cell has no title line starting with '# ', which the learner version "
                         "marks as such: put the lab's title there and run again")
    lines[heading] += " (learner version)"
    lines.insert(heading + 1, "\n" + NOTE.format(name=name))
    title.source = "\n".join(lines)
    return notebook


def write_learner_version(lab_path: Path) -> Path:
    out = learner_path(lab_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(learner_version(nbformat.read(lab_path, as_version=4), lab_path.name), out)
    normalise(out)  # its own Colab badge, no outputs
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("labs", nargs="*", type=Path)
    args = parser.parse_args()
    labs = [instructor_lab(path) for path in args.labs] or sorted((ROOT / "labs").glob("*.ipynb"))
    for lab in labs:
        try:
            print(f"wrote {write_learner_version(lab).relative_to(ROOT)}")
        except ValueError as error:
            raise SystemExit(str(error)) from None


if __name__ == "__main__":
    main()
