"""Each lab run once on the real server, as both its versions and with the worked answers (scripts/fill_learner_lab.py
--both): the only run of a lab in ``make test``, which ignores ``labs/`` (one lab takes 5-7 minutes on a 2-core CPU).

The copy is the instructor version (every cell of the learner version, the same code, plus the cells tagged
``instructor``), with each answer cell twice: as the learner finds it, where the check must say "not yet", then
with docs/solutions' answer, where it must accept the learner's own run. No cell may fail. Lab 1: the learner's
client passes (held against vLLM's view of its own run) and the naive loop is measured. Lab 2: the saturation
rate and the faster setting at light load are accepted on the learner's sweep. That the learner version is the
instructor version without its instructor cells is tested by tests/test_notebook_shape.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from fill_learner_lab import fill, filled, solution_blocks  # noqa: E402  (a script, not a package)

CLIENT = (ROOT / "docs" / "solutions" / "lab_client.py").read_text()
LABS = ("01_concurrency_lab", "02_serving_real_traffic")
VERDICT = re.compile(r"^(✅|❌|✏️).*$", re.M)  # helpers.feedback: ✅ right, ❌ wrong, ✏️ not answered


def lab(name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "labs" / "learner" / f"{name}.ipynb", as_version=4)


@pytest.mark.parametrize("name", LABS)
def test_every_answer_cell_gets_a_solution_and_a_missing_one_is_named(name):
    blocks = solution_blocks((ROOT / "docs" / "solutions" / f"{name}.md").read_text())
    notebook = filled(lab(name), blocks, CLIENT)
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    assert not re.search(r"^(answer|my_guess|my_budget_guess) = None", code, re.M)
    assert ('my_budget_guess = "up"' in code) == (name == "02_serving_real_traffic")  # section 6's prediction
    assert "raise NotImplementedError" not in code
    assert ("async def send_one" in code) == (name == "01_concurrency_lab")  # lab 2 has no client to write
    with pytest.raises(SystemExit, match="they disagree"):
        filled(lab(name), blocks[:-1], CLIENT)


def shown(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/markdown", output.data.get("text/plain", "")))
    return "".join(parts)


# A last cell for each lab: what tests/standby_audit.py checks after a notebook nbval runs (nothing started ahead
# still stands by), since make test runs the labs here, through nbclient
UNCLAIMED_CHECK = ("from helpers.serve.standby import unclaimed\n"
                   "assert not unclaimed(), f'started ahead, taken over by no cell: {unclaimed()}'")


def run_filled(name: str) -> tuple[dict[str, str], list[str]]:
    """Execute the filled learner lab (a cell that raises fails the test: nbclient's CellExecutionError), with
    :data:`UNCLAIMED_CHECK` as its last cell; each code cell's shown text by cell id, and every verdict line the
    checks printed, in order."""
    from nbclient import NotebookClient

    notebook = fill(name, both=True)
    notebook.cells.append(nbformat.v4.new_code_cell(UNCLAIMED_CHECK))  # the labs run here, not under nbval's audit
    NotebookClient(notebook, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "labs")}}).execute()
    outputs = {cell.get("id"): shown(cell) for cell in notebook.cells if cell.cell_type == "code"}
    return outputs, VERDICT.findall("\n".join(outputs.values()))  # the group: each line's mark


def verdict_lines(outputs: dict[str, str]) -> list[str]:
    return [m.group(0) for m in VERDICT.finditer("\n".join(outputs.values()))]


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_the_filled_lab_passes_every_check_on_its_own_run():
    outputs, marks = run_filled("01_concurrency_lab")
    assert marks == ["✏️", "✅"] * 11, verdict_lines(outputs)  # the eleven answer cells of questions 1-8, each twice
    assert "Your client measures what happened" in outputs["your-client-check"], outputs["your-client-check"]
    assert re.search(r"a generate\(\) loop took .* the throughput", outputs["naive-run"])


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_the_filled_lab_2_passes_every_check_on_its_own_run():
    from nbclient.exceptions import CellExecutionError

    try:
        outputs, marks = run_filled("02_serving_real_traffic")
    except CellExecutionError:
        # Question 1 divides each setting's measured saturation rate; a setting that kept up at every rate
        # offered has none (docs/solutions/02_serving_real_traffic.md says so). That is the sweep's outcome on
        # this run (its clock was timed slow, so every rate was too low), not the lab's error: one more run,
        # as a learner would; any other failure, or the same outcome twice, fails.
        if not a_setting_never_overloaded(newest_lab2_sweep()):
            raise
        outputs, marks = run_filled("02_serving_real_traffic")
    assert marks == ["✏️", "✅"] * 2, verdict_lines(outputs)  # questions 1 (a slot's worth), 2 (TPOT at light load)
    assert "✅ a slot of the larger batch against one of the smaller: correct" in outputs["q1"], outputs["q1"]
    assert "✅ TPOT at light load, larger over smaller: correct" in outputs["q2"], outputs["q2"]


def newest_lab2_sweep() -> Path | None:
    """The sweep file of the newest lab 2 run under the build folder (each run has a folder of its own, by time)."""
    from helpers.paths import build_dir

    runs = sorted(path for path in build_dir("lab2").glob("*/sweep.json"))
    return runs[-1] if runs else None


def a_setting_never_overloaded(sweep: Path | None) -> bool:
    from helpers.traffic.rates import load_rate_sweep, measured_saturation

    if sweep is None:
        return False
    points, _ = load_rate_sweep(sweep)
    found = measured_saturation(points)
    return bool(found) and any(each.estimate is None for each in found.values())
