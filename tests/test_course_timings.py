"""Each notebook says how long it takes to run from the results files, not from memory (scripts/course_timings.py).

The sentence in every notebook's header is the one the files give today: a new `make course` recorded, or a new GPU
run, fails this test until ``python scripts/notebook_header.py`` has written the new figures into the notebooks.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import course_timings  # noqa: E402  (a script, not a package)
from notebook_header import notebooks, time_paragraph, write_time_to_run  # noqa: E402
from run_course import course_notebooks  # noqa: E402

LEARNER_LABS = sorted((ROOT / "labs" / "learner").glob("*.ipynb"))


@pytest.mark.parametrize("path", notebooks() + LEARNER_LABS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_notebook_states_the_time_the_results_files_give(path):
    cells = nbformat.read(path, as_version=4).cells
    found = time_paragraph(cells)
    assert found is not None, f"{path.name} does not say how long it takes: run python scripts/notebook_header.py"
    index, number = found
    stated = cells[index].source.split("\n\n")[number]
    assert stated == course_timings.time_to_run(path.name), "run python scripts/notebook_header.py"


def test_each_recorded_cpu_run_timed_every_notebook_of_the_course():
    runs = course_timings.cpu_runs()
    assert {course_timings.cpu_class(run["cpu"]) for run in runs} >= {"avx512-bf16", "avx2-emulated", "avx512"}
    for run in runs:
        assert set(run["notebooks"]) == {path.name for path in course_notebooks()}, run["machine"]
        assert not run["failed"] and run["device"] == "cpu"


def run_record(notebooks: dict[str, float], failed=(), device="cpu") -> dict:
    return {"machine": "CPU: 2 cores, AMD EPYC, AVX-512 with bf16", "device": device,
            "cpu": {"model": "AMD EPYC", "cores": 2, "isa": "AVX-512 with bf16", "emulated": None, "dtype": "bfloat16"},
            "vllm_version": "0.32.0", "started_utc": "2026-12-05T00:00:00+00:00",
            "finished_utc": "2026-12-05T00:14:00+00:00", "notebooks": notebooks, "failed": list(failed)}


def test_a_whole_run_is_recorded_by_its_class_and_becomes_the_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr(course_timings, "CPU_TIMINGS", tmp_path / "kept")
    monkeypatch.setattr(course_timings, "GPU_EXECUTED", tmp_path / "no-gpu-runs")
    whole = {path.name: 12.3 + index for index, path in enumerate(course_notebooks())}
    (tmp_path / "run.json").write_text(json.dumps(run_record(whole)))
    kept = course_timings.record(tmp_path)
    assert kept == tmp_path / "kept" / "avx512-bf16.json"
    assert course_timings.time_to_run("01_start_server.ipynb") == (
        "Time to run, every cell as `make course` runs it: 12 s on a 2-core CPU with AVX-512 BF16 (AMD EPYC, bfloat16; "
        "2026-12-05). Reading and the exercises take longer.")


@pytest.mark.parametrize(("failed", "missing", "device", "model"), [
    (["05_throughput_tuning.ipynb"], False, "cpu", "smollm2"), ([], True, "cpu", "smollm2"),
    ([], False, "cuda", "smollm2"), ([], False, "cpu", "Qwen/Qwen2.5-0.5B-Instruct")])
def test_a_failed_partial_gpu_or_other_model_run_is_not_recorded(tmp_path, monkeypatch, failed, missing, device,
                                                                  model):
    monkeypatch.setattr(course_timings, "CPU_TIMINGS", tmp_path / "kept")
    timed = {path.name: 10.0 for path in course_notebooks()[:-1 if missing else None]}
    (tmp_path / "run.json").write_text(json.dumps({**run_record(timed, failed, device), "model": model}))
    with pytest.raises(SystemExit, match="not recorded"):
        course_timings.record(tmp_path)
    assert not (tmp_path / "kept").exists()


def test_the_sentence_replaces_an_older_one_or_ends_the_first_cell():
    cells = [nbformat.v4.new_markdown_cell("# Title\n\nIntro."),
             nbformat.v4.new_markdown_cell("## Goal\n\n*Run time:* about 6 minutes.\n\nMore.")]
    write_time_to_run(cells, "Time to run, every cell: 5 s.")
    assert cells[1].source == "## Goal\n\nTime to run, every cell: 5 s.\n\nMore." and cells[0].source == "# Title\n\nIntro."
    fresh = [nbformat.v4.new_markdown_cell("# Title")]
    write_time_to_run(fresh, "Time to run, every cell: 5 s.")
    assert fresh[0].source == "# Title\n\nTime to run, every cell: 5 s."


def test_each_gpu_run_is_named_by_the_gpu_it_ran_on(tmp_path, monkeypatch):
    """The device tool lends an H200 or an H100: a sentence names each copy's own GPU (``machines.json``), and a
    copy on another GPU than the default model's says so, rather than every figure reading "on an H200"."""
    monkeypatch.setattr(course_timings, "CPU_TIMINGS", tmp_path / "no-cpu-runs")
    monkeypatch.setattr(course_timings, "GPU_EXECUTED", tmp_path)
    (tmp_path / "timings.json").write_text(json.dumps({"04_continuous_batching.ipynb": 253.2,
                                                       "04_continuous_batching.ipynb (dummy-llama-3.1-8b)": 218.0}))
    (tmp_path / "machines.json").write_text(json.dumps({
        "04_continuous_batching.ipynb": "1 x NVIDIA H100 80GB HBM3 (79 GiB)",
        "04_continuous_batching.ipynb (dummy-llama-3.1-8b)": "1 x NVIDIA H200 (140 GiB)"}))
    assert course_timings.time_to_run("04_continuous_batching.ipynb") == (
        "Time to run, every cell as `make course` runs it: 253 s on an H100 (date unknown; 218 s on the 8B shape on "
        "an H200). Reading and the exercises take longer.")


