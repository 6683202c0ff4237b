"""What the tuning notebook keeps of one server setting: a :class:`Measurement` (one load test
and the engine's ``/metrics`` samples meanwhile) and a :class:`CapacityPoint` (one server's
KV pool). Plain data and what follows from it; :mod:`helpers.tuning.measure` makes them.

Example::

    >>> from helpers.load.prometheus import MetricsSample
    >>> from helpers.load.run import LoadTestRun, ServerFacts
    >>> run = LoadTestRun("KV pool: 2 GiB", {}, ServerFacts("smollm2"), "CPU", "2026-01-01T00:00:00+00:00", 1.0, [])
    >>> samples = [MetricsSample(0.0, 0, 0, 0.0, 0, 0, 0, 100, 40), MetricsSample(1.0, 0, 0, 0.0, 2, 0, 0, 500, 340)]
    >>> m = Measurement("KV pool", "2 GiB", run, samples)
    >>> m.num_preemptions, m.prefix_cache_hits, m.prefix_hit_rate
    (2, 300, 0.75)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from helpers.load.prometheus import (
    MetricsSample,
    MetricsSummary,
    counter_delta,
    summarize_samples,
)
from helpers.load.run import LoadTestRun
from helpers.load.summary import RunSummary


@dataclass
class Measurement:
    """One load test of one server setting, with what the engine itself counted meanwhile."""

    lever: str  # which setting this run varies, e.g. "KV pool"
    setting: str  # its value, for tables and legends, e.g. "0.05 GiB"
    run: LoadTestRun
    samples: list[MetricsSample] = field(repr=False)  # /metrics polled during the run
    max_num_seqs: int | None = None  # the server's cap (None: vLLM's default)
    other_servers: int = 0  # other vLLM servers seen on this machine when the run started or ended

    @property
    def summary(self) -> RunSummary:
        """The client's numbers: throughput, latency percentiles (see helpers.load.summary)."""
        return self.run.summary

    @property
    def engine(self) -> MetricsSummary:
        """The engine's numbers: peak running / waiting, KV usage, preemptions during the run."""
        return summarize_samples(self.samples, self.max_num_seqs)

    @property
    def kv_cache(self) -> dict[str, Any] | None:
        """The KV pool the server reported at start-up (tokens, blocks, maximum concurrency)."""
        return self.run.server.kv_cache

    @property
    def num_preemptions(self) -> int:
        return int(counter_delta(self.samples, "num_preemptions"))

    @property
    def prefix_cache_queries(self) -> int:
        """Prompt tokens the engine looked up in its prefix cache during the run."""
        return int(counter_delta(self.samples, "prefix_cache_queries"))

    @property
    def prefix_cache_hits(self) -> int:
        """Of those, tokens whose KV was found there (not computed again)."""
        return int(counter_delta(self.samples, "prefix_cache_hits"))

    @property
    def prefix_hit_rate(self) -> float | None:
        """hits / queries over the run; None when nothing was looked up (prefix caching off)."""
        queries = self.prefix_cache_queries
        return self.prefix_cache_hits / queries if queries else None

    def as_setting(self, lever: str, setting: str) -> Measurement:
        """The same run under another name, e.g. the baseline as the "64" of the max_num_seqs lever."""
        return replace(self, lever=lever, setting=setting)

    def row(self) -> dict[str, Any]:
        """One flat row for tables: units in the names."""
        s, kv = self.summary, self.kv_cache or {}
        return {
            "lever": self.lever, "setting": self.setting,
            "kv_tokens": kv.get("num_tokens"), "max_concurrency": kv.get("max_concurrency"),
            "output_tok_per_s": s.output_tok_per_s, "requests_per_s": s.requests_per_s,
            "e2e_p50_s": s.e2e_p50_s, "e2e_p95_s": s.e2e_p95_s,
            "ttft_p50_s": s.ttft_p50_s, "ttft_p95_s": s.ttft_p95_s,
            "peak_running": self.engine.peak_running, "num_preemptions": self.num_preemptions,
            "prefix_hit_rate": self.prefix_hit_rate, "num_errors": s.num_errors, "wall_s": s.wall_s,
        }


@dataclass(frozen=True)
class CapacityPoint:
    """One server's KV pool: what it was given and what it reported."""

    label: str  # e.g. "0.05 GiB, bf16"
    pool_bytes: int  # the KV memory the server was given
    bytes_per_token: int  # KV bytes one token takes at this KV dtype
    num_tokens: int  # token slots the server reported
    max_concurrency: float  # requests of max_model_len tokens, as the server reported
