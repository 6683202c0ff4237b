"""Saving load-test runs as JSON, loading them back, and laying many out as one table.

One file per run holds everything needed to recompute any metric later, on any machine:
the raw per-request records, the workload and client settings, the server (model, vLLM
version, ``max_num_seqs``, device, KV-cache report), the hardware and the start time.
Runs go to ``build/lab/`` by default (git-ignored); reference results that the course
commits live in ``results/<device>/``.

Taught in ``labs/01_concurrency_lab.ipynb``.

Example::

    >>> path = save_run(run)                                   # doctest: +SKIP
    >>> runs = load_runs(path.parent)                          # doctest: +SKIP
    >>> print(format_table(runs_table(runs)))                  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from helpers.errors import ResultsFileError
from helpers.files import read_json, write_atomically
from helpers.load.run import LoadTestRun
from helpers.load.client import RequestRecord
from helpers.load.summary import pool_summaries, summarize
from helpers.paths import COURSE_ROOT, build_dir

FORMAT = "vllm-course/loadtest-run/1"  # bump when the file layout changes
REFERENCE_DIR = COURSE_ROOT / "results"  # committed reference results: results/cpu/, results/gpu/


def run_to_dict(run: LoadTestRun) -> dict[str, Any]:
    """The JSON-ready form of a run; times rounded to 10 microseconds to keep files small."""
    return {
        "format": FORMAT,
        "label": run.label,
        "started_at": run.started_at,
        "wall_s": run.wall_s,
        "hardware": run.hardware,
        "server": run.server,
        "settings": run.settings,
        "summary": summarize(run.records),  # for people reading the file; recomputed on load
        "records": [_rounded(r.to_dict()) for r in run.records],
    }


def run_from_dict(data: dict[str, Any]) -> LoadTestRun:
    if data.get("format") != FORMAT:
        raise ValueError(f"not a load-test run file (format {data.get('format')!r}, expected {FORMAT!r})")
    return LoadTestRun(
        label=data["label"], settings=data["settings"], server=data["server"], hardware=data["hardware"],
        started_at=data["started_at"], wall_s=data["wall_s"],
        records=[RequestRecord.from_dict(r) for r in data["records"]],
    )


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
    assert head.endswith("\n}")
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
    return [run for run in runs if model is None or run.server.get("model") == model]


def random_weights_note(runs: Sequence[LoadTestRun]) -> str | None:
    """A warning for runs served with random weights (``dummy:...``), else None.

    >>> random_weights_note([])
    """
    models = sorted({run.server.get("model") for run in runs if run.server.get("model_source") == "dummy"})
    if not models:
        return None
    return (f"{', '.join(map(str, models))}: random weights in a real architecture. Speeds and memory are the real "
            "model's; its text is meaningless, so every request has a fixed output length.")


def group_by_setting(runs: Sequence[LoadTestRun]) -> dict[int | None, list[LoadTestRun]]:
    """Runs keyed by the server's ``max_num_seqs``, in increasing order."""
    groups: dict[int | None, list[LoadTestRun]] = {}
    for run in runs:
        groups.setdefault(run.max_num_seqs, []).append(run)
    return dict(sorted(groups.items(), key=lambda item: (item[0] is None, item[0] or 0)))


TABLE_COLUMNS = ("max_num_seqs", "run", "wall_s", "output_tok_per_s", "e2e_p50_s", "e2e_p95_s",
                 "ttft_p50_s", "ttft_p95_s", "tpot_mean_ms", "peak_generating", "num_errors")


def runs_table(runs: Sequence[LoadTestRun], pooled: bool = False) -> list[dict[str, Any]]:
    """One row per run (``pooled=False``) or per ``max_num_seqs`` (mean of its repetitions,
    with ``output_tok_per_s_min`` / ``_max``), each row a flat dict of the summary's numbers."""
    rows = []
    for seqs, group in group_by_setting(runs).items():
        summaries = [run.summary() for run in group]
        if pooled:
            label = f"{len(group)} run{'s' * (len(group) != 1)}"
            rows.append({"max_num_seqs": seqs, "run": label, **pool_summaries(summaries)})
        else:
            rows += [{"max_num_seqs": seqs, "run": run.settings.get("run_tag", ""), **summary}
                     for run, summary in zip(group, summaries)]
    return rows


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """A Markdown table of the given columns; numbers to 3 significant digits.

    >>> print(format_table([{"max_num_seqs": 8, "output_tok_per_s": 101.234}], ["max_num_seqs", "output_tok_per_s"]))
    | max_num_seqs | output_tok_per_s |
    |---|---|
    | 8 | 101 |
    """
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(column)) for column in columns) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def _rounded(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for key in ("send_s", "ttft_s", "e2e_s", "done_s"):
        if isinstance(out.get(key), float):
            out[key] = round(out[key], 5)
    out["itl_s"] = [round(gap, 5) for gap in out.get("itl_s") or []]
    return out
