"""Many runs laid out as rows: grouped by ``max_num_seqs``, pooled, and written as a Markdown table.

Pure: nothing here measures, reads or writes files (that is :mod:`helpers.lab.results`).
A :class:`ResultRow` is one run, or the repetitions of one setting pooled, with its typed
:class:`~helpers.load.summary.RunSummary`; plots and explanations read its fields, and only
:func:`format_table` turns rows into text by column name. Taught in ``labs/01_concurrency_lab.ipynb``.

Example::

    >>> from helpers.load.client import RequestRecord
    >>> from helpers.load.summary import summarize
    >>> record = RequestRecord(0, ok=True, output_tokens=64, send_s=0.0, ttft_s=1.0, e2e_s=2.0, done_s=2.0)
    >>> row = ResultRow(8, "1 run", summarize([record]))
    >>> row.summary.output_tok_per_s
    32.0
    >>> print(format_table([row], ("max_num_seqs", "run", "output_tok_per_s", "output_tok_per_s_max")))
    | max_num_seqs | run | output_tok_per_s | output_tok_per_s_max |
    |---|---|---|---|
    | 8 | 1 run | 32 | 32 |
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers.load.summary import RunSummary, pool_summaries

TABLE_COLUMNS = ("max_num_seqs", "run", "wall_s", "output_tok_per_s", "e2e_p50_s", "e2e_p95_s",
                 "ttft_p50_s", "ttft_p95_s", "tpot_mean_ms", "peak_generating", "num_errors")
RANGE_SUFFIXES = ("_min", "_max")  # a column "<number>_min" / "_max": the range of a pooled number


@dataclass(frozen=True)
class ResultRow:
    """One row of a results table: a run, or the runs of one ``max_num_seqs`` pooled."""

    max_num_seqs: int | None
    run: str  # the run's tag, or "2 runs" for a pooled row; a table's "run" column
    summary: RunSummary

    def value(self, column: str) -> Any:
        """The number (or text) under ``column`` in a table: a field of the row or of its summary,
        or ``<number>_min`` / ``<number>_max`` for the range of a pooled number (the number itself
        for a single run)."""
        if column in ("max_num_seqs", "run"):
            return getattr(self, column)
        for index, suffix in enumerate(RANGE_SUFFIXES):
            if column.endswith(suffix):
                name = column[: -len(suffix)]
                spread = self.summary.range_of(name)
                return spread[index] if spread is not None else getattr(self.summary, name)
        return getattr(self.summary, column)


def group_by_setting(runs: Sequence[Any]) -> dict[int | None, list[Any]]:
    """Runs keyed by the server's ``max_num_seqs``, in increasing order (unknown last)."""
    groups: dict[int | None, list[Any]] = {}
    for run in runs:
        groups.setdefault(run.max_num_seqs, []).append(run)
    return dict(sorted(groups.items(), key=lambda item: (item[0] is None, item[0] or 0)))


def runs_table(runs: Sequence[Any], pooled: bool = False) -> list[ResultRow]:
    """One row per run (``pooled=False``, ``run`` = its tag) or per ``max_num_seqs`` (the mean of
    its repetitions, with their range: :func:`helpers.load.summary.pool_summaries`)."""
    rows = []
    for seqs, group in group_by_setting(runs).items():
        if pooled:
            label = f"{len(group)} run{'s' * (len(group) != 1)}"
            rows.append(ResultRow(seqs, label, pool_summaries([run.summary for run in group])))
        else:
            rows += [ResultRow(seqs, run.settings.get("run_tag", ""), run.summary) for run in group]
    return rows


def format_table(rows: Sequence[ResultRow], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """A Markdown table of the given columns (see :meth:`ResultRow.value`); numbers to 3 significant digits."""
    return markdown_table(columns, [[row.value(column) for column in columns] for row in rows])


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table of plain values; None and NaN show as "-".

    >>> print(markdown_table(["tool", "tok/s"], [["ours", 101.234], ["theirs", None]]))
    | tool | tok/s |
    |---|---|
    | ours | 101 |
    | theirs | - |
    """
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def random_weights_note(runs: Sequence[Any]) -> str | None:
    """A warning for runs served with random weights (``model_source`` "dummy"), else None.

    >>> random_weights_note([]) is None
    True
    """
    models = sorted({str(run.server.model) for run in runs if run.server.model_source == "dummy"})
    if not models:
        return None
    return (f"{', '.join(models)}: random weights in a real architecture. Speeds and memory are the real "
            "model's; its text is meaningless, so every request has a fixed output length.")


def _cell(value: Any) -> str:
    """One table cell: integers as they are, floats to 3 significant digits (whole above 100).

    >>> _cell(None), _cell(8), _cell(1234.5), _cell(0.04567), _cell(float("nan"))
    ('-', '8', '1,234', '0.0457', '-')
    """
    if value is None:
        return "-"
    if isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)
