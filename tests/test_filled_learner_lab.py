"""The learner's lab with the worked answers filled in (scripts/fill_learner_lab.py), run on the real server.

The unanswered lab shows "not yet" everywhere (the instructor version runs that way under nbval); this
copy proves the other half: with docs/solutions' answers, every check accepts the learner's own run,
the learner's client passes (held against vLLM's view of its own run), and the naive loop is measured.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from fill_learner_lab import filled, solution_blocks  # noqa: E402  (a script, not a package)

CLIENT = (ROOT / "docs" / "solutions" / "lab_client.py").read_text()


def lab() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "labs" / "learner" / "01_concurrency_lab.ipynb", as_version=4)


def test_every_answer_cell_gets_a_solution_and_a_missing_one_is_named():
    blocks = solution_blocks((ROOT / "docs" / "solutions" / "01_concurrency_lab.md").read_text())
    notebook = filled(lab(), blocks, CLIENT)
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    assert not re.search(r"^(answer|my_guess) = None", code, re.M)
    assert "raise NotImplementedError" not in code and "async def send_one" in code
    with pytest.raises(SystemExit, match="they disagree"):
        filled(lab(), blocks[:-1], CLIENT)


def shown(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/markdown", output.data.get("text/plain", "")))
    return "".join(parts)


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_the_filled_lab_passes_every_check_on_its_own_run(tmp_path):
    from nbclient import NotebookClient

    blocks = solution_blocks((ROOT / "docs" / "solutions" / "01_concurrency_lab.md").read_text())
    notebook = filled(lab(), blocks, CLIENT)
    NotebookClient(notebook, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "labs" / "learner")}}).execute()
    outputs = {cell.get("id"): shown(cell) for cell in notebook.cells if cell.cell_type == "code"}
    marks = re.findall(r"^(✅|❌|✏️).*$", "\n".join(outputs.values()), re.M)
    verdicts = re.findall(r"^(?:✅|❌|✏️).*$", "\n".join(outputs.values()), re.M)
    assert marks == ["✅"] * 9, verdicts  # the nine answer cells of questions 1-8
    assert "Your client measures what happened" in outputs["your-client-check"], outputs["your-client-check"]
    assert re.search(r"a generate\(\) loop took .* the throughput", outputs["naive-run"])
