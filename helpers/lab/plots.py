"""The lab's figures, drawn from saved runs: latency CDFs, throughput bars, a per-request
timeline, and the max_num_seqs sweep.

Each function takes runs (``helpers.load.run.LoadTestRun``) or table rows
(:class:`helpers.lab.table.ResultRow`, from ``runs_table``), returns a matplotlib Figure, and
states the finding in its title, computed from the data (so a title never claims what the data
do not show).
Nothing here measures or saves; nothing here decides what a finding means beyond
describing it (that is ``helpers.lab.explain``).

Taught in ``labs/01_concurrency_lab.ipynb``.

Example::

    >>> fig = plot_throughput({8: runs_at_8, 64: runs_at_64})     # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from helpers.drawing import ERROR_COLOR, GENERATE_COLOR, WAIT_COLOR, setting_colors
from helpers.lab.table import ResultRow, random_weights_note
from helpers.load.summary import RunSummary, describe_failures, percentile


def _mark_random_weights(fig: plt.Figure, runs: Sequence[Any]) -> None:
    """Lay the figure out, with a red footnote when the runs were served with random weights."""
    note = random_weights_note(runs)
    if note is None:
        fig.tight_layout()
        return
    fig.text(0.5, 0.005, note, ha="center", va="bottom", fontsize=8, color=ERROR_COLOR, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))



def _failures_note(runs: Sequence[Any]) -> str | None:
    """Failed requests of all these runs, in words ("2 of 100 requests failed: ..."), or None."""
    return describe_failures([r for run in runs for r in run.records])


def _ok_values(runs: Sequence[Any], attribute: str) -> list[float]:
    return [getattr(r, attribute) for run in runs for r in run.records if r.ok and getattr(r, attribute) is not None]


def plot_latency_cdf(groups: dict[int, Sequence[Any]]) -> plt.Figure:
    """Cumulative distributions of end-to-end latency and TTFT, one line per max_num_seqs
    (all repetitions pooled), with the p50 and p95 marked."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colors = setting_colors(list(groups))
    p95 = {}
    for seqs, runs in groups.items():
        for ax, attribute in zip(axes, ("e2e_s", "ttft_s")):
            values = np.sort(_ok_values(runs, attribute))
            if not len(values):
                continue
            fraction = np.arange(1, len(values) + 1) / len(values)
            ax.step(values, fraction, where="post", color=colors[seqs], lw=2,
                    label=f"max_num_seqs={seqs} ({len(values)} requests)")
            for q, style in ((50, ":"), (95, "--")):
                ax.axvline(percentile(values, q), color=colors[seqs], ls=style, lw=1)
            p95[(seqs, attribute)] = percentile(values, 95)
    for ax, what in zip(axes, ("end-to-end latency (send -> last token)", "time to first token")):
        ax.set_xlabel(f"{what}, s")
        ax.grid(alpha=0.3)
        ax.set_xlim(left=0)
    axes[0].set_ylabel("fraction of requests at or below x")  # the y axis is shared: latency or TTFT
    axes[0].legend(loc="lower right", fontsize=8, title="dotted p50, dashed p95", title_fontsize=8)
    axes[0].set_title("End-to-end latency")
    axes[1].set_title("Time to first token")
    settings = list(groups)
    if len(settings) >= 2 and all((s, "e2e_s") in p95 for s in settings[:1] + settings[-1:]):
        a, b = settings[0], settings[-1]
        fig.suptitle(f"All runs' requests together: p95 latency {p95[(a, 'e2e_s')]:.1f} s at max_num_seqs={a} vs "
                     f"{p95[(b, 'e2e_s')]:.1f} s at {b}; p95 TTFT {p95[(a, 'ttft_s')]:.1f} s vs {p95[(b, 'ttft_s')]:.1f} s")
    _mark_random_weights(fig, [run for runs in groups.values() for run in runs])
    return fig


