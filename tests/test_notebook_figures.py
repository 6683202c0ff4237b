"""helpers.drawing.show_figures_in_notebooks: a figure the helpers return shows as a picture in a notebook."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def test_a_bare_figure_shows_as_a_picture_in_a_notebook_that_never_calls_pyplot() -> None:
    """Lab 2's figures are built without pyplot; before the fix, its executed copies showed "<Figure size ...>"."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(
        "import helpers\nfrom matplotlib.figure import Figure\nfrom IPython.display import display\n"
        "fig = Figure(figsize=(3, 2))\nfig.subplots().plot([1, 2])\ndisplay(fig)")]
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = notebook.cells[0].outputs
    assert [output["data"]["image/png"][:8] for output in outputs if "image/png" in output.get("data", {})], outputs
