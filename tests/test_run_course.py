"""scripts/run_course.py: what `make course` runs and how its executed copies come out."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import run_course  # noqa: E402

from helpers.hardware import detect_device  # noqa: E402


def test_the_learners_order_puts_the_labs_among_the_chapters() -> None:
    names = [f"{path.parent.name}/{path.name}" for path in run_course.course_notebooks()]
    lab_1, lab_2 = names.index("learner/01_concurrency_lab.ipynb"), names.index("learner/02_serving_real_traffic.ipynb")
    assert names.index("notebooks/04_continuous_batching.ipynb") < lab_1 < names.index("notebooks/05_throughput_tuning.ipynb")
    assert names.index("notebooks/05_throughput_tuning.ipynb") < lab_2 < names.index("notebooks/06_beyond_one_server.ipynb")


def test_a_run_records_its_machine_and_seconds_beside_the_copies(tmp_path, monkeypatch) -> None:
    import json

    import nbformat

    monkeypatch.delenv("VLLM_COURSE_MODEL", raising=False)

    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1 + 1)")]), good)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")]), bad)
    assert run_course.main(["--out", str(tmp_path / "out"), str(good), str(bad)]) == 1
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert set(record["notebooks"]) == {"good.ipynb"} and record["failed"] == ["bad.ipynb"]
    # the machine the tests run on: a CPU's class and dtype are recorded, a GPU's name is the machine line (GPU run of
    # 2026-12-07: this asserted a CPU and failed there)
    device = detect_device()
    assert record["device"] == device and record["vllm_version"] and record["started_utc"] <= record["finished_utc"]
    if device == "cpu":
        assert record["cpu"]["cores"] >= 1 and record["cpu"]["dtype"] in ("bfloat16", "float32")
        assert record["machine"].startswith("CPU: ")
    else:
        assert "cpu" not in record and " x " in record["machine"] and "GiB" in record["machine"]
    assert record["model"] == "smollm2"
    stamp = nbformat.read(tmp_path / "out" / "good.ipynb", as_version=4).metadata["course_run"]
    assert stamp["notebook"] == str(good) and stamp["machine"] == record["machine"] and stamp["model"] == "smollm2"
    assert stamp["seconds"] == record["notebooks"]["good.ipynb"] and stamp["device"] == device
    failed = nbformat.read(tmp_path / "out" / "bad.ipynb", as_version=4).metadata["course_run"]
    assert failed["notebook"] == str(bad) and failed["seconds"] >= 0


def test_a_name_that_is_not_a_notebook_runs_nothing_and_keeps_the_files_there(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text('{"kept": true}')
    assert run_course.main(["--out", str(out), "--verbose"]) == 2
    assert run_course.main(["--out", str(out), str(tmp_path / "missing.ipynb")]) == 2
    assert "not a notebook file" in capsys.readouterr().err
    assert (out / "run.json").read_text() == '{"kept": true}' and sorted(p.name for p in out.iterdir()) == ["run.json"]
    assert run_course.main(["--help"]) == 0 and "Usage:" in capsys.readouterr().out
