"""Saving load-test runs as JSON, loading them back, and laying many out as one table.

One file per run holds everything needed to recompute any metric later, on any machine:
the raw per-request records, the workload and client settings, the server (model, vLLM
version, ``max_num_seqs``, device, KV-cache report), the hardware and the start time.
Runs go to ``build/lab/`` by default (git-ignored); reference results that the course
commits live in ``results/<device>/``. Files written before runs recorded ``cpu_cores`` get it
from their hardware line, here, once; tables of many runs are :mod:`helpers.lab.table`.

Load tests a sweep planned and could not run (its server died, or would not start) are saved
too, as :class:`NotRunPoint` entries in one ``<start>-not-run.json`` file per sweep
(:func:`save_not_run`, :func:`load_not_run`); :func:`load_runs` skips that file.

Taught in ``labs/01_concurrency_lab.ipynb``.

Example::

    >>> path = save_run(run)                                   # doctest: +SKIP
    >>> runs = load_runs(path.parent)                          # doctest: +SKIP
    >>> runs[0].summary.output_tok_per_s                       # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from helpers.errors import ResultsFileError
from helpers.files import read_json, write_atomically
from helpers.load.client import RequestRecord
from helpers.load.run import LoadTestRun, ServerFacts
from helpers.paths import COURSE_ROOT, build_dir

FORMAT = "vllm-course/loadtest-run/1"  # bump when the file layout changes
NOT_RUN_FORMAT = "vllm-course/sweep-not-run/1"
REFERENCE_DIR = COURSE_ROOT / "results"  # committed reference results: results/cpu/, results/gpu/


def run_to_dict(run: LoadTestRun) -> dict[str, Any]:
    """The JSON-ready form of a run; times rounded to 10 microseconds to keep files small."""
    return {
        "format": FORMAT,
        "label": run.label,
        "started_at": run.started_at,
        "wall_s": run.wall_s,
        "hardware": run.hardware,
        "cpu_cores": run.cpu_cores,
        "server": run.server.to_dict(),
        "settings": run.settings,
        "summary": run.summary.to_dict(),  # for people reading the file; recomputed on load
        "records": [_rounded(r.to_dict()) for r in run.records],
    }


def run_from_dict(data: dict[str, Any]) -> LoadTestRun:
    """The run a :func:`run_to_dict` dict describes; files older than ``cpu_cores`` get it from
    their hardware line."""
    if data.get("format") != FORMAT:
        raise ValueError(f"not a load-test run file (format {data.get('format')!r}, expected {FORMAT!r})")
    cores = data.get("cpu_cores")
    return LoadTestRun(
        label=data["label"], settings=data["settings"], server=ServerFacts.from_dict(data["server"]),
        hardware=data["hardware"], started_at=data["started_at"], wall_s=data["wall_s"],
        records=[RequestRecord.from_dict(r) for r in data["records"]],
        cpu_cores=cores if cores is not None else cores_from_hardware(data["hardware"]),
    )


def cores_from_hardware(hardware: str | None) -> int | None:
    """The core count in a CPU machine's hardware line (``describe_machine``), None on a GPU.

    >>> cores_from_hardware("CPU: 2 cores, AMD EPYC 7B13, AVX2"), cores_from_hardware("1 x NVIDIA H200 (139 GiB)")
    (2, None)
    """
    match = re.match(r"CPU: (\d+) cores", hardware or "")
    return int(match.group(1)) if match else None


def save_run(run: LoadTestRun, folder: Path | str | None = None, name: str | None = None) -> Path:
    """Write one run as JSON; return the path. Default folder: ``build/lab``; default name from
    the start time, ``max_num_seqs`` and the run tag, e.g. ``20261129T083900-seqs8-3f9a.json``.

    Written whole or not at all (:func:`helpers.files.write_atomically`): a process stopped
    while saving leaves the previous file, or none, never half a run."""
    folder = Path(folder) if folder is not None else build_dir("lab")
    folder.mkdir(parents=True, exist_ok=True)
    if name is None:
        stamp = run.started_at.replace("-", "").replace(":", "").split("+")[0]
        name = f"{stamp}-seqs{run.max_num_seqs}-{run.settings.get('run_tag', 'run')}.json"
    path = folder / name
    return write_atomically(path, _dumps(run_to_dict(run)))


def _dumps(data: dict[str, Any]) -> str:
    """Indented JSON, except one line per record, so a file stays readable and small."""
    records = data["records"]
    head = json.dumps({key: value for key, value in data.items() if key != "records"}, indent=1)
    lines = ",\n".join("  " + json.dumps(record, separators=(",", ":")) for record in records)
    return head[:-2] + ',\n "records": [\n' + lines + "\n ]\n}\n"


_REMEDY = ("Run the load test that made it again (or delete the file); the other runs in its folder are "
           "not affected.")


def load_run(path: Path | str) -> LoadTestRun:
    """One saved run. A file that is empty, cut short, damaged or not a run file raises
    :class:`~helpers.errors.ResultsFileError` (a ``ValueError``) naming it and what to do."""
    path = Path(path)
    data = read_json(path, remedy=_REMEDY)
    if not _is_run_file(data):
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ResultsFileError(f"{path} is not a load-test run file (format {found!r}, expected {FORMAT!r}). "
                               "Pass a file written by helpers.lab.results.save_run.")
    return _run_from_file_data(path, data)


def load_runs(where: Path | str | Iterable[Path | str]) -> list[LoadTestRun]:
    """Every run file in a folder (recursively), or the files given; oldest first.

    Files that are not run files (a README, a summary) are skipped. A run file that cannot be
    read (empty or cut short by a process stopped while saving it, or damaged) is skipped
    with a warning that names it, so the other runs still load. A single file given on its
    own is not skipped: it raises :class:`~helpers.errors.ResultsFileError`, as :func:`load_run`.
    """
    if isinstance(where, (str, Path)) and not Path(where).is_dir():
        data = read_json(where, remedy=_REMEDY)
        return [_run_from_file_data(Path(where), data)] if _is_run_file(data) else []
    if isinstance(where, (str, Path)):
        paths = sorted(Path(where).rglob("*.json"))
    else:
        paths = [Path(p) for p in where]
    runs = []
    for path in paths:
        try:
            data = read_json(path, remedy=_REMEDY)
            if _is_run_file(data):
                runs.append(_run_from_file_data(path, data))
        except (OSError, ResultsFileError) as error:
            warnings.warn(f"skipped an unreadable run file: {error}", stacklevel=2)
    return sorted(runs, key=lambda run: run.started_at)


def _is_run_file(data: Any) -> bool:
    return isinstance(data, dict) and data.get("format") == FORMAT


def _run_from_file_data(path: Path, data: dict[str, Any]) -> LoadTestRun:
    """run_from_dict, with a damaged file's error naming the file."""
    try:
        return run_from_dict(data)
    except KeyError as error:
        raise ResultsFileError(f"{path} is a run file without the field {error}. {_REMEDY}") from error
    except (ValueError, TypeError, AttributeError) as error:
        raise ResultsFileError(f"{path} is a damaged run file ({type(error).__name__}: {error}). {_REMEDY}") from error


