"""docs/module_coverage.md maps every paragraph of the module text (docs/module_text.md) to the cells that teach it.

Each row quotes the module and the cell word for word (whitespace aside). The test fails when a quote is not
where the row says, when a paragraph of the module is quoted by no row, or when an open row names no issue.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULE = (ROOT / "docs" / "module_text.md").read_text().split("```text\n", 1)[1].rsplit("```", 1)[0]
HEADING = re.compile(r"^[\w·][\w· ]{0,40}$")  # "Throughput tuning", "Cheat sheet": titles, not claims


def squash(text: str) -> str:
    """Whitespace collapsed, and Markdown's quote marks ("> " opening a line of a box) dropped."""
    return " ".join(re.sub(r"(?m)^\s*> ?", "", text).split())


def rows() -> list[dict[str, str]]:
    table = [line for line in (ROOT / "docs" / "module_coverage.md").read_text().splitlines() if line.startswith("| ")]
    names = ("module", "notebook", "cell", "says")
    return [dict(zip(names, (part.strip() for part in line.strip("|").split(" | ")))) for line in table[2:]]


def paragraphs() -> list[str]:
    """The module's paragraphs and bullet points, without its titles."""
    units = []
    for block in re.split(r"\n\s*\n", MODULE):
        lines = [line for line in block.splitlines() if line.strip()]
        if len(lines) == 1 and HEADING.match(lines[0].strip()):
            continue
        bullets = [line for line in lines if line.strip().startswith("•")]
        units += bullets or ["\n".join(lines)]
    return units


def cell_text(notebook: str, cell_id: str) -> str:
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    found = [cell for cell in cells if cell.get("id") == cell_id]
    assert found, f"{notebook} has no cell {cell_id}"
    return "".join(found[0]["source"])


@pytest.mark.parametrize("row", rows(), ids=lambda row: f"{row['notebook']}:{row['cell']}:{row['module'][:30]}")
def test_each_row_quotes_the_module_and_the_cell_word_for_word(row):
    assert squash(row["module"]) in squash(MODULE), f"not in the module text: {row['module']!r}"
    if row["notebook"] == "open":
        assert re.fullmatch(r"issue \d+", row["cell"]), f"an open row names the issue that closes it: {row}"
        return
    assert squash(row["says"]) in squash(cell_text(row["notebook"], row["cell"])), (
        f"{row['notebook']} cell {row['cell']} does not say {row['says']!r}")


def test_every_paragraph_of_the_module_is_taught_somewhere():
    quotes = [squash(row["module"]) for row in rows()]
    untaught = [unit[:80] for unit in paragraphs() if not any(quote in squash(unit) for quote in quotes)]
    assert not untaught, f"paragraphs of the module text no row of docs/module_coverage.md quotes: {untaught}"


# sha256 of squash() of ../shared/seed/000_d28ba220eae4e59e.txt (its "Skip to content" line dropped), taken when
# docs/module_text.md was checked against it: a fresh clone, without ../shared, still checks the copy.
SEED_SHA256 = "7a71bf38e13556e31f7f04cf9404dd7fc62d16a3d295522ba2d228e6d6f220bf"


def test_the_module_text_is_the_one_the_course_was_built_from():
    assert hashlib.sha256(squash(MODULE).encode()).hexdigest() == SEED_SHA256, (
        "docs/module_text.md is no longer the module text the course was built from")
    seed = ROOT.parent / "shared" / "seed" / "000_d28ba220eae4e59e.txt"
    if seed.exists():  # beside the curriculum's seed folder: the copy against the seed itself, word for word
        assert squash(seed.read_text().replace("Skip to content", "", 1)) == squash(MODULE)
