"""scripts/run_course.py: what `make course` runs and how its executed copies come out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import run_course  # noqa: E402


def test_the_learners_order_puts_the_labs_among_the_chapters() -> None:
    names = [f"{path.parent.name}/{path.name}" for path in run_course.course_notebooks()]
    lab_1, lab_2 = names.index("learner/01_concurrency_lab.ipynb"), names.index("learner/02_serving_real_traffic.ipynb")
    assert names.index("notebooks/04_continuous_batching.ipynb") < lab_1 < names.index("notebooks/05_throughput_tuning.ipynb")
    assert names.index("notebooks/05_throughput_tuning.ipynb") < lab_2 < names.index("notebooks/06_beyond_one_server.ipynb")


def test_figures_are_kept_as_images_where_the_environment_draws_none(tmp_path: Path) -> None:
    """With MPLBACKEND=Agg (as on the H200's image) display(fig) alone leaves "<Figure size ...>" and no picture."""
    folder = ROOT / "build" / "test-run-course"
    folder.mkdir(parents=True, exist_ok=True)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nfrom IPython.display import display\n"
        "fig, ax = plt.subplots()\nax.plot([1, 2])\nplt.close(fig)\ndisplay(fig)")]
    nbformat.write(notebook, folder / "figure.ipynb")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_course.py"), "--out", str(tmp_path),
                           str(folder / "figure.ipynb")], env={**os.environ, "MPLBACKEND": "Agg"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    outputs = nbformat.read(tmp_path / "figure.ipynb", as_version=4).cells[0].outputs
    assert any("image/png" in output.get("data", {}) for output in outputs), outputs
