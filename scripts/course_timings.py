"""How long each notebook takes to run, on each class of machine the course has been timed on, from results files.

    .venv/bin/python scripts/course_timings.py record [--from build/executed] [--force]   # after `make course` on a CPU
    .venv/bin/python scripts/course_timings.py show           # every notebook's line, as its header has it

``record`` keeps the ``run.json`` that ``scripts/run_course.py`` wrote (every notebook done, none failed) as
``results/cpu/course_timings/<class>.json``, the newest run of that class of CPU replacing the one before (the
earlier ones are listed in that folder's README; one that started before the kept run is refused unless ``--force``).
:func:`time_to_run` turns those files and the GPU's
(``results/gpu/executed/timings.json``, dated by the executed copies beside it, each copy's GPU in
``machines.json``) into the sentence that opens each notebook's first cell, which ``scripts/notebook_header.py``
writes and ``tests/test_course_timings.py`` holds to the files: a notebook never states a time that no results file
backs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # a sibling script, importable however this one is run
sys.path.insert(0, str(ROOT))  # the course's helpers, when run as `python scripts/course_timings.py`
from import_gpu_runs import DEFAULT_MODEL, code_of, copy_name, source_of

from helpers.files import write_atomically

CPU_TIMINGS = ROOT / "results" / "cpu" / "course_timings"
GPU_EXECUTED = ROOT / "results" / "gpu" / "executed"
LEAD = "Time to run, every cell as `make course` runs it:"
# the classes in the order a reader compares them: the reference machine first, the other bfloat16 one, then the
# float32 ones
CLASSES = ("avx512-bf16", "amx-bf16", "avx2-emulated", "avx2", "avx512")
GPU_MODELS = {"smollm2": "", "dummy-llama-3.1-8b": "the 8B shape"}
# each class as helpers.hardware.CPUInfo.isa names it: the file its runs are kept in, and how a sentence names it
ISA_CLASSES = {"AVX-512 with AMX": ("amx-bf16", "AVX-512 and AMX"), "AVX-512 with bf16": ("avx512-bf16", "AVX-512 BF16"),
               "AVX-512": ("avx512", "AVX-512 but no BF16"), "AVX2": ("avx2", "AVX2 only")}


def cpu_class(cpu: dict) -> str:
    """The file name a CPU's runs are kept under.

    >>> cpu_class({"isa": "AVX-512 with bf16", "emulated": None}), cpu_class({"isa": "AVX2", "emulated": "avx2"})
    ('avx512-bf16', 'avx2-emulated')
    """
    name = ISA_CLASSES[cpu["isa"]][0] if cpu["isa"] in ISA_CLASSES else "other"
    return f"{name}-emulated" if cpu.get("emulated") else name


def describe_cpu(cpu: dict, day: str) -> str:
    """How a reader knows the class of their CPU, and what it serves.

    >>> describe_cpu({"model": "Intel(R) Xeon(R) Processor @ 2.80GHz", "cores": 2, "isa": "AVX-512",
    ...               "emulated": None, "dtype": "float32"}, "2026-12-04")
    'a 2-core CPU with AVX-512 but no BF16 (Intel Xeon @ 2.80GHz, float32; 2026-12-04)'
    """
    model = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b", "", cpu["model"])
    model = " ".join(model.split())
    isa = ISA_CLASSES[cpu["isa"]][1] if cpu["isa"] in ISA_CLASSES else cpu["isa"]
    where = f"{model} limited to AVX2 with `VLLM_COURSE_CPU_ISA={cpu['emulated']}`" if cpu.get("emulated") else model
    return f"a {cpu['cores']}-core CPU with {isa} ({where}, {cpu['dtype']}; {day})"


def cpu_runs() -> list[dict]:
    """The newest recorded run of each class of CPU, in :data:`CLASSES` order."""
    runs = {path.stem: json.loads(path.read_text()) for path in CPU_TIMINGS.glob("*.json")}
    return [runs[name] for name in sorted(runs, key=lambda n: CLASSES.index(n) if n in CLASSES else len(CLASSES))]


def gpu_runs() -> dict[tuple[str, str], tuple[float, Path, str]]:
    """The GPU's seconds, its executed copy and the GPU it ran on (``machines.json``), by notebook and model:
    ``("01_concurrency_lab", "smollm2")``. The device tool lends an H200 or an H100, so copies differ."""
    path = GPU_EXECUTED / "timings.json"
    if not path.exists():
        return {}
    machines_path = GPU_EXECUTED / "machines.json"
    machines = json.loads(machines_path.read_text()) if machines_path.exists() else {}
    runs = {}
    for key, seconds in json.loads(path.read_text()).items():  # "01_start_server.ipynb", "NAME.ipynb (MODEL)"
        name, model = re.fullmatch(r"(\S+)\.ipynb(?: \((\S+)\))?", key).groups()
        source = f"{'labs' if (ROOT / 'labs' / f'{name}.ipynb').exists() else 'notebooks'}/{name}.ipynb"
        copy = GPU_EXECUTED / copy_name(source, model or DEFAULT_MODEL)
        runs[(name, model or DEFAULT_MODEL)] = (seconds, copy, machines.get(key, "a GPU"))
    return runs


def gpu_named(machine: str) -> str:
    """How a sentence names the GPU of a run's machine line (``helpers.hardware.describe_machine``).

    >>> gpu_named("1 x NVIDIA H200 (140 GiB)"), gpu_named("1 x NVIDIA H100 80GB HBM3 (79 GiB)")
    ('an H200', 'an H100')
    >>> gpu_named("1 x Tesla T4 (14 GiB)"), gpu_named("1 x NVIDIA L4 (22 GiB)")
    ('a T4', 'an L4')
    """
    found = re.fullmatch(r"\d+ x (?:NVIDIA |Tesla )?(\S+).*", machine)
    if not found:
        return machine
    name = found.group(1)
    return f"{'an' if name[0].upper() in 'AEFHILMNORSX' else 'a'} {name}"  # the letter as it is read: "an H100"


def _ran_older_code(copy: Path) -> bool:
    """Whether the executed ``copy`` ran other code than its notebook has now: asked of the copy itself, since a
    lab's copies (one a model) catch up one at a time."""
    source = ROOT / source_of(copy)
    return copy.exists() and source.exists() and code_of(copy) != code_of(source)


