"""The routing notebook's figures: where each policy sent a shared-prompt load, and what each student of a
class saw against the target.

Each function takes measured objects (:class:`helpers.route.policies.PolicyResult`,
:class:`helpers.route.class_report.ClassReport`), returns a matplotlib Figure and titles it with
the finding computed from the data. Nothing here measures. Taught in
``notebooks/06_beyond_one_server.ipynb``.

Example::

    >>> from helpers.route.class_report import ClassReport, StudentView
    >>> one = ClassReport("1 replica", 1, 5.0, "", (StudentView(0, 3, 3, 1.0, True), StudentView(1, 3, 3, 6.0, False)),
    ...                   6, 6, 20.0, 0.3, "")
    >>> fig = plot_class([one])
    >>> fig.axes[0].get_ylabel(), fig.axes[0].get_title()
    ('p95 latency the student saw (s)', 'Students within 5 s at their p95, 1 replica: 1 of 2')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from helpers.drawing import setting_colors


def routing_finding(results: Sequence[Any]) -> str:
    """The sentence the routing figure is titled with: which policy served more prompt tokens from cache."""
    rated = [r for r in results if r.hit_rate is not None]
    if len(rated) < 2:
        return "Where each policy sent the requests"
    best = max(rated, key=lambda r: r.hit_rate)
    other = min(rated, key=lambda r: r.hit_rate)
    if best.hit_rate - other.hit_rate < 0.05:
        return f"Both policies served about {best.hit_rate:.0%} of prompt tokens from the prefix cache"
    return (f"{best.policy} served {best.hit_rate:.0%} of prompt tokens from the prefix cache, "
            f"{other.policy} {other.hit_rate:.0%}")


def plot_routing(results: Sequence[Any]) -> Figure:
    """Per policy: requests each replica served, each replica's prefix-cache hit rate, and TTFT p50."""
    fig = Figure(figsize=(11, 3.8), layout="constrained")
    requests_ax, hits_ax, ttft_ax = fig.subplots(1, 3)
    num_replicas = max(len(r.shares) for r in results)
    colors = setting_colors([f"replica {i + 1}" for i in range(num_replicas)])
    width = 0.8 / num_replicas
    x = np.arange(len(results))
    for replica in range(num_replicas):
        label = f"replica {replica + 1}"
        served = [r.shares[replica].num_requests if replica < len(r.shares) else 0 for r in results]
        rates = [100 * (r.shares[replica].hit_rate or 0) if replica < len(r.shares) else 0 for r in results]
        offset = (replica - (num_replicas - 1) / 2) * width
        requests_ax.bar(x + offset, served, width, color=colors[label], label=label)
        hits_ax.bar(x + offset, rates, width, color=colors[label], label=label)
    for ax, ylabel, title in ((requests_ax, "requests served", "Requests per replica"),
                              (hits_ax, "prompt tokens from prefix cache (%)", "Prefix-cache hit rate per replica")):
        ax.set_xticks(x, [r.policy for r in results])
        ax.set_xlabel("router policy")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    hits_ax.set_ylim(0, 100)
    ttft = [r.run.summary.ttft_p50_s or 0 for r in results]
    ttft_ax.bar(x, ttft, 0.5, color="0.45", label="TTFT p50")
    ttft_ax.set_xticks(x, [r.policy for r in results])
    ttft_ax.set_xlabel("router policy")
    ttft_ax.set_ylabel("time to first token, p50 (s)")
    ttft_ax.set_title("Time to first token", fontsize=10)
    ttft_ax.legend(fontsize=8)
    fig.suptitle(routing_finding(results))
    return fig


def class_finding(reports: Sequence[Any]) -> str:
    """The class figure's title: how many students each setup kept within the target."""
    parts = [f"{r.label}: {r.num_within} of {len(r.views)}" for r in reports]
    target = reports[0].target_s if reports else 0
    lines = [f"Students within {target:g} s at their p95, {parts[0]}" if parts else "No class run"]
    for part in parts[1:]:  # a new line where the next setup would not fit: the title stays inside the figure
        lines[-1:] = [lines[-1] + "; " + part] if len(lines[-1]) + len(part) < 88 else [lines[-1] + ";", part]
    return "\n".join(lines)


def plot_class(reports: Sequence[Any]) -> Figure:
    """Each student's p95 end-to-end latency (one dot a student) for each setup, with the target as a line."""
    fig = Figure(figsize=(8.5, 4.2), layout="constrained")
    ax = fig.subplots()
    colors = setting_colors([r.label for r in reports])
    for position, report in enumerate(reports):
        p95s = [v.p95_e2e_s for v in report.views if v.p95_e2e_s is not None]
        jitter = np.linspace(-0.15, 0.15, len(p95s)) if len(p95s) > 1 else np.zeros(len(p95s))
        ax.scatter(position + jitter, p95s, color=colors[report.label], s=36, zorder=3,
                   label=f"{report.label}: one dot a student")
        unanswered = sum(v.num_ok < v.num_requests for v in report.views)
        if unanswered:
            ax.annotate(f"{unanswered} student(s) with failed requests", (position, max(p95s or [0])),
                        textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)
    target = reports[0].target_s
    ax.axhline(target, color="black", linestyle="--", label=f"target: {target:g} s")
    ax.set_xticks(range(len(reports)), [r.label.replace(" (", "\n(") for r in reports], fontsize=8)
    ax.set_xlim(-0.6, len(reports) - 0.4)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("setup")
    ax.set_ylabel("p95 latency the student saw (s)")
    ax.legend(fontsize=8)
    ax.set_title(class_finding(reports))
    return fig
