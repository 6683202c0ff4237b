"""Drawing what the poller saw: running and waiting requests, and KV-cache use, over time.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from helpers.load.prometheus import MetricsSample, metrics_finding, summarize_samples


def plot_metrics(
    samples: Sequence[MetricsSample],
    max_num_seqs: int | None = None,
    title: str | None = None,
) -> Figure:
    """Running and waiting requests (top) and KV-cache usage (bottom) over time.

    The gauges are drawn as steps (they hold their value until the engine's next step),
    with a marker at each sample; the ``max_num_seqs`` cap is a dashed line. The title
    states the finding (:func:`metrics_finding`) unless ``title`` is given.

    >>> s = [MetricsSample(t, r, w, u, 0, 0, 0, 0, 0) for t, r, w, u in [(0, 0, 0, 0), (0.2, 2, 1, 0.1)]]
    >>> fig = plot_metrics(s, max_num_seqs=2)
    >>> [ax.get_ylabel() for ax in fig.axes]
    ['requests', 'KV cache in use (%)']
    """
    times = [s.t_s for s in samples]
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    top.step(times, [s.num_requests_running for s in samples], where="post", marker=".", markersize=4,
             color="tab:blue", label="running (vllm:num_requests_running)")
    top.step(times, [s.num_requests_waiting for s in samples], where="post", marker=".", markersize=4,
             color="tab:orange", label="waiting (vllm:num_requests_waiting)")
    if max_num_seqs is not None:
        top.axhline(max_num_seqs, color="tab:red", linestyle="--", linewidth=1,
                    label=f"max_num_seqs = {max_num_seqs}")
    top.set_ylabel("requests")
    highest = max([max_num_seqs or 0] + [max(s.num_requests_running, s.num_requests_waiting) for s in samples])
    top.set_ylim(0, highest * 1.12 + 0.5)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    top.grid(alpha=0.3)
    bottom.step(times, [100 * s.kv_cache_usage_perc for s in samples], where="post", marker=".",
                markersize=4, color="tab:green", label="KV cache in use (vllm:kv_cache_usage_perc)")
    bottom.set_ylabel("KV cache in use (%)")
    bottom.set_xlabel(f"time since the load started (s), one sample every "
                      f"~{summarize_samples(samples).poll_interval_p50_s:.2f} s")
    bottom.set_ylim(0, max(5.0, 115 * max(s.kv_cache_usage_perc for s in samples)))
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    bottom.grid(alpha=0.3)
    fig.suptitle(title or metrics_finding(summarize_samples(samples, max_num_seqs), max_num_seqs), fontsize=11)
    return fig