def time_to_run(notebook: str) -> str:
    """The sentence for ``notebook`` (``01_start_server.ipynb``): each CPU class, then the GPU; where a GPU copy ran
    older code than the notebook has now, it says so beside that copy's figure."""
    name = Path(notebook).stem
    parts = [f"{_seconds(run['notebooks'][notebook])} on {describe_cpu(run['cpu'], run['started_utc'][:10])}"
             for run in cpu_runs() if notebook in run["notebooks"]]
    gpu = [(model, *found) for (copy, model), found in gpu_runs().items() if copy == name]
    if gpu:
        (_, seconds, copy, machine), *others = sorted(gpu, key=lambda run: run[0] != DEFAULT_MODEL)
        older = "an earlier version of its code"
        notes = [_day_of(copy), *([older] if _ran_older_code(copy) else [])]
        notes += [f"{_seconds(more)} on {GPU_MODELS.get(model, model)}"
                  + (f" on {gpu_named(on)}" if on != machine else "") + (f", {older}" if _ran_older_code(other) else "")
                  for model, more, other, on in others]
        parts.append(f"{_seconds(seconds)} on {gpu_named(machine)} ({'; '.join(notes)})")
    if not parts:
        return f"{LEAD} not timed yet."
    return f"{LEAD} " + "; ".join(parts) + ". Reading and the exercises take longer."