def load_reference_runs(device: str, model: str | None = None) -> list[LoadTestRun]:
    """The committed reference runs for a device (``"cpu"``; ``"cuda"`` reads ``results/gpu/``),
    only those of the served model ``model`` when given; empty where there are none."""
    folder = REFERENCE_DIR / ("gpu" if device == "cuda" else device)
    runs = load_runs(folder) if folder.is_dir() else []
    return [run for run in runs if model is None or run.server.model == model]


def _rounded(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for key in ("send_s", "ttft_s", "e2e_s", "done_s"):
        if isinstance(out.get(key), float):
            out[key] = round(out[key], 5)
    out["itl_s"] = [round(gap, 5) for gap in out.get("itl_s") or []]
    return out


@dataclass(frozen=True)
class NotRunPoint:
    """One load test a sweep planned and did not run: its setting, its repetition (from 1), and why.

    >>> print(NotRunPoint(8, 2, "server died: exit code -9"))
    max_num_seqs=8, run 2: not run (server died: exit code -9)
    """

    max_num_seqs: int
    run: int
    reason: str  # e.g. "server died: exit code -9", "server did not start: port in use"

    def __str__(self) -> str:
        return f"max_num_seqs={self.max_num_seqs}, run {self.run}: not run ({self.reason})"


def save_not_run(points: Sequence[NotRunPoint], folder: Path | str, started_at: str) -> Path:
    """Write a sweep's not-run load tests to ``<folder>/<started_at>-not-run.json``, whole or not
    at all (:func:`helpers.files.write_atomically`); a later call for the same sweep replaces it.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = save_not_run([NotRunPoint(64, 1, "server did not start: port in use")], folder, "2026-11-29T08:39:00+00:00")
    >>> path.name, load_not_run(folder)
    ('20261129T083900-not-run.json', [NotRunPoint(max_num_seqs=64, run=1, reason='server did not start: port in use')])
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = started_at.replace("-", "").replace(":", "").split("+")[0]
    data = {"format": NOT_RUN_FORMAT, "started_at": started_at, "points": [asdict(point) for point in points]}
    return write_atomically(folder / f"{stamp}-not-run.json", json.dumps(data, indent=1) + "\n")


def load_not_run(folder: Path | str) -> list[NotRunPoint]:
    """Every not-run load test saved in a folder (recursively), in the order the sweeps planned them.
    A damaged file raises :class:`~helpers.errors.ResultsFileError` naming it."""
    points = []
    for path in sorted(Path(folder).rglob("*-not-run.json")):
        data = read_json(path, remedy="Delete it; the runs in its folder are not affected.")
        if not (isinstance(data, dict) and data.get("format") == NOT_RUN_FORMAT):
            continue
        try:
            points += [NotRunPoint(int(p["max_num_seqs"]), int(p["run"]), str(p["reason"])) for p in data["points"]]
        except (KeyError, TypeError, ValueError) as error:
            raise ResultsFileError(f"{path} is a damaged not-run file ({type(error).__name__}: {error}). "
                                   "Delete it; the runs in its folder are not affected.") from error
    return points
