"""vLLM's Prometheus ``/metrics`` text as plain numbers: parsing and what a polled load showed.

vLLM publishes its scheduler's state as Prometheus text at ``GET /metrics``. Three gauges
show the batch as it runs, refreshed once per engine step:

- ``vllm:num_requests_running``: requests holding a place in the running batch (at most
  ``--max-num-seqs``);
- ``vllm:num_requests_waiting``: requests queued for a place (or preempted);
- ``vllm:kv_cache_usage_perc``: the fraction (0-1, despite the name) of KV blocks in use.

Counters only grow (``vllm:prompt_tokens``, ``vllm:generation_tokens``,
``vllm:num_preemptions``, ``vllm:prefix_cache_queries`` / ``_hits``, ...): a load's share
is the difference between two scrapes. In the text their samples carry a ``_total`` suffix.

The text is parsed with ``prometheus_client``'s own parser (never with regular
expressions); every ``vllm:`` gauge, counter and histogram sum/count is kept as a number.
Fetching it is :mod:`helpers.load.poller`; drawing it, :mod:`helpers.load.plots`.

Leaves out: per-label breakdowns (label sets are summed, e.g. over engines), histogram
buckets (only ``_sum`` and ``_count`` are kept), and anything outside the ``vllm:``
namespace (HTTP and process metrics).

Example::

    >>> text = '''# TYPE vllm:num_requests_running gauge
    ... vllm:num_requests_running{engine="0",model_name="smollm2"} 4.0
    ... # TYPE vllm:generation_tokens_total counter
    ... vllm:generation_tokens_total{engine="0",model_name="smollm2"} 120.0
    ... '''
    >>> parse_metrics(text)
    {'num_requests_running': 4.0, 'generation_tokens': 120.0}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "vllm:"
# Every vllm: metric the course reads, as parse_metrics names them. They exist in vLLM 0.26.0
# (GPU) and 0.32.0 (CPU build); tests/test_vllm_versions.py checks both servers' real /metrics.
COURSE_METRICS = (
    "num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "num_preemptions",
    "prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits",
    "iteration_tokens_total_count", "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count",
    "request_decode_time_seconds_sum", "request_decode_time_seconds_count",
    "request_queue_time_seconds_sum", "request_queue_time_seconds_count",  # helpers.load.ttft_split
    "request_prefill_time_seconds_sum", "request_prefill_time_seconds_count",
)


def parse_metrics(text: str) -> dict[str, float]:
    """Every ``vllm:`` number in a ``/metrics`` text, keyed by name without the ``vllm:`` prefix.

    - gauges: their value (``num_requests_running``, ``kv_cache_usage_perc``, ...);
    - counters: their total, named without ``_total`` (``generation_tokens``);
    - histograms: ``<name>_sum`` and ``<name>_count`` (``time_to_first_token_seconds_count``
      is the number of requests that got a first token; ``iteration_tokens_total_count``
      the number of engine steps).

    A metric with several label sets (one per engine, per reason, ...) is summed over them.
    ``*_created`` timestamps and ``*_info`` metrics (labels only, value 1) are dropped.
    """
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        name = family.name
        if not name.startswith(PREFIX) or name.endswith(("_created", "_info")):
            continue
        short = name[len(PREFIX):]
        for sample in family.samples:
            if family.type == "counter" and sample.name == name + "_total":
                key = short
            elif family.type in ("gauge", "untyped", "unknown") and sample.name == name:
                key = short
            elif family.type in ("histogram", "summary") and sample.name in (name + "_sum", name + "_count"):
                key = sample.name[len(PREFIX):]
            else:
                continue  # buckets, quantiles, created timestamps
            values[key] = values.get(key, 0.0) + float(sample.value)
    return values


@dataclass(frozen=True)
class MetricsSample:
    """One scrape of ``/metrics``: the numbers a batching plot needs, plus all the others.

    Gauges are the state after the engine's latest step; counters are totals since the
    server started (subtract two samples for a load's share, see :func:`counter_delta`).
    """

    t_s: float  # seconds on the client's clock since polling started (0 for a lone scrape)
    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage_perc: float  # 0-1 fraction of KV blocks in use (vLLM's name says perc)
    num_preemptions: int  # counter
    prompt_tokens: int  # counter: prompt tokens prefilled (computed, not cached)
    generation_tokens: int  # counter: output tokens generated
    prefix_cache_queries: int  # counter: prompt tokens looked up in the prefix cache
    prefix_cache_hits: int  # counter: of those, tokens found there
    values: Mapping[str, float] = field(default_factory=dict, repr=False)  # everything parse_metrics found

    @classmethod
    def from_text(cls, text: str, t_s: float = 0.0) -> MetricsSample:
        """Parse one ``/metrics`` text; a metric the server does not publish reads 0."""
        v = parse_metrics(text)
        count = lambda name: int(round(v.get(name, 0.0)))  # noqa: E731
        return cls(
            t_s=t_s,
            num_requests_running=count("num_requests_running"),
            num_requests_waiting=count("num_requests_waiting"),
            kv_cache_usage_perc=float(v.get("kv_cache_usage_perc", 0.0)),
            num_preemptions=count("num_preemptions"),
            prompt_tokens=count("prompt_tokens"),
            generation_tokens=count("generation_tokens"),
            prefix_cache_queries=count("prefix_cache_queries"),
            prefix_cache_hits=count("prefix_cache_hits"),
            values=v,
        )










def cache_config_labels(text: str) -> dict[str, str]:
    r"""The labels of ``vllm:cache_config_info`` in a ``/metrics`` text (empty where it is absent):
    the KV-cache settings the engine actually runs with (``block_size``, ``num_gpu_blocks``,
    ``enable_prefix_caching``, ``cache_dtype``, ...), including defaults nobody passed.

    >>> cache_config_labels('vllm:cache_config_info{block_size="128",enable_prefix_caching="True"} 1.0\n')
    {'block_size': '128', 'enable_prefix_caching': 'True'}
    """
    for family in text_string_to_metric_families(text):
        if family.name == PREFIX + "cache_config_info" and family.samples:
            return dict(family.samples[0].labels)
    return {}








def counter_delta(samples: Sequence[MetricsSample], name: str) -> float:
    """How much a counter (a field or a ``values`` key) grew from the first to the last sample.

    >>> a = MetricsSample(0.0, 0, 0, 0.0, 0, 10, 5, 0, 0)
    >>> b = MetricsSample(1.0, 0, 0, 0.0, 0, 50, 105, 0, 0)
    >>> counter_delta([a, b], "generation_tokens")
    100.0
    """
    first, last = samples[0], samples[-1]
    get = lambda s: float(getattr(s, name)) if hasattr(s, name) else float(s.values.get(name, 0.0))  # noqa: E731
    return get(last) - get(first)


@dataclass(frozen=True)
class MetricsSummary:
    """What a polled load showed, in numbers (units in the names)."""

    num_samples: int
    duration_s: float  # first to last sample
    peak_running: int
    peak_waiting: int
    peak_kv_cache_usage: float  # 0-1
    seconds_at_cap: float  # time running == max_num_seqs (None cap: time at peak_running)
    seconds_with_queue: float  # time waiting > 0
    mean_running_while_queued: float  # time-weighted mean of running while waiting > 0 (0 if never)
    num_running_changes: int  # samples where running differed from the sample before
    largest_running_drop: int  # biggest fall of running between two samples
    num_preemptions: int  # during the polled window
    generation_tokens: int  # during the polled window
    poll_interval_p50_s: float  # median gap between samples


def summarize_samples(samples: Sequence[MetricsSample], max_num_seqs: int | None = None) -> MetricsSummary:
    """Peaks and counts from a list of samples (a pure function of the samples).

    A gauge holds its value until the next sample, so time at the cap adds the gaps that
    start at a sample where running equals the cap, and the mean while queued weighs each
    sample with waiting > 0 by the gap after it.

    >>> s = [MetricsSample(t, r, w, 0.1, 0, 0, g, 0, 0)
    ...      for t, r, w, g in [(0.0, 0, 0, 0), (0.2, 2, 3, 4), (0.4, 2, 1, 8), (0.6, 1, 0, 12), (0.8, 0, 0, 14)]]
    >>> m = summarize_samples(s, max_num_seqs=2)
    >>> m.peak_running, m.peak_waiting, round(m.seconds_at_cap, 3), m.largest_running_drop, m.generation_tokens
    (2, 3, 0.4, 1, 14)
    >>> round(m.seconds_with_queue, 3), m.mean_running_while_queued
    (0.4, 2.0)
    """
    if not samples:  # every scrape failed (the poller skips failures): data, not a bug of ours
        raise ValueError("no /metrics samples to summarize: every scrape failed. Is the server still running "
                         "(server.is_running())? Run the cell again once it answers.")
    running = [s.num_requests_running for s in samples]
    peak = max(running)
    cap = max_num_seqs if max_num_seqs is not None else peak
    at_cap = sum(b.t_s - a.t_s for a, b in zip(samples, samples[1:]) if a.num_requests_running == cap)
    queued = [(b.t_s - a.t_s, a.num_requests_running) for a, b in zip(samples, samples[1:])
              if a.num_requests_waiting > 0]
    seconds_queued = sum(dt for dt, _ in queued)
    gaps = sorted(b.t_s - a.t_s for a, b in zip(samples, samples[1:]))
    return MetricsSummary(
        num_samples=len(samples),
        duration_s=samples[-1].t_s - samples[0].t_s,
        peak_running=peak,
        peak_waiting=max(s.num_requests_waiting for s in samples),
        peak_kv_cache_usage=max(s.kv_cache_usage_perc for s in samples),
        seconds_at_cap=at_cap,
        seconds_with_queue=seconds_queued,
        mean_running_while_queued=sum(dt * r for dt, r in queued) / seconds_queued if seconds_queued > 0 else 0.0,
        num_running_changes=sum(a != b for a, b in zip(running, running[1:])),
        largest_running_drop=max([a - b for a, b in zip(running, running[1:])] + [0]),
        num_preemptions=int(counter_delta(samples, "num_preemptions")),
        generation_tokens=int(counter_delta(samples, "generation_tokens")),
        poll_interval_p50_s=gaps[len(gaps) // 2] if gaps else 0.0,
    )


def metrics_finding(summary: MetricsSummary, max_num_seqs: int | None = None) -> str:
    """A one-line title stating what the samples show, computed from them."""
    if max_num_seqs is not None and summary.peak_running >= max_num_seqs and summary.seconds_with_queue > 0:
        head = (f"while requests waited (up to {summary.peak_waiting}), running averaged "
                f"{summary.mean_running_while_queued:.1f} of the cap of {max_num_seqs}")
    elif max_num_seqs is not None and summary.peak_running >= max_num_seqs:
        # a queue can form and empty between two polls: say what the polls saw, not that nobody waited
        head = (f"running reached the cap of {max_num_seqs}; no poll (every {summary.poll_interval_p50_s:.2g} s) "
                "saw a request waiting")
    elif max_num_seqs is not None:
        head = (f"running peaked at {summary.peak_running}, below the cap of {max_num_seqs} "
                f"(up to {summary.peak_waiting} waiting)")
    else:
        head = f"running peaked at {summary.peak_running}, waiting at {summary.peak_waiting}"
    return f"{head}; KV usage peaked at {summary.peak_kv_cache_usage:.0%}"