def record(executed: Path, force: bool = False) -> Path:
    """Keep ``executed/run.json`` under results/cpu/course_timings/, refusing a partial or failed run, and a run that
    started before the one kept for its class unless ``force``."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from run_course import course_notebooks

    run = _read_run(executed / "run.json")
    started = _started(run, executed / "run.json")
    missing = [path.name for path in course_notebooks() if path.name not in run["notebooks"]]
    model = run.get("model", DEFAULT_MODEL)  # runs from before the model was recorded served the default
    if run.get("device") != "cpu" or run["failed"] or missing or model != DEFAULT_MODEL:
        raise SystemExit(f"not recorded: a CPU run of the whole course on the default model with no failure is "
                         f"kept, and this one (device {run.get('device')}, model {model}) failed {run['failed']} and "
                         f"did not run {missing}")
    path = CPU_TIMINGS / f"{cpu_class(run['cpu'])}.json"
    kept = _kept_start(path)
    if kept is not None and started < kept and not force:
        raise SystemExit(f"not recorded: {executed / 'run.json'} started {run['started_utc']}, before the run kept in "
                         f"{path.name} ({kept.isoformat()}), which it would replace. Record the newer run, or pass "
                         "--force to replace it all the same.")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(run, indent=2) + "\n")  # a cut-short write would break every notebook's header
    return path


RUN_KEYS = ("device", "cpu", "started_utc", "notebooks", "failed")


def _read_run(path: Path) -> dict:
    """``run.json`` as ``scripts/run_course.py`` writes it, or SystemExit saying what to do."""
    if not path.is_file():
        raise SystemExit(f"not recorded: {path} does not exist. Run `make course` (it writes build/executed/run.json) "
                         "or pass --from the folder that holds a run.json.")
    try:
        run = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SystemExit(f"not recorded: {path} is not JSON ({error}); run `make course` again to write it.") from None
    lacking = [key for key in RUN_KEYS if key not in run] if isinstance(run, dict) else list(RUN_KEYS)
    if lacking:
        raise SystemExit(f"not recorded: {path} lacks {', '.join(lacking)}, so it is not a run.json that "
                         "scripts/run_course.py wrote; run `make course` again to write one.")
    return run


def _utc(text: str) -> datetime:
    """``started_utc`` as a time that compares with any other (run_course.py writes ``+00:00``; a bare one is UTC)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _started(run: dict, where: Path) -> datetime:
    try:
        return _utc(run["started_utc"])
    except (TypeError, ValueError):
        raise SystemExit(f"not recorded: {where} has started_utc {run['started_utc']!r}, not a date and time; run "
                         "`make course` again to write it.") from None


def _kept_start(path: Path) -> datetime | None:
    """When the run kept in ``path`` started; None where there is none or it cannot be read (a new run replaces it)."""
    try:
        return _utc(json.loads(path.read_text())["started_utc"])
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError):
        return None


def _seconds(seconds: float) -> str:
    """``"56 s"``, or with minutes from 10 of them: ``"12 min 50 s"``."""
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 600 else f"{seconds // 60} min {seconds % 60} s"


def _day_of(copy: Path) -> str:
    if not copy.exists():
        return "date unknown"
    for cell in json.loads(copy.read_text())["cells"]:
        began = cell.get("metadata", {}).get("execution", {}).get("iopub.execute_input")
        if began:
            return began[:10]
    return "date unknown"


def main(args: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    keep = sub.add_parser("record", help="keep build/executed/run.json under results/cpu/course_timings/")
    keep.add_argument("--from", dest="executed", type=Path, default=ROOT / "build" / "executed")
    keep.add_argument("--force", action="store_true", help="replace a run that started later than this one")
    sub.add_parser("show", help="print every notebook's sentence")
    options = parser.parse_args(args)
    if options.command == "record":
        print(f"kept {record(options.executed, options.force).relative_to(ROOT)}")
    else:
        sys.path.insert(0, str(ROOT / "scripts"))
        from notebook_header import notebooks

        for path in notebooks():
            print(f"{path.relative_to(ROOT)}: {time_to_run(path.name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
