"""scripts/run_course.py when a notebook fails in other ways than a cell's error, and when only some are run again.

The executor is replaced by a stand-in that raises nbclient's errors or returns seconds: no kernel, no server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import course_timings
import run_course

SETUP = {"machine": "CPU: 2 cores, AMD EPYC, AVX-512 with bf16", "device": "cpu",
         "cpu": {"model": "AMD EPYC", "cores": 2, "isa": "AVX-512 with bf16", "emulated": None, "dtype": "bfloat16"},
         "vllm_version": "0.32.0", "model": "smollm2"}


@pytest.fixture
def executor(monkeypatch, tmp_path):
    """``outcomes[name]``: the seconds a notebook takes, or the exception it ends in; every call is kept.
    The notebooks a.ipynb ... e.ipynb exist in tmp_path (run_course checks the names it is given before it runs)."""
    for name in "abcde":
        (tmp_path / f"{name}.ipynb").touch()
    outcomes: dict[str, object] = {}
    ran: list[str] = []

    def run(path: Path, out: Path, stamp=None) -> float:
        ran.append(path.name)
        outcome = outcomes.get(path.name, 1.0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(run_course, "run", run)
    monkeypatch.setattr(run_course, "machine", lambda: dict(SETUP))
    return outcomes, ran


def files(out: Path) -> tuple[dict, dict]:
    return json.loads((out / "timings.json").read_text()), json.loads((out / "run.json").read_text())


def test_a_timed_out_cell_or_a_dead_kernel_fails_that_notebook_and_the_next_ones_still_run(executor, tmp_path):
    outcomes, ran = executor
    outcomes.update({"b.ipynb": CellTimeoutError("A cell timed out while it was being executed, after 1800 seconds."),
                     "c.ipynb": DeadKernelError("Kernel died"),
                     "d.ipynb": CellExecutionError("traceback", "ZeroDivisionError", "division by zero"),
                     "e.ipynb": 2.5})
    names = ["a.ipynb", "b.ipynb", "c.ipynb", "d.ipynb", "e.ipynb"]
    assert run_course.main(["--out", str(tmp_path), *(str(tmp_path / name) for name in names)]) == 1
    assert ran == names
    timings, record = files(tmp_path)
    assert timings == {"a.ipynb": 1.0, "e.ipynb": 2.5} == record["notebooks"]
    assert record["failed"] == ["b.ipynb", "c.ipynb", "d.ipynb"]


def test_an_interrupted_run_still_writes_what_it_ran(executor, tmp_path):
    outcomes, _ = executor
    outcomes["b.ipynb"] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        run_course.main(["--out", str(tmp_path), str(tmp_path / "a.ipynb"), str(tmp_path / "b.ipynb")])
    timings, record = files(tmp_path)
    assert timings == {"a.ipynb": 1.0} and record["failed"] == [] and record["machine"] == SETUP["machine"]


def whole_course(failed: str) -> dict:
    names = [path.name for path in run_course.course_notebooks()]
    return {**SETUP, "started_utc": "2026-12-05T00:00:00+00:00", "finished_utc": "2026-12-05T01:00:00+00:00",
            "notebooks": {name: 10.0 for name in names if name != failed}, "failed": [failed]}


def test_notebooks_run_again_are_merged_into_the_whole_run_which_can_then_be_recorded(executor, tmp_path, monkeypatch):
    outcomes, _ = executor
    first, again = run_course.course_notebooks()[0], run_course.course_notebooks()[3]
    (tmp_path / "run.json").write_text(json.dumps(whole_course(failed=again.name)))
    monkeypatch.setattr(course_timings, "CPU_TIMINGS", tmp_path / "kept")
    with pytest.raises(SystemExit, match=rf"failed \['{again.name}'\]"):  # before: one failure, not recorded
        course_timings.record(tmp_path)
    outcomes.update({again.name: 42.0, first.name: DeadKernelError("Kernel died")})
    assert run_course.main(["--out", str(tmp_path), str(again), str(first)]) == 1
    timings, record = files(tmp_path)
    assert record["failed"] == [first.name] and first.name not in record["notebooks"]  # its old time is not kept
    assert record["notebooks"][again.name] == 42.0
    assert len(record["notebooks"]) == len(run_course.course_notebooks()) - 1
    assert timings == record["notebooks"] and record["started_utc"] == "2026-12-05T00:00:00+00:00"
    with pytest.raises(SystemExit, match=rf"failed \['{first.name}'\]"):  # still refused: one notebook failed
        course_timings.record(tmp_path)
    outcomes[first.name] = 7.0
    assert run_course.main(["--out", str(tmp_path), str(first)]) == 0
    assert course_timings.record(tmp_path) == tmp_path / "kept" / "avx512-bf16.json"  # whole again: kept


def test_named_notebooks_replace_a_run_of_another_setup_rather_than_mix_with_it(executor, tmp_path, capsys):
    other = {**whole_course(failed="x.ipynb"), "vllm_version": "0.31.0"}
    (tmp_path / "run.json").write_text(json.dumps(other))
    assert run_course.main(["--out", str(tmp_path), str(tmp_path / "a.ipynb")]) == 0
    timings, record = files(tmp_path)
    assert timings == {"a.ipynb": 1.0} and record["failed"] == [] and record["vllm_version"] == "0.32.0"
    assert "written on another setup: replaced, not merged" in capsys.readouterr().out
    (tmp_path / "run.json").write_text(json.dumps(whole_course(failed="x.ipynb")))
    assert run_course.main(["--out", str(tmp_path)]) == 0  # the whole course: a fresh run, nothing merged
    _, record = files(tmp_path)
    assert record["failed"] == [] and record["started_utc"] != "2026-12-05T00:00:00+00:00"