def plot_throughput(groups: dict[int, Sequence[Any]], reference: dict[int, Sequence[Any]] | None = None) -> plt.Figure:
    """Output tokens/s per setting: bar = mean of the repetitions, whisker = their range, dots = each run.
    ``reference``: other runs (e.g. the committed reference results), drawn as hollow bars beside.

    Failed requests add no tokens; the title says how many there were and why, and a
    setting with no successful request at all is named instead of divided by. The ideal
    ratio counts only the slots the runs' requests can fill: 64 slots serve 50 requests
    as 50 do.
    """
    fig, ax = plt.subplots(figsize=(7, 4))
    settings = list(groups)
    x = np.arange(len(settings))
    width = 0.38 if reference else 0.6
    means = {}
    for offset, source, name, filled in ((0.0, groups, "this run", True), (width, reference or {}, "reference", False)):
        for i, seqs in enumerate(settings):
            values = [run.summary.output_tok_per_s or 0.0 for run in source.get(seqs, [])]
            if not values:
                continue
            mean = float(np.mean(values))
            if filled:
                means[seqs] = mean
            ax.bar(x[i] + offset, mean, width, color=GENERATE_COLOR if filled else "none",
                   edgecolor=GENERATE_COLOR, hatch=None if filled else "//",
                   label=name if i == 0 else None)
            ax.errorbar(x[i] + offset, mean, yerr=[[mean - min(values)], [max(values) - mean]],
                        color="black", capsize=5, lw=1)
            ax.scatter([x[i] + offset] * len(values), values, color="black", s=12, zorder=3)
            ax.annotate(f"{mean:.0f}", (x[i] + offset, 0), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=9, color="white" if filled else GENERATE_COLOR)
    ax.set_xticks(x + (width / 2 if reference else 0), [f"max_num_seqs={s}" for s in settings])
    ax.set_ylabel("output throughput, tokens/s")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    title = ""
    if len(means) >= 2 and settings[0] in means and settings[-1] in means:
        a, b = settings[0], settings[-1]
        sent = max((run.summary.num_requests for runs in groups.values() for run in runs), default=0)
        ideal = min(b, sent) / min(a, sent) if sent else b / a
        if means[a] > 0:
            title = (f"max_num_seqs={b} gave {means[b] / means[a]:.2f}x the throughput of {a} "
                     f"(ideal: {ideal:.3g}x)\nbars: mean of the runs, whiskers: their range")
        else:
            title = f"No request succeeded at max_num_seqs={a}: nothing to compare {b} with"
    failures = _failures_note([run for runs in groups.values() for run in runs])
    if failures:
        title += ("\n" if title else "") + _short(failures)
    if title:
        ax.set_title(title, fontsize=10 if failures else None)
    _mark_random_weights(fig, [run for runs in groups.values() for run in runs])
    return fig


def plot_timeline(runs: dict[int, Any]) -> plt.Figure:
    """One run per setting: each request a row, sorted by send time (then first token); orange
    from send to first token (waiting for a slot, then prefill), blue while generating."""
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 5), sharex=True, squeeze=False)
    waits = {}
    for ax, (seqs, run) in zip(axes[0], runs.items()):
        ordered = sorted(run.records, key=lambda r: (round(r.send_s, 3), r.ttft_s if r.ttft_s is not None else 1e9))
        for row, r in enumerate(ordered):
            if r.ttft_s is not None:
                ax.barh(row, r.ttft_s, left=r.send_s, color=WAIT_COLOR, height=0.85)
            if r.ttft_s is not None and r.e2e_s is not None:
                ax.barh(row, r.e2e_s - r.ttft_s, left=r.send_s + r.ttft_s, color=GENERATE_COLOR, height=0.85)
            if not r.ok:
                ax.plot((r.done_s or r.send_s), row, "x", color=ERROR_COLOR)
        waits[seqs] = max((r.ttft_s for r in run.records if r.ok and r.ttft_s is not None), default=None)
        summary = run.summary
        failed = f"; {summary.num_errors} of {summary.num_requests} failed (x)" if summary.num_errors else ""
        ax.set_title(f"max_num_seqs={seqs}: at most {summary.peak_generating} generating at once{failed}", fontsize=10)
        ax.set_xlabel("time since the run started, s")
        ax.set_ylabel("request (sorted by send, then first token)")
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=WAIT_COLOR), plt.Rectangle((0, 0), 1, 1, color=GENERATE_COLOR)]
    # Below the panels, under the time axis: inside, it covered the bars of the first requests.
    axes[0][0].legend(handles, ["waiting for a slot + prefill (TTFT)", "generating"], loc="upper left",
                      bbox_to_anchor=(0.0, -0.15), ncols=2, fontsize=8, frameon=False)
    axes[0][0].set_xlim(left=0)
    settings = list(runs)
    if len(settings) >= 2 and None not in (waits[settings[0]], waits[settings[-1]]):
        a, b = settings[0], settings[-1]
        fig.suptitle(f"The longest wait for a first token: {waits[a]:.1f} s at max_num_seqs={a}, {waits[b]:.1f} s at {b}")
    _mark_random_weights(fig, list(runs.values()))
    return fig


