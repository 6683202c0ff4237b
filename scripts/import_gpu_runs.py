"""Keep executed GPU notebooks as the reference copies in results/gpu/executed/, from what each copy says of itself.

    python scripts/import_gpu_runs.py /work/.device/17/build/gpu                 # every executed notebook below it
    python scripts/import_gpu_runs.py build/gpu/smollm2/01_concurrency_lab.ipynb  # or named ones

``scripts/run_course.py`` stamps each executed copy with the notebook it ran, its seconds, the machine and the model
served (``metadata.course_run``). From that stamp a copy goes in under the name its notebook and model give it
(``04_continuous_batching-dummy-llama-3.1-8b.ipynb``, ``lab_01_concurrency_lab-smollm2.ipynb``), its seconds into
``timings.json`` and its machine into ``machines.json``, and ``AWAITING.json`` loses a notebook whose every copy
now ran its code. By hand these were four files to keep in step, and a run whose timing another run in the same
folder had overwritten was once entered from the log's whole seconds.

Nothing is written when any copy is refused: one without the stamp (run before the stamp existed), not run on a GPU,
with a cell that raised or never ran, of the learner's version of a lab (the references are the instructor's), or
whose code differs from its notebook's now (rerun it). Afterwards: ``python scripts/notebook_header.py``, and the
rows this prints go into results/gpu/README.md's time table (``tests/test_gpu_executed.py`` compares them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXECUTED = ROOT / "results" / "gpu" / "executed"
DEFAULT_MODEL = "smollm2"  # the embedded model: its copies of notebooks/ keep the plain name


@dataclass(frozen=True)
class GpuCopy:
    path: Path  # the executed notebook as it came off the machine
    source: str  # the notebook it ran, relative to the checkout: "labs/01_concurrency_lab.ipynb"
    model: str
    seconds: float
    machine: str  # helpers.hardware.describe_machine's line: "1 x NVIDIA H100 80GB HBM3 (79 GiB)"

    @property
    def name(self) -> str:
        return copy_name(self.source, self.model)

    @property
    def key(self) -> str:
        """How timings.json and machines.json name the run: "04_continuous_batching.ipynb (dummy-llama-3.1-8b)"."""
        plain = Path(self.source).name
        return plain if self.source.startswith("notebooks/") and self.model == DEFAULT_MODEL else f"{plain} ({self.model})"


def copy_name(source: str, model: str) -> str:
    """The file name in results/gpu/executed/ of a run of ``source`` ("labs/01_concurrency_lab.ipynb") on ``model``;
    :func:`source_of` reads it back."""
    stem = Path(source).stem
    if source.startswith("labs/"):
        return f"lab_{stem}-{model}.ipynb"
    return f"{stem}.ipynb" if model == DEFAULT_MODEL else f"{stem}-{model}.ipynb"


CHECK_MARKER = "# NBVAL_CHECK_OUTPUT\n"  # nbval's annotation, not code: a cell runs the same with or without it
# The Colab setup cell (helpers/colab.py, written into every notebook by scripts/notebook_header.py) does nothing
# off Colab, so a change to it leaves what a GPU copy ran unchanged; tests/test_notebook_shape.py checks it instead.
COLAB_ONLY = "# Colab only:"


def code_of(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(cell["source"]).removeprefix(CHECK_MARKER) for cell in cells if cell["cell_type"] == "code"]
    return [text for text in code if not text.startswith(COLAB_ONLY)]


def read_copy(path: Path) -> GpuCopy:
    """The stamped copy at ``path``; SystemExit with what to do where it cannot be a reference copy."""
    notebook = json.loads(path.read_text())
    stamp = notebook.get("metadata", {}).get("course_run")
    if not stamp:
        raise SystemExit(f"{path}: no course_run stamp in its metadata (run with scripts/run_course.py before the stamp "
                         "existed, or by another tool): run it again with scripts/run_course.py; nothing was imported")
    source = stamp["notebook"]
    problem = None
    if stamp.get("device") != "cuda":
        problem = f"ran on {stamp.get('device')}, not a GPU"
    elif source.startswith("labs/learner/") or not (source.startswith(("notebooks/", "labs/"))
                                                    and (ROOT / source).is_file()):
        problem = f"ran {source}, which is not a notebook or an instructor's lab of this course"
    elif code_of(path) != code_of(ROOT / source):
        problem = f"ran other code than {source} has now: rerun it on a GPU"
    else:
        for index, cell in enumerate(cell for cell in notebook["cells"] if cell["cell_type"] == "code"):
            raised = [out for out in cell.get("outputs", []) if out["output_type"] == "error"]
            if raised or (cell.get("execution_count") is None and "".join(cell["source"]).strip()):
                problem = f"code cell {index} " + (f"raised {raised[0].get('ename')}" if raised else "never ran")
                break
    if problem:
        raise SystemExit(f"{path}: {problem}; nothing was imported")
    return GpuCopy(path, source, stamp["model"], stamp["seconds"], stamp["machine"])


def executed_notebooks(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        found += sorted(path.rglob("*.ipynb")) if path.is_dir() else [path]
    return [path for path in found if ".ipynb_checkpoints" not in path.parts]


def import_copies(copies: list[GpuCopy], executed: Path | None = None) -> list[str]:
    """Copy each into ``executed`` (results/gpu/executed/) and update its three JSON files; the AWAITING.json
    entries dropped."""
    executed = executed or EXECUTED
    names = [copy.name for copy in copies]
    if len(set(names)) < len(names):
        raise SystemExit(f"two runs of the same notebook on the same model among {names}: name one of them")
    files = {name: executed / f"{name}.json" for name in ("timings", "machines", "AWAITING")}
    timings, machines, awaiting = (json.loads(path.read_text()) if path.exists() else {} for path in files.values())
    for copy in copies:
        shutil.copyfile(copy.path, executed / copy.name)
        timings[copy.key], machines[copy.key] = copy.seconds, copy.machine
    caught_up = []
    for source in awaiting:  # a notebook may await its first copy: none yet is not caught up
        kept = [path for path in executed.glob("*.ipynb") if source_of(path) == source]
        if kept and all(code_of(path) == code_of(ROOT / source) for path in kept):
            caught_up.append(source)
    for source in caught_up:
        del awaiting[source]
    for name, data in (("timings", timings), ("machines", machines)):
        files[name].write_text(json.dumps(data, indent=2) + "\n")
    if awaiting:
        files["AWAITING"].write_text(json.dumps(awaiting, indent=2) + "\n")
    else:
        files["AWAITING"].unlink(missing_ok=True)
    return caught_up


def source_of(copy: Path) -> str:
    """The notebook a copy in results/gpu/executed/ ran, by its name: notebooks/NN_name.ipynb for NN_name.ipynb or
    NN_name-MODEL.ipynb, labs/NAME.ipynb for lab_NAME-MODEL.ipynb."""
    if copy.name.startswith("lab_"):
        return "labs/" + copy.name[len("lab_"):].split("-", 1)[0] + ".ipynb"
    return "notebooks/" + copy.stem.split("-", 1)[0] + ".ipynb"


def main(args: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="executed notebooks, or folders holding them")
    options = parser.parse_args(args)
    absent = [str(path) for path in options.paths if not path.exists()]
    if absent:
        parser.error(f"no such file or folder: {', '.join(absent)} (give the executed notebooks, or the folder a "
                     "device run's gpu.tgz unpacked to, e.g. build/gpu)")
    found = executed_notebooks(options.paths)
    if not found:
        parser.error(f"no executed notebook in {[str(path) for path in options.paths]}")
    copies = [read_copy(path) for path in found]  # every one checked before anything is written
    caught_up = import_copies(copies)
    for copy in copies:
        print(f"kept {copy.name}: {copy.seconds} s on {copy.machine}")
    if caught_up:
        print(f"out of AWAITING.json: {', '.join(caught_up)}")
    print("\nNow: python scripts/notebook_header.py, and these rows in results/gpu/README.md's time table "
          "(the last column is yours to write):")
    for copy in copies:
        print(f"| {copy.key} | {copy.seconds} | {copy.machine} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
