"""results/gpu/executed/ holds the notebooks as they ran on the reference GPU: it must be the course as it is now.

An executed copy whose code differs from its notebook shows a learner outputs that today's code would not print,
so every change to a notebook's code asks for a new GPU run (scripts/gpu_reference_run.sh). Each copy must also
have run every code cell without an error, and printed exactly what nbval checks on CPU in the cells marked
NBVAL_CHECK_OUTPUT (those outputs do not depend on the machine).

A change made when no GPU could be had is named in ``AWAITING.json`` beside the copies: the notebook, since when,
and why no run was made. A notebook named there may have no copy, or copies of which at least one ran older code (a
lab has one a model: its SmolLM2 copy may be rerun while its 8B shape's awaits); one named there whose every copy
already matches fails, so the list empties as the runs are made. The notebook's header
(``scripts/course_timings.py``) gives a copy's GPU time with "an earlier version of its code" where that copy is older.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import import_gpu_runs  # noqa: E402  (a script, not a package)

EXECUTED = ROOT / "results" / "gpu" / "executed"
COPIES = sorted(EXECUTED.glob("*.ipynb"))
AWAITING = json.loads((EXECUTED / "AWAITING.json").read_text()) if (EXECUTED / "AWAITING.json").exists() else {}


def source_of(copy: Path) -> Path:
    """The notebook a copy ran, by the copy's name (a model other than the default, e.g. the 8B shape, is in it)."""
    return ROOT / import_gpu_runs.source_of(copy)


def code_cells(path: Path) -> list[dict]:
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def text(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "".join(source)


def shown(outputs: list[dict]) -> str:
    """What a cell printed or displayed as text, in order (streams joined, as nbval joins them)."""
    parts = []
    for output in outputs:
        if output["output_type"] == "stream":
            parts.append(text(output["text"]))
        elif "data" in output and "text/plain" in output["data"]:
            parts.append(text(output["data"]["text/plain"]))
    return "".join(parts)


def test_every_notebook_and_lab_has_an_executed_copy():
    names = {copy.name for copy in COPIES}
    missing = [path for path in sorted((ROOT / "notebooks").glob("*.ipynb")) if path.name not in names]
    missing += [path for path in sorted((ROOT / "labs").glob("*.ipynb"))
                if not any(name.startswith(f"lab_{path.stem}-") for name in names)]
    missing = [str(path.relative_to(ROOT)) for path in missing if str(path.relative_to(ROOT)) not in AWAITING]
    assert not missing, f"no executed GPU copy of {missing}: run scripts/gpu_reference_run.sh on a GPU"
    timings = json.loads((EXECUTED / "timings.json").read_text())
    assert len(timings) == len(COPIES), f"timings.json has {len(timings)} entries for {len(COPIES)} copies"
    machines = json.loads((EXECUTED / "machines.json").read_text())
    assert set(machines) == set(timings), ("machines.json names the GPU of each run timings.json times (its run.json's "
                                           f"machine): {sorted(set(machines) ^ set(timings))} differ")


@pytest.mark.parametrize("copy", COPIES, ids=lambda path: path.name)
def test_an_executed_copy_ran_the_code_its_notebook_has_now(copy: Path):
    source = source_of(copy)
    assert source.exists(), f"{copy.name}: its notebook {source.relative_to(ROOT)} is gone; remove the copy"
    ran, now = import_gpu_runs.code_of(copy), import_gpu_runs.code_of(source)
    differing = [index for index, (old, new) in enumerate(zip(ran, now)) if old != new]
    if str(source.relative_to(ROOT)) in AWAITING:
        return  # test_a_notebook_awaiting_a_run_has_an_older_copy_or_none: at least one of its copies is older
    assert len(ran) == len(now) and not differing, (
        f"{copy.name} ran other code than {source.relative_to(ROOT)} has now ({len(ran)} code cells against "
        f"{len(now)}; differing code cells: {differing[:10]}): rerun it on a GPU (scripts/gpu_reference_run.sh) "
        "and copy the executed notebook here")


@pytest.mark.parametrize("copy", COPIES, ids=lambda path: path.name)
def test_an_executed_copy_ran_every_cell_without_an_error(copy: Path):
    for index, cell in enumerate(code_cells(copy)):
        if not text(cell["source"]).strip():
            continue
        assert cell.get("execution_count") is not None, f"{copy.name}: code cell {index} never ran"
        errors = [output for output in cell["outputs"] if output["output_type"] == "error"]
        assert not errors, f"{copy.name}: code cell {index} raised {errors[0].get('ename')}: {errors[0].get('evalue')}"


def checks_output(copy: Path) -> bool:
    return any("NBVAL_CHECK_OUTPUT" in text(cell["source"]) for cell in code_cells(source_of(copy)))


@pytest.mark.parametrize("copy", [copy for copy in COPIES if checks_output(copy)], ids=lambda path: path.name)
def test_an_executed_copy_printed_what_nbval_checks(copy: Path):
    """Only the copies whose notebook marks a cell NBVAL_CHECK_OUTPUT (03 and 04 today): the others have no output
    that is the same on every machine, and a case for them would pass without comparing anything."""
    checked = 0
    for index, (ran, committed) in enumerate(zip(code_cells(copy), code_cells(source_of(copy)))):
        if "NBVAL_CHECK_OUTPUT" not in text(committed["source"]):
            continue
        checked += 1
        assert shown(ran["outputs"]) == shown(committed["outputs"]), (
            f"{copy.name}: code cell {index} (NBVAL_CHECK_OUTPUT) printed other text on the GPU than its notebook shows")
    if not copy.name.startswith("lab_"):
        marked = sum("NBVAL_CHECK_OUTPUT" in text(cell["source"]) for cell in code_cells(source_of(copy)))
        assert checked == marked


@pytest.mark.parametrize("name", sorted(AWAITING))
def test_a_notebook_awaiting_a_run_has_an_older_copy_or_none(name: str):
    now = import_gpu_runs.code_of(ROOT / name)
    copies = [copy for copy in COPIES if source_of(copy) == ROOT / name]
    assert not copies or any(import_gpu_runs.code_of(copy) != now for copy in copies), (
        f"every copy of {name} ran the code it has now: take it out of AWAITING.json")


def test_every_notebook_awaiting_a_gpu_run_exists_and_says_why():
    for name, entry in AWAITING.items():
        assert (ROOT / name).is_file(), f"AWAITING.json names {name}, which is not in the course"
        assert {"since", "why"} <= set(entry), f"AWAITING.json: {name} needs 'since' (a date) and 'why'"


def test_the_readmes_time_table_is_timings_json():
    """results/gpu/README.md's table of time per notebook quotes timings.json and machines.json, row for row (it
    once kept four figures of a morning run after the evening's had replaced them)."""
    readme = (EXECUTED.parent / "README.md").read_text()
    section = readme.split("## Time per notebook on the GPU", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[1].replace(".", "", 1).isdigit():
            rows[cells[0]] = (float(cells[1]), cells[2])
    timings = json.loads((EXECUTED / "timings.json").read_text())
    machines = json.loads((EXECUTED / "machines.json").read_text())
    expected = {key: (seconds, machines.get(key)) for key, seconds in timings.items()}
    assert rows == expected, ("results/gpu/README.md's time table differs from executed/timings.json and "
                              f"machines.json: README {rows}, the files {expected}")
