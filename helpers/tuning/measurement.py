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

A run the server cut short (it died mid-load) keeps what it measured and says why in
``failure``; a setting that could not be measured at all is :meth:`Measurement.not_run`:

    >>> gone = Measurement.not_run("KV pool", "0.05 GiB", "server did not start: process killed")
    >>> gone.failure, gone.comparable, gone.num_preemptions
    ('not run: server did not start: process killed', False, 0)
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
from helpers.load.run import LoadTestRun, ServerFacts
from helpers.load.summary import RunSummary, describe_failures


@dataclass
class Measurement:
    """One load test of one server setting, with what the engine itself counted meanwhile."""

    lever: str  # which setting this run varies, e.g. "KV pool"
    setting: str  # its value, for tables and legends, e.g. "0.05 GiB"
    run: LoadTestRun
    samples: list[MetricsSample] = field(repr=False)  # /metrics polled during the run
    max_num_seqs: int | None = None  # the server's cap (None: vLLM's default)
    other_servers: int = 0  # other vLLM servers seen on this machine when the run started or ended
    # why the run is not a measurement of the setting: "server died: exit code -9" (what finished
    # before is kept), "not run: ..." (nothing was measured); None for a run that went to its end
    failure: str | None = None
    # output tok/s of every run of the load on this server (``run`` is the median one); one value, or
    # none, where the load ran once
    runs_tok_s: tuple[float, ...] = ()

    @classmethod
    def not_run(cls, lever: str, setting: str, reason: str) -> Measurement:
        """A setting that was planned and not measured (its server did not start, or died before
        the load): no requests, no samples, ``failure`` = "not run: <reason>"."""
        run = LoadTestRun(f"{lever}: {setting}", {"not_run": reason}, ServerFacts("-"), "", "", 0.0, [])
        return cls(lever, setting, run, [], failure=f"not run: {reason}")

    @property
    def comparable(self) -> bool:
        """Whether this run measured its setting: False when it was cut short or not run (its
        numbers then describe the part before the failure, not the setting)."""
        return self.failure is None

    def trouble(self) -> str | None:
        """What went wrong, in words: the failure and the failed requests; None when nothing did.

        >>> Measurement.not_run("KV pool", "2 GiB", "no server").trouble()
        '2 GiB: not run: no server.'
        """
        failed = describe_failures(self.run.records) if self.run.records else None
        if self.failure is None:
            return None if failed is None else f"{self.setting}: {failed}"
        if not self.run.records:
            return f"{self.setting}: {self.failure}."
        s = self.summary
        return (f"{self.setting}: {self.failure}; {s.num_ok} of {s.num_requests} requests finished before it "
                f"(kept), the other {s.num_errors} count as failed.")

    @property
    def spread(self) -> tuple[float, float] | None:
        """The lowest and highest output tok/s of the repeated runs; None where the load ran once.

        >>> m = Measurement.not_run("KV pool", "2 GiB", "x")
        >>> m.spread, replace(m, runs_tok_s=(9.0, 12.0, 10.0)).spread
        (None, (9.0, 12.0))
        """
        return (min(self.runs_tok_s), max(self.runs_tok_s)) if len(self.runs_tok_s) > 1 else None

    @property
    def summary(self) -> RunSummary:
        """The client's numbers: throughput, latency percentiles (see helpers.load.summary)."""
        return self.run.summary

    @property
    def engine(self) -> MetricsSummary:
        """The engine's numbers: peak running / waiting, KV usage, preemptions during the run
        (all 0, with ``num_samples`` 0, for a run without a single sample, e.g. one not run)."""
        if not self.samples:
            return MetricsSummary(0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0, 0.0)
        return summarize_samples(self.samples, self.max_num_seqs)

    @property
    def kv_cache(self) -> dict[str, Any] | None:
        """The KV pool the server reported at start-up (tokens, blocks, maximum concurrency)."""
        return self.run.server.kv_cache

    @property
    def num_preemptions(self) -> int:
        return self._grew("num_preemptions")

    @property
    def prefix_cache_queries(self) -> int:
        """Prompt tokens the engine looked up in its prefix cache during the run."""
        return self._grew("prefix_cache_queries")

    @property
    def prefix_cache_hits(self) -> int:
        """Of those, tokens whose KV was found there (not computed again)."""
        return self._grew("prefix_cache_hits")

    @property
    def prefix_hit_rate(self) -> float | None:
        """hits / queries over the run; None when nothing was looked up (prefix caching off)."""
        queries = self.prefix_cache_queries
        return self.prefix_cache_hits / queries if queries else None

    def _grew(self, counter: str) -> int:
        """How much a counter grew over the run; 0 without samples."""
        return int(counter_delta(self.samples, counter)) if self.samples else 0

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
            "failure": self.failure,
        }


@dataclass(frozen=True)
class CapacityPoint:
    """One server's KV pool: what it was given and what it reported."""

    label: str  # e.g. "0.05 GiB, bf16"
    pool_bytes: int  # the KV memory the server was given
    bytes_per_token: int  # KV bytes one token takes at this KV dtype
    num_tokens: int  # token slots the server reported
    max_concurrency: float  # requests of max_model_len tokens, as the server reported
