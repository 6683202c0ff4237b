"""The tuning notebook's figures: KV capacity, one lever before and after, the engine's batch
over time, the throughput / latency trade-off, prefix caching, and the levers' measured order of impact.

Every function takes :class:`helpers.tuning.measurement.Measurement` objects (or numbers derived
from them), returns a matplotlib Figure, and titles it with the finding computed from the data.
Nothing here measures. Taught in ``notebooks/05_throughput_tuning.ipynb``.

Example::

    >>> fig = plot_lever([before, after])        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from helpers.drawing import ERROR_COLOR, GENERATE_COLOR, WAIT_COLOR, setting_colors
from helpers.load.summary import describe_failures
from helpers.paged.kv_math import tokens_that_fit
from helpers.tuning.arithmetic import GIB
from helpers.tuning.comparison import compare_measurements, describe_ratio
from helpers.tuning.measurement import CapacityPoint
from helpers.tuning.ranking import MODULE_ORDER, rank


def plot_kv_capacity(points: Sequence[CapacityPoint], block_size: int, max_model_len: int) -> Figure:
    """Reported KV tokens against pool size (log-log), with the prediction
    pool / bytes-per-token (rounded down to whole blocks) drawn as a line per KV dtype.

    >>> p = [CapacityPoint("2 GiB", 2 * GIB, 23040, 93184, 45.5), CapacityPoint("0.05 GiB", 53687091, 23040, 2304, 1.12)]
    >>> fig = plot_kv_capacity(p, block_size=128, max_model_len=2048)
    >>> fig.axes[0].get_xlabel()
    'KV pool size (GiB, log scale)'
    """
    fig = Figure(figsize=(8.5, 4.8), layout="constrained")
    ax = fig.subplots()
    sizes = np.geomspace(min(p.pool_bytes for p in points) / 2, max(p.pool_bytes for p in points) * 2, 200)
    styles = ["-", "--", ":"]
    for i, per_token in enumerate(sorted({p.bytes_per_token for p in points}, reverse=True)):
        predicted = [tokens_that_fit(int(s), per_token, block_size) for s in sizes]
        ax.plot(sizes / GIB, predicted, styles[i % 3], color="gray", lw=1,
                label=f"predicted: pool / {per_token:,} bytes per token, whole blocks of {block_size}")
    colors = setting_colors([p.label for p in points])
    worst = 0.0
    for p in points:
        predicted = tokens_that_fit(p.pool_bytes, p.bytes_per_token, block_size)
        worst = max(worst, abs(p.num_tokens - predicted) / max(predicted, 1))
        ax.plot(p.pool_bytes / GIB, p.num_tokens, "o", ms=9, color=colors[p.label],
                label=f"{p.label}: {p.num_tokens:,} tokens, max concurrency {p.max_concurrency:.2f}x")
    ax.axhline(max_model_len, color="tab:red", lw=1, ls="-.", label=f"one request of max_model_len = {max_model_len:,}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("KV pool size (GiB, log scale)")
    ax.set_ylabel("KV token slots the server reported (log scale)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    agree = "exactly" if worst == 0 else f"within {worst:.1%}"
    fig.suptitle(f"The pool holds pool / bytes per token: the servers' reports match the prediction {agree}", fontsize=11)
    return fig


def plot_lever(measurements: Sequence[Any], title: str | None = None) -> Figure:
    """Output throughput (left) and latency percentiles (right), one group per setting.

    The title states the change from the first measurement to the last, from the numbers.
    A latency no request measured (all of a setting's requests failed) is labelled "n/a",
    and failed requests are counted under the title.
    """
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.6])
    labels = [m.setting for m in measurements]
    colors = setting_colors(labels)
    x = np.arange(len(measurements))
    tput = [m.summary.output_tok_per_s or 0.0 for m in measurements]
    left.bar(x, tput, color=[colors[label] for label in labels], width=0.6)
    for xi, value in zip(x, tput):
        left.annotate(f"{value:.0f}", (xi, value), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=9)
    left.set_xticks(x, labels)
    left.set_ylabel("output throughput, tokens/s")
    left.set_xlabel(measurements[0].lever)
    left.set_ylim(0, max(tput) * 1.18 + 1)
    left.grid(axis="y", alpha=0.3)
    keys = (("ttft_p50_s", "TTFT p50"), ("ttft_p95_s", "TTFT p95"), ("e2e_p50_s", "end-to-end p50"),
            ("e2e_p95_s", "end-to-end p95"))
    width = 0.8 / len(measurements)
    for i, m in enumerate(measurements):
        measured = [getattr(m.summary, key) for key, _ in keys]
        values = [value or 0.0 for value in measured]
        positions = np.arange(len(keys)) + (i - (len(measurements) - 1) / 2) * width
        right.bar(positions, values, width, color=colors[m.setting], label=m.setting)
        for pos, value, shown in zip(positions, values, measured):
            right.annotate("n/a" if shown is None else f"{value:.1f}", (pos, value), textcoords="offset points",
                           xytext=(0, 2), ha="center", fontsize=7)
    right.set_xticks(np.arange(len(keys)), [name for _, name in keys])
    right.set_ylabel("latency per request, s")
    right.legend(fontsize=8, title=measurements[0].lever, title_fontsize=8)
    right.grid(axis="y", alpha=0.3)
    if title is None and len(measurements) >= 2:
        c = compare_measurements(measurements[0], measurements[-1])
        title = (f"{measurements[0].lever} {c.before} -> {c.after}: {describe_ratio(c.throughput_ratio, 'throughput')}, "
                 f"{describe_ratio(c.e2e_p95_ratio, 'p95 latency')}")
    failures = _failures(measurements)
    fig.suptitle((title or "") + (f"\n{failures}" if failures else ""), fontsize=11)
    return fig


def _failures(measurements: Sequence[Any]) -> str | None:
    """Failed requests per setting, in words, or None when every request succeeded."""
    texts = [f"{m.setting}: {text}" for m in measurements if (text := describe_failures(m.run.records))]
    if not texts:
        return None
    line = " ".join(texts)
    return line if len(line) <= 160 else line[:159] + "…"


def _measured(m: Any) -> bool:
    """Whether a measurement has a throughput and a p95 latency to draw (some request succeeded)."""
    s = m.summary
    return bool(s.output_tok_per_s) and s.e2e_p95_s is not None


def plot_engine(measurements: Sequence[Any]) -> Figure:
    """What the engine reported while each measurement ran: running requests (top) and
    KV-cache usage (bottom) over time, one line per setting, with each server's cap dashed."""
    fig = Figure(figsize=(10, 5.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[1.6, 1])
    colors = setting_colors([m.setting for m in measurements])
    # a cap far above every peak (a GPU's default 1,024 against peaks of 64) would flatten the lines: named, not drawn
    shown = 2 * max([m.engine.peak_running for m in measurements] + [1])
    for m in measurements:
        t = [s.t_s for s in m.samples]
        engine = m.engine
        off = f", cap {m.max_num_seqs:,} (off the plot)" if (m.max_num_seqs or 0) > shown else ""
        top.step(t, [s.num_requests_running for s in m.samples], where="post", color=colors[m.setting],
                 label=f"{m.setting}: running peaked at {engine.peak_running}, {m.num_preemptions} preemptions{off}")
        bottom.step(t, [100 * s.kv_cache_usage_perc for s in m.samples], where="post", color=colors[m.setting],
                    label=f"{m.setting}: peak {engine.peak_kv_cache_usage:.0%}")
        if m.max_num_seqs is not None and not off:
            top.axhline(m.max_num_seqs, color=colors[m.setting], ls="--", lw=0.8)
    top.set_ylim(bottom=0)
    top.set_ylabel("requests running\n(vllm:num_requests_running)")
    top.legend(fontsize=8, loc="upper right")
    top.grid(alpha=0.3)
    bottom.set_ylabel("KV cache in use, %\n(vllm:kv_cache_usage_perc)")
    bottom.set_xlabel("time since the load test started, s")
    bottom.set_ylim(0, 105)
    bottom.legend(fontsize=8, loc="upper right")
    bottom.grid(alpha=0.3)
    peaks = ", ".join(f"{m.engine.peak_running} at {m.setting}" for m in measurements)
    fig.suptitle(f"Most requests running at once: {peaks} (dashed: max_num_seqs)", fontsize=11)
    return fig


def plot_tradeoff(points: Sequence[Any], reference: Sequence[Any] = (),
                  reference_label: str = "the lab's reference sweep", context: Sequence[Any] = ()) -> Figure:
    """p95 end-to-end latency against output throughput, one point per setting of this run.

    ``context``: other measurements of this run drawn as squares for comparison (e.g. a run
    limited by its KV pool); the title compares only ``points``.

    ``reference``: pooled rows of another load (``helpers.lab.table.runs_table(..., pooled=True)``:
    anything with ``max_num_seqs`` and a ``summary``, a :class:`~helpers.load.summary.RunSummary`),
    drawn in a second, smaller panel joined in order of ``max_num_seqs``: the curve to recall,
    kept apart because its load (and so its latency scale) differs. Down and to the right is better.

    A measurement whose requests all failed has no point: it is named in the legend as such,
    left out of the title's comparison, and its failures are counted under the title.
    """
    fig = Figure(figsize=(12 if reference else 8, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, width_ratios=[1.6, 1]) if reference else [fig.subplots()]
    ax = axes[0]
    everything = [*points, *context]
    colors = setting_colors([m.setting for m in everything])
    for i, m in enumerate(everything):
        s = m.summary
        if not _measured(m):
            ax.plot([], [], "x", color=ERROR_COLOR,
                    label=f"{m.lever} {m.setting}: no successful request ({s.num_errors} failed)")
            continue
        ax.plot(s.output_tok_per_s, s.e2e_p95_s, "o" if i < len(points) else "s", ms=11, color=colors[m.setting],
                label=f"{m.lever} {m.setting}: {s.output_tok_per_s:.0f} tok/s, p95 {s.e2e_p95_s:.1f} s")
        ax.annotate(m.setting, (s.output_tok_per_s, s.e2e_p95_s), textcoords="offset points",
                    xytext=(9, 9 if i % 2 == 0 else -15), fontsize=9)
    xs = [m.summary.output_tok_per_s for m in everything if _measured(m)]
    ys = [m.summary.e2e_p95_s for m in everything if _measured(m)]
    if xs:
        ax.set_xlim(min(xs) * 0.8, max(xs) * 1.2)
        ax.set_ylim(0, max(ys) * 1.3)
    ax.set_xlabel("output throughput, tokens/s  (better ->)")
    ax.set_ylabel("p95 end-to-end latency, s  (<- better)")
    ax.set_title("this run: one point per setting", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    if reference:
        rows = sorted(reference, key=lambda r: r.max_num_seqs)
        ref = axes[1]
        ref.plot([r.summary.output_tok_per_s for r in rows], [r.summary.e2e_p95_s for r in rows], "o--",
                 color="gray", mfc="none", lw=1)
        for r in rows:
            ref.annotate(f"{r.max_num_seqs}", (r.summary.output_tok_per_s, r.summary.e2e_p95_s),
                         textcoords="offset points", xytext=(5, 3), fontsize=8, color="dimgray")
        ref.set_xlabel("output throughput, tokens/s")
        ref.set_ylabel("p95 end-to-end latency, s")
        ref.set_title(f"recalled: {reference_label}\n(labels: max_num_seqs)", fontsize=9)
        ref.set_ylim(bottom=0)
        ref.grid(alpha=0.3)
    measured = [m for m in points if _measured(m)]
    if len(measured) >= 2:
        best = max(measured, key=lambda m: m.summary.output_tok_per_s)
        worst = min(measured, key=lambda m: m.summary.output_tok_per_s)
        b, w = best.summary, worst.summary
        latency = "lower" if b.e2e_p95_s < w.e2e_p95_s else "higher"
        title = (f"{best.lever}={best.setting} gave {b.output_tok_per_s / w.output_tok_per_s:.2f}x the throughput "
                 f"of {worst.lever}={worst.setting}, at a {latency} p95 latency ({b.e2e_p95_s:.1f} s vs "
                 f"{w.e2e_p95_s:.1f} s)")
    else:
        missing = [m.setting for m in points if not _measured(m)]
        title = (f"Nothing to compare: no request succeeded at {', '.join(missing)}" if missing else
                 "one setting: nothing to compare it with")
    failures = _failures(everything)
    fig.suptitle(title + (f"\n{failures}" if failures else ""), fontsize=11)
    return fig


def plot_prefix(off: Any, on: Any) -> Figure:
    """Prefix caching off and on: time to first token of every request (left, sorted), and the
    prompt tokens the engine computed against those it found in its prefix cache (right).

    Failed requests have no first token: they are left out of the curves (each legend says
    how many requests it has) and counted under the title.
    """
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.5, 1])
    for m, color in ((off, WAIT_COLOR), (on, GENERATE_COLOR)):
        ttft = np.sort([r.ttft_s for r in m.run.records if r.ok and r.ttft_s is not None])
        if not len(ttft):
            left.plot([], [], color=color, lw=2, label=f"prefix caching {m.setting}: no successful request")
            continue
        left.step(ttft, np.arange(1, len(ttft) + 1), where="post", color=color, lw=2,
                  label=f"prefix caching {m.setting}: median {np.median(ttft):.2f} s ({len(ttft)} requests)")
    left.set_xlabel("time to first token, s")
    left.set_ylabel("requests with their first token by then")
    left.grid(alpha=0.3)
    left.legend(fontsize=8, loc="lower right")
    names = [f"caching {off.setting}", f"caching {on.setting}"]
    prompt = [m.summary.prompt_tokens_total for m in (off, on)]
    hits = [m.prefix_cache_hits for m in (off, on)]
    computed = [p - h for p, h in zip(prompt, hits)]
    right.bar(names, computed, color=WAIT_COLOR, label="computed (prefilled)")
    right.bar(names, hits, bottom=computed, color=GENERATE_COLOR, label="found in the prefix cache")
    for i, (c, h) in enumerate(zip(computed, hits)):
        right.annotate(f"{c:,} computed\n{h:,} cached", (i, c + h), textcoords="offset points", xytext=(0, 3),
                       ha="center", fontsize=8)
    right.set_ylabel("prompt tokens in the run")
    right.set_ylim(0, max(prompt) * 1.25 + 1)
    right.legend(fontsize=8, loc="lower right")
    right.grid(axis="y", alpha=0.3)
    rate = on.prefix_hit_rate or 0.0
    medians = " -> ".join("-" if m.summary.ttft_p50_s is None else f"{m.summary.ttft_p50_s:.2f} s"
                          for m in (off, on))
    failures = _failures([off, on])
    fig.suptitle(f"Prefix caching found {rate:.0%} of the prompt tokens in its cache; median TTFT {medians}"
                 + (f"\n{failures}" if failures else ""), fontsize=11)
    return fig


def plot_impacts(impacts: Sequence[Any], finding: str, noise: float = 0.25) -> Figure:
    """Each measured lever's size (how many times its better setting's output tok/s is the other's, either way), as
    bars in measured order, labelled with the module text's place for it; the dotted line is the noise. ``impacts``
    are :class:`helpers.tuning.ranking.LeverImpact`; ``finding`` (e.g. ranking.score's line) titles the figure.

    >>> from helpers.tuning.ranking import LeverImpact
    >>> fig = plot_impacts([LeverImpact("kv pool", 2.0, "a"), LeverImpact("prefix caching", 4.5, "b")], "1 of 1 right")
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]  # the largest first, drawn at the top
    ['prefix caching (module: 4th)', 'kv pool (module: 1st)']
    """
    ranked = rank(impacts)
    fig = Figure(figsize=(8.5, 0.6 * max(len(ranked), 1) + 1.8), layout="constrained")
    ax = fig.subplots()
    ordinal = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th"}
    names = [f"{i.lever} (module: {ordinal.get(MODULE_ORDER.index(i.lever) + 1, '?')})" for i in ranked]
    sizes = [i.size for i in ranked]
    ys = np.arange(len(ranked))[::-1]  # the largest at the top
    ax.barh(ys, [s - 1 for s in sizes], left=1, color=GENERATE_COLOR)
    for y, i in zip(ys, ranked):
        ax.text(i.size * 1.03, y, f"{i.size:.2f}x ({i.settings})", va="center", fontsize=9)
    ax.axvline(1 + noise, color=WAIT_COLOR, linestyle=":", label=f"noise: {noise:.0%}")
    ax.set_xscale("log")
    ax.set_xlim(1, max(sizes + [1 + noise]) * 2.5)
    ax.set_yticks(ys, names)
    ax.set_xlabel("size: output tok/s, better setting / other, either way (x, log scale)")
    ax.legend(loc="lower right", fontsize=9)
    fig.suptitle(f"Measured order of impact: {finding}", fontsize=11)
    return fig
