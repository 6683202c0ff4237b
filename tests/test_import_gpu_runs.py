"""scripts/import_gpu_runs.py: executed GPU copies go into results/gpu/executed/ by their own stamp, or not at all.

The copies here are the course's real notebooks with their code cells marked as run and a stamp as
scripts/run_course.py writes it; the folder they go into is a temporary one holding what results/gpu/executed/ holds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import import_gpu_runs  # noqa: E402  (a script, not a package)

H100 = "1 x NVIDIA H100 80GB HBM3 (79 GiB)"


def executed_copy(folder: Path, source: str, model: str = "smollm2", device: str = "cuda", seconds: float = 99.5,
                  error_in: int | None = None) -> Path:
    """``source`` as run_course.py leaves it after a run: every code cell run, stamped (or not, device=None)."""
    notebook = nbformat.read(ROOT / source, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for count, cell in enumerate(code, 1):
        cell.execution_count = count
    if error_in is not None:
        code[error_in].outputs = [nbformat.v4.new_output("error", ename="RuntimeError", evalue="engine died",
                                                         traceback=[])]
    if device:
        notebook.metadata["course_run"] = {"machine": H100, "device": device, "model": model, "notebook": source,
                                           "seconds": seconds, "vllm_version": "0.26.0"}
    path = folder / model / Path(source).name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


@pytest.fixture
def executed(tmp_path, monkeypatch) -> Path:
    """A results/gpu/executed/ with one earlier run and notebook 04 awaiting its copies."""
    folder = tmp_path / "executed"
    folder.mkdir()
    (folder / "timings.json").write_text(json.dumps({"01_start_server.ipynb": 56.3}))
    (folder / "machines.json").write_text(json.dumps({"01_start_server.ipynb": "1 x NVIDIA H200 (140 GiB)"}))
    (folder / "AWAITING.json").write_text(json.dumps({
        "notebooks/04_continuous_batching.ipynb": {"since": "2026-12-05", "why": "the prefill group"},
        "notebooks/06_beyond_one_server.ipynb": {"since": "2026-12-05", "why": "no copy yet"}}))
    monkeypatch.setattr(import_gpu_runs, "EXECUTED", folder)
    return folder


def test_copies_go_in_under_their_names_with_their_seconds_and_gpu(tmp_path, executed):
    runs = tmp_path / "build" / "gpu"
    executed_copy(runs, "notebooks/04_continuous_batching.ipynb", seconds=253.2)
    executed_copy(runs, "notebooks/04_continuous_batching.ipynb", model="dummy-llama-3.1-8b", seconds=293.4)
    executed_copy(runs, "labs/01_concurrency_lab.ipynb", seconds=320.5)
    assert import_gpu_runs.main([str(runs)]) == 0
    assert sorted(path.name for path in executed.glob("*.ipynb")) == [
        "04_continuous_batching-dummy-llama-3.1-8b.ipynb", "04_continuous_batching.ipynb",
        "lab_01_concurrency_lab-smollm2.ipynb"]
    assert json.loads((executed / "timings.json").read_text()) == {
        "01_start_server.ipynb": 56.3, "04_continuous_batching.ipynb": 253.2,
        "04_continuous_batching.ipynb (dummy-llama-3.1-8b)": 293.4, "01_concurrency_lab.ipynb (smollm2)": 320.5}
    machines = json.loads((executed / "machines.json").read_text())
    assert machines["01_start_server.ipynb"] == "1 x NVIDIA H200 (140 GiB)"
    assert machines["01_concurrency_lab.ipynb (smollm2)"] == H100
    # notebook 04's copies both ran its code now; notebook 06 still has none
    assert list(json.loads((executed / "AWAITING.json").read_text())) == ["notebooks/06_beyond_one_server.ipynb"]


def test_a_notebook_stays_awaiting_while_one_of_its_copies_ran_older_code(tmp_path, executed):
    stale = executed_copy(tmp_path / "older", "notebooks/04_continuous_batching.ipynb", model="dummy-llama-3.1-8b")
    notebook = nbformat.read(stale, as_version=4)
    next(cell for cell in notebook.cells if cell.cell_type == "code"
         and not cell.source.startswith(import_gpu_runs.COLAB_ONLY)).source += "\n# an older line"
    nbformat.write(notebook, executed / "04_continuous_batching-dummy-llama-3.1-8b.ipynb")
    executed_copy(tmp_path / "new", "notebooks/04_continuous_batching.ipynb")
    assert import_gpu_runs.main([str(tmp_path / "new")]) == 0
    assert "notebooks/04_continuous_batching.ipynb" in json.loads((executed / "AWAITING.json").read_text())


@pytest.mark.parametrize(("kind", "message"), [
    ("unstamped", "no course_run stamp"), ("cpu", "ran on cpu, not a GPU"), ("learner", "not a notebook or an"),
    ("older code", "ran other code than"), ("error", "code cell 2 raised RuntimeError")])
def test_a_copy_that_cannot_be_a_reference_stops_the_import_before_anything_is_written(tmp_path, executed, kind,
                                                                                         message):
    runs = tmp_path / "build"
    executed_copy(runs, "notebooks/03_paged_attention.ipynb", model="good")  # fine, and still not imported
    source = "labs/learner/01_concurrency_lab.ipynb" if kind == "learner" else "notebooks/04_continuous_batching.ipynb"
    bad = executed_copy(runs, source, device={"unstamped": None, "cpu": "cpu"}.get(kind, "cuda"),
                        error_in=2 if kind == "error" else None)
    if kind == "older code":
        notebook = nbformat.read(bad, as_version=4)
        notebook.cells.append(nbformat.v4.new_code_cell("print('a cell the notebook no longer has')"))
        nbformat.write(notebook, bad)
    before = {path.name: path.read_text() for path in executed.iterdir()}
    with pytest.raises(SystemExit, match=message):
        import_gpu_runs.main([str(runs)])
    assert {path.name: path.read_text() for path in executed.iterdir()} == before


def test_two_runs_of_one_notebook_on_one_model_are_refused(tmp_path, executed):
    executed_copy(tmp_path / "morning", "notebooks/04_continuous_batching.ipynb")
    executed_copy(tmp_path / "evening", "notebooks/04_continuous_batching.ipynb")
    with pytest.raises(SystemExit, match="two runs of the same notebook"):
        import_gpu_runs.main([str(tmp_path / "morning"), str(tmp_path / "evening")])
    assert not (executed / "04_continuous_batching.ipynb").exists()


@pytest.mark.parametrize(("source", "model", "name", "key"), [
    ("notebooks/05_throughput_tuning.ipynb", "smollm2", "05_throughput_tuning.ipynb", "05_throughput_tuning.ipynb"),
    ("notebooks/04_continuous_batching.ipynb", "dummy-llama-3.1-8b", "04_continuous_batching-dummy-llama-3.1-8b.ipynb",
     "04_continuous_batching.ipynb (dummy-llama-3.1-8b)"),
    ("labs/02_serving_real_traffic.ipynb", "smollm2", "lab_02_serving_real_traffic-smollm2.ipynb",
     "02_serving_real_traffic.ipynb (smollm2)")])
def test_names_and_keys_are_the_ones_the_results_already_use(source, model, name, key):
    copy = import_gpu_runs.GpuCopy(Path("x.ipynb"), source, model, 1.0, H100)
    assert (copy.name, copy.key) == (name, key)
    assert import_gpu_runs.source_of(Path(name)) == source


def test_a_path_that_is_not_there_is_named_with_what_to_give(tmp_path, executed, capsys):
    with pytest.raises(SystemExit):
        import_gpu_runs.main([str(tmp_path / "gpu.tgz-not-unpacked")])
    assert "no such file or folder" in capsys.readouterr().err


def test_nbvals_check_marker_is_not_code_but_any_other_change_is(tmp_path):
    """A cell that lost (or gained) its `# NBVAL_CHECK_OUTPUT` line runs the same code; a changed comment does not."""
    def notebook(*sources: str) -> Path:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
        return path

    marked = notebook("# NBVAL_CHECK_OUTPUT\nprint(1)", "x = 2")
    assert import_gpu_runs.code_of(marked) == import_gpu_runs.code_of(notebook("print(1)", "x = 2"))
    assert import_gpu_runs.code_of(marked) != import_gpu_runs.code_of(notebook("print(1)  # one", "x = 2"))


def test_the_colab_setup_cell_is_not_what_a_gpu_copy_ran(tmp_path):
    """The setup cell does nothing off Colab: a copy made before it changed still ran the notebook's code."""
    from helpers.colab import SETUP_CELL

    def notebook(*sources: str) -> Path:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
        return path

    old_setup = SETUP_CELL.replace("(not yet timed on Colab)", "(about 3-5 minutes)")
    assert old_setup != SETUP_CELL
    assert import_gpu_runs.code_of(notebook(old_setup, "x = 2")) == import_gpu_runs.code_of(notebook(SETUP_CELL, "x = 2"))
    assert import_gpu_runs.code_of(notebook(SETUP_CELL, "x = 2")) != import_gpu_runs.code_of(notebook(SETUP_CELL, "x = 3"))
