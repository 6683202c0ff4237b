"""The second lab's figures: latency and throughput against offered load, where TTFT goes, the roofline.

Drawing only: every function takes :class:`~helpers.traffic.rates.RatePoint` objects (measured by
:func:`helpers.traffic.sweep.sweep_rates`), returns a matplotlib Figure, and titles it with a finding
computed from the points. Points that were not run are left out of the lines and named under the title.
Taught in ``labs/02_serving_real_traffic.ipynb``.

    >>> from helpers.traffic.rates import RatePoint, measured_saturation
    >>> sent = [i / 2 for i in range(20)]  # past 2 req/s, each request waits 0.5 s per s sent longer
    >>> pts = [RatePoint("max_num_seqs=4", r, 1.0, 20, num_ok=20, arrival_rate=r, achieved_rate=min(r, 2.0),
    ...                  ttft_p50_s=t, ttft_p95_s=2 * t, tpot_p50_ms=40.0, tpot_p95_ms=60.0,
    ...                  queue_mean_s=q, prefill_mean_s=0.1, sent_s=sent,
    ...                  latencies=[(t + (0.5 * s if r > 2 else 0), 2.0, 16) for s in sent])
    ...        for r, t, q in ((1.0, 0.2, 0.01), (2.0, 0.5, 0.3), (3.0, 4.0, 3.5))]
    >>> fig = plot_load_curves(pts, predicted={"max_num_seqs=4": 2.1})
    >>> [ax.get_xlabel() for ax in fig.axes]
    ['offered load (requests/s)', 'offered load (requests/s)', 'offered load (requests/s)']
    >>> fig._suptitle.get_text()
    'max_num_seqs=4: TTFT p95 0.4 s at 1 req/s, 8 s at 3 req/s (20x): it kept up at 2 req/s, not at 3'
    >>> plot_ttft_split(pts).axes[0].get_ylabel()
    'mean time to first token (s)'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from helpers.drawing import GENERATE_COLOR, WAIT_COLOR, setting_colors
from helpers.traffic.rates import RatePoint, measured_saturation
from helpers.tuning.roofline import DecodeRoofline
from helpers.units import duration

RATE_LABEL = "offered load (requests/s)"


def _measured(points: Sequence[RatePoint]) -> dict[str, list[RatePoint]]:
    by_setting: dict[str, list[RatePoint]] = {}
    for p in points:
        if p.ran:
            by_setting.setdefault(p.setting, []).append(p)
    return {s: sorted(ps, key=lambda p: p.offered_rate) for s, ps in by_setting.items()}


def _title(fig: Figure, finding: str, points: Sequence[RatePoint]) -> None:
    """The finding, and on a second line the points not measured and why."""
    missing = [f"{p.setting} at {p.offered_rate:g} req/s ({p.status})" for p in points if not p.ran]
    fig.suptitle(finding + ("\nnot measured: " + "; ".join(missing) if missing else ""))


def _two_digits(value: float) -> str:
    """Two significant digits, never in exponent form: 0.64, 1.6, 20, 150."""
    return f"{float(f'{value:.2g}'):g}"


def load_finding(points: Sequence[RatePoint]) -> str:
    """How TTFT p95 changed from the lightest to the heaviest load of the setting whose TTFT grew most
    (or fell least), and the measured bracket where that setting stopped keeping up.

    >>> from helpers.traffic.rates import RatePoint
    >>> pts = [RatePoint("max_num_seqs=8", r, 1.0, 20, num_ok=20, ttft_p95_s=t) for r, t in ((1.0, 0.11), (3.0, 0.07))]
    >>> load_finding(pts)
    'max_num_seqs=8: TTFT p95 0.11 s at 1 req/s, 0.07 s at 3 req/s (fell to 0.64x)'
    """
    best = None
    for setting, ps in _measured(points).items():
        ends = [p for p in ps if p.ttft_p95_s]
        if len(ends) >= 2 and (best is None or ends[-1].ttft_p95_s / ends[0].ttft_p95_s > best[0]):
            best = (ends[-1].ttft_p95_s / ends[0].ttft_p95_s, setting, ends[0], ends[-1])
    if best is None:
        return "too few measured points to compare light and heavy load"
    growth, setting, low, high = best
    change = f"fell to {_two_digits(growth)}x" if growth < 1 else f"{_two_digits(growth)}x"
    text = (f"{setting}: TTFT p95 {_two_digits(low.ttft_p95_s)} s at {low.offered_rate:g} req/s, "
            f"{_two_digits(high.ttft_p95_s)} s at {high.offered_rate:g} req/s ({change})")
    seen = measured_saturation(points).get(setting)
    if seen is None:
        return text
    if seen.first_not is not None:
        text += (f": it kept up at {seen.last_kept_up:g} req/s, not at {seen.first_not:g}"
                 if seen.last_kept_up is not None else f": it fell behind from {seen.first_not:g} req/s on")
    elif seen.last_kept_up is not None:
        text += ": it kept up at every rate"
    return text


def plot_load_curves(points: Sequence[RatePoint], predicted: Mapping[str, float] | None = None) -> Figure:
    """TTFT, time per output token, and completions per second against offered load, one colour per
    setting; p50 solid, p95 dashed; ``predicted``: each setting's predicted saturation rate (dotted)."""
    measured = _measured(points)
    colors = setting_colors(list(measured))
    fig = Figure(figsize=(13, 4.4), layout="constrained")
    ttft_ax, tpot_ax, rate_ax = fig.subplots(1, 3)
    for setting, ps in measured.items():
        rates, color = [p.offered_rate for p in ps], colors[setting]
        ttft_ax.plot(rates, [p.ttft_p50_s for p in ps], "o-", color=color, label=f"{setting} p50")
        ttft_ax.plot(rates, [p.ttft_p95_s for p in ps], "s--", color=color, label=f"{setting} p95")
        tpot_ax.plot(rates, [p.tpot_p50_ms for p in ps], "o-", color=color, label=f"{setting} p50")
        tpot_ax.plot(rates, [p.tpot_p95_ms for p in ps], "s--", color=color, label=f"{setting} p95")
        rate_ax.plot(rates, [p.achieved_rate for p in ps], "o-", color=color, label=f"{setting} completed")
        for ax in (ttft_ax, tpot_ax, rate_ax):
            if predicted and predicted.get(setting):
                ax.axvline(predicted[setting], color=color, linestyle=":", linewidth=1.2)
    top = max((p.offered_rate for ps in measured.values() for p in ps), default=1.0)
    rate_ax.plot([0, top], [0, top], color="grey", linewidth=1, label="completed = offered")
    ttft_ax.set_yscale("log")
    for ax, ylabel, title in ((ttft_ax, "time to first token (s, log scale)", "TTFT"),
                              (tpot_ax, "time per output token (ms)", "TPOT, after the first token"),
                              (rate_ax, "requests completed per second", "keeping up?")):
        ax.set_xlabel(RATE_LABEL)
        ax.set_ylabel(ylabel)
        ax.set_title(title + (" (dotted: predicted saturation)" if predicted and ax is rate_ax else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _title(fig, load_finding(points), points)
    return fig


def plot_ttft_split(points: Sequence[RatePoint]) -> Figure:
    """Mean TTFT per point split into vLLM's queue time, its prefill time and the rest (HTTP,
    tokenizing, the API server), one group of bars per setting."""
    measured = _measured(points)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax = fig.subplots()
    labels, x, worst = [], 0, None
    for setting, ps in measured.items():
        for p in ps:
            queue, prefill = p.queue_mean_s or 0.0, p.prefill_mean_s or 0.0
            mean_ttft = _mean_ttft(p)
            rest = max(0.0, mean_ttft - queue - prefill) if mean_ttft is not None else 0.0
            ax.bar(x, queue, color=WAIT_COLOR, label="queued (vLLM)" if x == 0 else None)
            ax.bar(x, prefill, bottom=queue, color=GENERATE_COLOR, label="prefill (vLLM)" if x == 0 else None)
            ax.bar(x, rest, bottom=queue + prefill, color="lightgrey",
                   label="the rest (client's TTFT)" if x == 0 else None)
            labels.append(f"{setting}\n{p.offered_rate:g}/s")
            whole = max(mean_ttft or 0.0, queue + prefill)  # the client's TTFT holds vLLM's parts
            if whole and (worst is None or queue / whole > worst[0]):
                worst = (queue / whole, setting, p.offered_rate)
            x += 1
        x += 0.5
    ax.set_xticks(np.arange(len(labels)) + np.repeat(np.arange(len(measured)) * 0.5,
                                                      [len(ps) for ps in measured.values()]))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("mean time to first token (s)")
    ax.set_xlabel("setting and offered load")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _title(fig, "where TTFT goes" if worst is None else
           f"where TTFT goes: at {worst[1]}, {worst[2]:g} req/s, {worst[0]:.0%} of it is waiting in the queue", points)
    return fig


def _mean_ttft(point: RatePoint) -> float | None:
    ttfts = [t for t, _, _ in point.latencies if t is not None]
    return float(np.mean(ttfts)) if ttfts else None


def plot_roofline(measured: Sequence[tuple[int, float]], bounds: Sequence[DecodeRoofline],
                  bandwidth_note: str) -> Figure:
    """Measured decode step times (batch, seconds) against the memory-bandwidth bound of each batch.

    The title reads the largest batch. A step faster than its bound means the machine read its bytes
    faster than ``bandwidth_note``'s figure: then the line is no bound, and the title says so.

    >>> from helpers.tuning.roofline import decode_roofline
    >>> bounds = [decode_roofline(270e6, 23_040, [300] * b, 20e9) for b in (1, 4, 8)]
    >>> fig = plot_roofline([(1, 0.030), (8, 0.045)], bounds, "20 GB/s")
    >>> fig.axes[0].get_title()
    'at 8 sequences a step took 45.0 ms; reading its bytes at 20 GB/s takes at least 16.3 ms: the bound is 36% of the step'
    >>> print(plot_roofline([(8, 0.012)], bounds, "20 GB/s (measured copy)").axes[0].get_title())
    at 8 sequences a step took 12.0 ms, less than reading its bytes at 20 GB/s (measured copy) takes (16.3 ms):
    that figure understates this machine's read bandwidth, so the line is no bound here
    (on a CPU the copy is numpy's, run on the threads numpy has, often one core's worth)
    """
    fig = Figure(figsize=(8, 4.4), layout="constrained")
    ax = fig.subplots()
    ax.plot([b.batch for b in bounds], [b.step_s * 1e3 for b in bounds], "-", color="grey",
            label=f"memory bound: weights + KV read at {bandwidth_note}")
    ax.plot([b for b, _ in measured], [s * 1e3 for _, s in measured], "o", color=GENERATE_COLOR, markersize=8,
            label="measured decode step (the server's clock)")
    ax.set_xlabel("sequences decoding together (batch)")
    ax.set_ylabel("time per decode step (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    batch, step_s = max(measured)
    bound = next((b for b in bounds if b.batch == batch), None)
    took = f"at {batch} sequences a step took {duration(step_s)}"
    if bound is None:
        title = took
    elif bound.step_s > step_s:  # the step beat the figure: it is no lower bound on this machine
        title = (f"{took}, less than reading its bytes at {bandwidth_note} takes ({duration(bound.step_s)}):\n"
                 "that figure understates this machine's read bandwidth, so the line is no bound here"
                 + ("\n(on a CPU the copy is numpy's, run on the threads numpy has, often one core's worth)"
                    if "copy" in bandwidth_note and "datasheet" not in bandwidth_note else ""))
    else:
        title = (f"{took}; reading its bytes at {bandwidth_note} takes at least {duration(bound.step_s)}: "
                 f"the bound is {bound.efficiency(step_s):.0%} of the step")
    ax.set_title(title, **({"fontsize": 9} if "\n" in title else {}))  # three lines must fit the figure
    return fig