@pytest.mark.parametrize(("cpu", "name", "words"), [
    ({"model": "AMD EPYC", "cores": 2, "isa": "AVX-512 with bf16", "emulated": None, "dtype": "bfloat16"},
     "avx512-bf16", "a 2-core CPU with AVX-512 BF16 (AMD EPYC, bfloat16; 2026-12-04)"),
    ({"model": "Intel(R) Xeon(R) Processor", "cores": 2, "isa": "AVX-512 with AMX", "emulated": None,
      "dtype": "bfloat16"}, "amx-bf16", "a 2-core CPU with AVX-512 and AMX (Intel Xeon, bfloat16; 2026-12-04)"),
    ({"model": "AMD EPYC", "cores": 2, "isa": "AVX2", "emulated": "avx2", "dtype": "float32"}, "avx2-emulated",
     "a 2-core CPU with AVX2 only (AMD EPYC limited to AVX2 with `VLLM_COURSE_CPU_ISA=avx2`, float32; 2026-12-04)"),
    ({"model": "Intel(R) Xeon(R) Processor @ 2.80GHz", "cores": 2, "isa": "AVX-512", "emulated": None,
      "dtype": "float32"}, "avx512", "a 2-core CPU with AVX-512 but no BF16 (Intel Xeon @ 2.80GHz, float32; 2026-12-04)"),
])
def test_each_class_of_cpu_is_named_so_a_reader_can_find_theirs(cpu, name, words):
    assert course_timings.cpu_class(cpu) == name
    assert course_timings.describe_cpu(cpu, "2026-12-04") == words