def plot_sweep(rows: Sequence[ResultRow], own: Sequence[ResultRow] = (),
               prediction: dict[str, Any] | None = None, num_requests: int | None = None,
               source: str = "reference sweep") -> plt.Figure:
    """Throughput and p95 latency against max_num_seqs (pooled rows of ``runs_table``), with ideal
    linear scaling from the smallest setting, the prediction overlaid and the learner's own points.

    A number no request measured (a setting whose requests all failed: None in its summary, or
    0 tok/s, which a log axis cannot show) is left out of lines and titles, and the rows'
    failed requests are counted in the title.
    """
    rows = sorted(rows, key=lambda row: row.max_num_seqs)
    seqs = np.array([row.max_num_seqs for row in rows], dtype=float)
    tput = _numbers([row.summary.output_tok_per_s for row in rows], positive=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    _with_range(left, seqs, [row.summary for row in rows], "output_tok_per_s", f"measured ({source})", positive=True)
    base_seqs, base = seqs[0], tput[0]
    grid = np.geomspace(seqs[0], seqs[-1], 50)
    left.plot(grid, base * grid / base_seqs, "k--", lw=1, label=f"ideal linear from max_num_seqs={base_seqs:g}")
    if num_requests:
        left.plot(grid, base * np.minimum(grid, num_requests) / base_seqs, ":", color="gray", lw=1.5,
                  label=f"linear, capped at {num_requests} requests")
    if prediction:
        left.plot(prediction["max_num_seqs"], prediction["predicted_output_tok_s"], "s-", color="#8e44ad",
                  ms=5, lw=1.5, label="simulator prediction (continuous-batching notebook)")
    for ax, number in ((left, lambda s: s.output_tok_per_s), (right, lambda s: s.e2e_p95_s)):
        mine = [(row.max_num_seqs, number(row.summary)) for row in own if (number(row.summary) or 0) > 0]
        if mine:
            ax.plot([m[0] for m in mine], [m[1] for m in mine], "*", color=ERROR_COLOR, ms=14,
                    label="your runs", zorder=5)
    _with_range(right, seqs, [row.summary for row in rows], "e2e_p95_s", f"p95 end-to-end ({source})")
    if all(row.summary.ttft_p95_s is not None for row in rows):
        right.plot(seqs, [row.summary.ttft_p95_s for row in rows], "o--", color=WAIT_COLOR,
                   label="p95 time to first token")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(seqs, [f"{s:g}" for s in seqs])
        ax.set_xlabel("max_num_seqs (slots in the running batch)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("output throughput, tokens/s (log scale)")
    right.set_ylabel("latency, s")
    measured = np.isfinite(tput) & (tput > 0)
    if measured.any():
        best = int(np.nanargmax(np.where(measured, tput, np.nan)))
        usable = min(seqs[best], num_requests) if num_requests else seqs[best]
        ratio = f"{tput[best] / base:.1f}x of {base_seqs:g} slot(s)" if measured[0] else \
            f"no successful request at {base_seqs:g} slot(s) to compare with"
        left.set_title(f"Peak {tput[best]:,.0f} tok/s at max_num_seqs={seqs[best]:g}: {ratio}, "
                       f"ideal {usable / base_seqs:g}x")
    else:
        left.set_title("No setting had a successful request")
    p95 = [(s, row.summary.e2e_p95_s) for s, row in zip(seqs, rows) if row.summary.e2e_p95_s is not None]
    if p95:
        lowest = min(p95, key=lambda item: item[1])
        right.set_title(f"p95 latency from {_seconds(p95[0][1])} at {p95[0][0]:g} to {_seconds(p95[-1][1])} at "
                        f"{p95[-1][0]:g} (lowest: {_seconds(lowest[1])} at {lowest[0]:g})")
    else:
        right.set_title("No latency measured: no request succeeded")
    errors = sum(row.summary.num_errors for row in rows)
    if errors:
        sent = sum(row.summary.num_requests * row.summary.num_runs for row in rows)
        fig.suptitle(f"{errors} of {sent} requests failed; they add no tokens and no latencies",
                     color=ERROR_COLOR, fontsize=10)
    fig.tight_layout()
    return fig


def _short(text: str, limit: int = 110) -> str:
    """One line of at most ``limit`` characters, for a title.

    >>> _short("x" * 200, 10)
    'xxxxxxxxx…'
    """
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _seconds(value: float) -> str:
    """Two significant digits below 10 s, whole seconds above: "0.42 s", "3.6 s", "122 s".

    >>> _seconds(0.4182), _seconds(3.57), _seconds(122.4)
    ('0.42 s', '3.6 s', '122 s')
    """
    return f"{value:.0f} s" if value >= 10 else f"{value:.2g} s"


def _numbers(values: Sequence[float | None], positive: bool = False) -> np.ndarray:
    """Floats, with None (nothing measured) as NaN: a gap in a line, not a crash. With
    ``positive``, 0 and below are NaN too: a log axis draws them nowhere.

    >>> _numbers([1.0, None]).tolist(), _numbers([1.0, 0.0], positive=True).tolist()
    ([1.0, nan], [1.0, nan])
    """
    floats = np.array([np.nan if value is None else value for value in values], dtype=float)
    return np.where(floats > 0, floats, np.nan) if positive else floats


def _with_range(ax, seqs, summaries: Sequence[RunSummary], name: str, label: str, positive: bool = False) -> None:
    """The summaries' number ``name`` as points, with whiskers over the runs' range where pooled
    (``positive``: for a log axis, as in `_numbers`)."""
    values = _numbers([getattr(summary, name) for summary in summaries], positive)
    ranges = [summary.range_of(name) for summary in summaries]
    lo = np.array([value if spread is None else spread[0] for value, spread in zip(values, ranges)], dtype=float)
    hi = np.array([value if spread is None else spread[1] for value, spread in zip(values, ranges)], dtype=float)
    ax.errorbar(seqs, values, yerr=[values - lo, hi - values], fmt="o-", color=GENERATE_COLOR, capsize=4, label=label)