def test_the_readme_and_the_instructor_guide_quote_each_recorded_cpu_run():
    """Both tables give each class's newest run, notebook by notebook in the course's order; a run recorded
    without them being updated fails here, as a header does above."""
    readme = (ROOT / "README.md").read_text()
    guide = (ROOT / "docs" / "instructor.md").read_text()
    header, _, *rows = [line for line in guide.split("## At a glance", 1)[1].splitlines() if line.startswith("|")]
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    guide_rows = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    order = [path.name for path in course_notebooks()]
    words = {"avx512-bf16": "AVX-512 BF16", "amx-bf16": "AVX-512 and AMX", "avx2-emulated": "AVX2 only",
             "avx512": "AVX-512 without BF16"}
    readme_rows = _readme_timing_rows(readme)
    readme_words = {"avx512-bf16": "AVX-512 with BF16", "amx-bf16": "AVX-512 and AMX", "avx2-emulated": "AVX2 only",
                    "avx512": "AVX-512 without BF16"}  # how each class's row of README.md's table opens
    assert len(readme_rows) == len(course_timings.cpu_runs()), "README.md's table: one row per recorded CPU class"
    for run in course_timings.cpu_runs():
        seconds = [round(run["notebooks"][name]) for name in order]
        kind = course_timings.cpu_class(run["cpu"])
        (row,) = [row for row in readme_rows if row["class"].startswith(readme_words[kind])]
        assert row["notebooks"] == seconds, f"README.md's row for {kind} says {row['notebooks']}, the run {seconds}"
        # `make course`'s own wall time: the notebooks' sum and make's few seconds (the guide's total names it too)
        total = round(sum(run["notebooks"].values()))
        assert total <= row["make course"] <= total + 30, f"README.md's total for {kind}: {row['make course']} s"
        column = next(index for index, name in enumerate(columns) if words[kind] in name)
        stated = [row[column] for row in guide_rows[:len(order)]]
        assert [cell.split(" s", 1)[0] for cell in stated] == [str(s) for s in seconds], (
            f"docs/instructor.md's column for {kind} says {stated}, the recorded run {seconds}")
        assert guide_rows[len(order)][column].startswith(f"**{round(sum(run['notebooks'].values())):,} s**")
        assert _minutes_and_seconds(guide_rows[len(order)][column]) == row["make course"]  # the same wall time
    gpu = json.loads((course_timings.GPU_EXECUTED / "timings.json").read_text())
    on_gpu = [gpu.get(name, gpu.get(f"{name} (smollm2)")) for name in order]
    column = next(index for index, name in enumerate(columns) if "GPU" in name)
    stated = [row[column].split(" s", 1)[0] for row in guide_rows[:len(order)]]
    assert stated == [str(round(s)) for s in on_gpu], f"the guide's GPU column says {stated}, timings.json {on_gpu}"
    assert guide_rows[len(order)][column].startswith(f"{round(sum(on_gpu)):,} s")


def _minutes_and_seconds(text: str) -> int:
    """The first "13 min 20 s" of ``text``, in seconds."""
    minutes, seconds = re.search(r"(\d+) min (\d+) s", text).groups()
    return int(minutes) * 60 + int(seconds)


def _readme_timing_rows(readme: str) -> list[dict]:
    """README.md's table of CPU runs, row by row: the class, `make course`'s time in seconds, the notebooks' seconds
    in the header's order (checked to be the course's)."""
    lines = readme.split("| CPU class", 1)[1].split("\n\n", 1)[0].splitlines()
    header = [cell.strip() for cell in ("| CPU class" + lines[0]).strip("|").split("|")]
    assert header[1].startswith("`make course`") and header[2] == (
        "its notebooks, s: 01, 02, 03, 04, lab 1, 05, lab 2, 06"), header
    assert [path.name[:2] for path in course_notebooks()] == ["01", "02", "03", "04", "01", "05", "02", "06"]
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows.append({"class": cells[0], "make course": _minutes_and_seconds(cells[1]),
                     "notebooks": [int(n) for n in cells[2].split(", ")]})
    return rows


def _whole_run(started: str) -> dict:
    return {**run_record({path.name: 10.0 for path in course_notebooks()}), "started_utc": started}


@pytest.mark.parametrize(("run_json", "says"), [
    (None, r"does not exist\. Run `make course`"),
    ("{not json", r"is not JSON .*run `make course` again"),
    (json.dumps({"device": "cpu", "notebooks": {}}), r"lacks cpu, started_utc, failed, so it is not a run\.json"),
    (json.dumps({**run_record({}), "started_utc": "yesterday"}), r"has started_utc 'yesterday', not a date and time")])
def test_a_missing_broken_or_foreign_run_json_is_refused_saying_what_to_do(tmp_path, monkeypatch, run_json, says):
    monkeypatch.setattr(course_timings, "CPU_TIMINGS", tmp_path / "kept")
    if run_json is not None:
        (tmp_path / "run.json").write_text(run_json)
    with pytest.raises(SystemExit, match=f"^not recorded: {re.escape(str(tmp_path))}/run.json {says}"):
        course_timings.record(tmp_path)
    assert not (tmp_path / "kept").exists()


def test_an_older_run_does_not_replace_the_newer_one_kept_unless_forced(tmp_path, monkeypatch):
    monkeypatch.setattr(course_timings, "CPU_TIMINGS", tmp_path / "kept")
    newer, older = tmp_path / "newer", tmp_path / "older"
    for folder, started in ((newer, "2026-12-05T02:48:16+00:00"), (older, "2026-12-04T23:17:00+00:00")):
        folder.mkdir()
        (folder / "run.json").write_text(json.dumps(_whole_run(started)))
    kept = course_timings.record(newer)
    with pytest.raises(SystemExit, match=r"started 2026-12-04T23:17:00\+00:00, before the run kept in avx512-bf16"
                                         r"\.json \(2026-12-05T02:48:16\+00:00\).*pass --force"):
        course_timings.record(older)
    assert json.loads(kept.read_text())["started_utc"] == "2026-12-05T02:48:16+00:00"
    assert course_timings.record(newer) == kept  # the same run again is no older than itself
    course_timings.record(older, force=True)
    assert json.loads(kept.read_text())["started_utc"] == "2026-12-04T23:17:00+00:00"


def test_a_record_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    monkeypatch.setattr(course_timings, "CPU_TIMINGS", tmp_path / "kept")
    (tmp_path / "run.json").write_text(json.dumps(_whole_run("2026-12-05T02:48:16+00:00")))
    kept = course_timings.record(tmp_path)
    before = kept.read_text()
    newer = _whole_run("2026-12-06T00:00:00+00:00")
    (tmp_path / "run.json").write_text(json.dumps(newer))

    def cut_short(fd, *args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(course_timings.write_atomically.__globals__["os"], "fsync", cut_short)
    with pytest.raises(OSError, match="No space left"):
        course_timings.record(tmp_path)
    assert kept.read_text() == before
    assert [path.name for path in kept.parent.iterdir()] == [kept.name]


def _lab_2_copies(tmp_path, monkeypatch, older_model: str) -> None:
    """Lab 2's two GPU copies in a stand-in executed/ folder: ``older_model``'s ran an older cell, the other today's."""
    monkeypatch.setattr(course_timings, "CPU_TIMINGS", tmp_path / "no-cpu-runs")
    monkeypatch.setattr(course_timings, "GPU_EXECUTED", tmp_path)
    source = ROOT / "labs" / "02_serving_real_traffic.ipynb"
    current, older = json.loads(source.read_text()), json.loads(source.read_text())
    next(cell for cell in older["cells"] if cell["cell_type"] == "code" and "SETTINGS" in "".join(cell["source"]))[
        "source"] = "SETTINGS = (8, 64)  # an older version of the cell\n"
    for model in ("smollm2", "dummy-llama-3.1-8b"):
        copy = older if model == older_model else current
        (tmp_path / f"lab_02_serving_real_traffic-{model}.ipynb").write_text(json.dumps(copy))
    timings = {"02_serving_real_traffic.ipynb (smollm2)": 708.6, "02_serving_real_traffic.ipynb (dummy-llama-3.1-8b)": 568.0}
    (tmp_path / "timings.json").write_text(json.dumps(timings))
    (tmp_path / "machines.json").write_text(json.dumps({key: "1 x NVIDIA H100 80GB HBM3 (79 GiB)" for key in timings}))


def test_only_a_copy_of_older_code_is_called_an_earlier_version(tmp_path, monkeypatch):
    """A lab has a copy a model, and they catch up one at a time: the sentence asks each copy, not AWAITING.json."""
    _lab_2_copies(tmp_path, monkeypatch, older_model="dummy-llama-3.1-8b")
    assert course_timings.time_to_run("02_serving_real_traffic.ipynb") == (
        "Time to run, every cell as `make course` runs it: 11 min 49 s on an H100 (date unknown; 568 s on the 8B shape, "
        "an earlier version of its code). Reading and the exercises take longer.")


def test_an_older_copy_of_the_default_model_is_named_after_its_own_figure(tmp_path, monkeypatch):
    """The default model's copy ran older code, the other's is current: the note stands on its own after a
    semicolon, not on the other copy's figure."""
    _lab_2_copies(tmp_path, monkeypatch, older_model="smollm2")
    assert course_timings.time_to_run("02_serving_real_traffic.ipynb") == (
        "Time to run, every cell as `make course` runs it: 11 min 49 s on an H100 (date unknown; an earlier version "
        "of its code; 568 s on the 8B shape). Reading and the exercises take longer.")
