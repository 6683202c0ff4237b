"""From raw load-test records to one typed summary: pure functions, units in the field names.

:func:`summarize` is the only place the course turns records into numbers (a
:class:`RunSummary`), after vLLM's serve benchmark (``calculate_metrics``). A run computes
it once (:attr:`helpers.load.run.LoadTestRun.summary`); tables, plots and explanations read
its fields. Latencies are in seconds (``_s``: on a CPU they are
seconds long); per-token times in milliseconds (``_ms``). Percentiles are numpy's default
(linear interpolation), over the requests that succeeded; errors are counted, never dropped.

Definitions (client clock):

- wall_s: first send -> last request returned (ok or not); throughputs divide by it.
- output_tok_per_s: output tokens of the successful requests / wall_s.
- ttft: send -> first token; e2e: send -> last token.
- tpot (time per output token): (e2e - ttft) / (output_tokens - 1), per request, then the mean.
- itl: gaps between successive streamed tokens, pooled over requests.
- peak_generating: most requests that were between their first and last token at one
  instant; a lower bound on the server's running batch (a request also runs during its prefill).

What it leaves out: per-second time series. :func:`percentile_interval` bounds a percentile by the
bootstrap; goodput against latency targets is :mod:`helpers.load.slo`.

Example::

    >>> from helpers.load.client import RequestRecord
    >>> records = [RequestRecord(0, ok=True, output_tokens=3, send_s=0.0, ttft_s=1.0, e2e_s=2.0, done_s=2.0),
    ...            RequestRecord(1, ok=False, error="boom", send_s=0.0, done_s=1.0)]
    >>> s = summarize(records)
    >>> s.num_ok, s.num_errors, s.output_tok_per_s, s.tpot_mean_ms
    (1, 1, 1.5, 500.0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

PERCENTILES = (50, 95, 99)
SPREAD = ("output_tok_per_s", "e2e_p95_s", "e2e_p50_s", "ttft_p95_s", "ttft_p50_s", "requests_per_s")


@dataclass(frozen=True)
class RunSummary:
    """One run's numbers (or the mean of several runs of one setting, see :func:`pool_summaries`).

    Latencies in seconds (``_s``), per-token times in milliseconds (``_ms``); None where no
    successful request gave the number. ``spread`` holds the (min, max) over the runs of the
    throughput and the p50/p95 latencies when several runs were pooled.
    """

    num_requests: int
    num_ok: int
    num_errors: int
    wall_s: float
    prompt_tokens_total: int
    output_tokens_total: int
    output_tok_per_s: float | None
    requests_per_s: float | None
    e2e_mean_s: float | None
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    e2e_p99_s: float | None
    ttft_mean_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    tpot_mean_ms: float | None
    itl_mean_ms: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    itl_p99_ms: float | None
    itl_max_ms: float | None
    peak_generating: int
    peak_in_flight: int
    num_runs: int = 1
    spread: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def range_of(self, name: str) -> tuple[float, float] | None:
        """(min, max) of a pooled number over the runs; None for a single run or a number not pooled."""
        return self.spread.get(name) if self.num_runs > 1 else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, for results files."""
        data = asdict(self)
        data["spread"] = {name: list(pair) for name, pair in self.spread.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSummary:
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["spread"] = {name: (float(lo), float(hi)) for name, (lo, hi) in (data.get("spread") or {}).items()}
        return cls(**values)



def percentile(values: Sequence[float], q: float) -> float | None:
    """numpy's percentile (linear interpolation); None for no values.

    >>> percentile([1, 2, 3, 4], 50)
    2.5
    """
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def percentile_interval(values: Sequence[float], q: float, *, level: float = 0.9, resamples: int = 2000,
                        seed: int = 0) -> tuple[float, float] | None:
    """A bootstrap interval for the ``q``-th percentile of ``values``: resample them with replacement,
    take each resample's percentile, and keep the middle ``level`` of those. It says how far the percentile
    of another run of the same size could land; None for fewer than two values.

    >>> lo, hi = percentile_interval(list(range(1, 51)), 95)
    >>> lo < percentile(list(range(1, 51)), 95) < hi
    True
    """
    data = np.asarray(values, dtype=float)
    if len(data) < 2:
        return None
    samples = np.random.default_rng(seed).choice(data, size=(resamples, len(data)), replace=True)
    estimates = np.percentile(samples, q, axis=1)
    tail = (1 - level) / 2 * 100
    return float(np.percentile(estimates, tail)), float(np.percentile(estimates, 100 - tail))


def summarize(records: Sequence[Any]) -> RunSummary:
    """The numbers of one run's records (see the module docstring for definitions)."""
    ok = [r for r in records if r.ok]
    starts = [r.send_s for r in records]
    ends = [r.done_s if r.done_s is not None else r.send_s for r in records]
    wall_s = (max(ends) - min(starts)) if records else 0.0
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    tpot = [(r.e2e_s - r.ttft_s) / (r.output_tokens - 1) for r in ok
            if r.output_tokens and r.output_tokens > 1 and r.e2e_s is not None and r.ttft_s is not None]
    itl = [gap for r in ok for gap in r.itl_s]
    summary: dict[str, Any] = {
        "num_requests": len(records),
        "num_ok": len(ok),
        "num_errors": len(records) - len(ok),
        "wall_s": wall_s,
        "prompt_tokens_total": prompt_tokens,
        "output_tokens_total": output_tokens,
        "output_tok_per_s": _rate(output_tokens, wall_s),
        "requests_per_s": _rate(len(ok), wall_s),
    }
    for name, values in (("e2e", e2e), ("ttft", ttft)):
        summary[f"{name}_mean_s"] = _mean(values)
        for q in PERCENTILES:
            summary[f"{name}_p{q}_s"] = percentile(values, q)
    summary["tpot_mean_ms"] = _ms(_mean(tpot))
    summary["itl_mean_ms"] = _ms(_mean(itl))
    summary["itl_p50_ms"] = _ms(percentile(itl, 50))
    summary["itl_p95_ms"] = _ms(percentile(itl, 95))
    summary["itl_p99_ms"] = _ms(percentile(itl, 99))
    summary["itl_max_ms"] = _ms(max(itl)) if itl else None
    summary["peak_generating"] = peak_overlap(
        (r.send_s + r.ttft_s, r.send_s + r.e2e_s) for r in ok if r.ttft_s is not None and r.e2e_s is not None)
    summary["peak_in_flight"] = peak_overlap(zip(starts, ends))
    return RunSummary(**summary)


def describe_failures(records: Sequence[Any], *, max_reasons: int = 3) -> str | None:
    """How many requests failed and why, in words; None when every request succeeded.

    Works on any records with ``ok`` and ``error`` (the client's ``RequestRecord``, or any
    other record of the same shape). Identical errors are counted together, the most frequent first, at most ``max_reasons`` of them.

    >>> from types import SimpleNamespace as R
    >>> records = [R(ok=True, error=None)] * 18 + [R(ok=False, error="ConnectionError: refused")] * 2
    >>> describe_failures(records)
    '2 of 20 requests failed: ConnectionError: refused (2).'
    >>> describe_failures(records[:3]) is None
    True
    """
    failed = [r for r in records if not r.ok]
    if not failed:
        return None
    counts: dict[str, int] = {}
    for r in failed:
        reason = " ".join(str(r.error or "no error message").split())
        counts[reason] = counts.get(reason, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    reasons = "; ".join(f"{reason[:200]} ({n})" for reason, n in ranked[:max_reasons])
    others = len(ranked) - max_reasons
    more = f"; and {others} other error{'s' * (others != 1)}" if others > 0 else ""
    noun = "request" if len(records) == 1 else "requests"
    return f"{len(failed)} of {len(records)} {noun} failed: {reasons}{more}."


def peak_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """Most intervals covering one instant; an interval ending when another starts does not overlap it.

    >>> peak_overlap([(0, 2), (1, 3), (2, 4)])
    2
    """
    events = sorted(ev for start, end in intervals for ev in ((start, 1), (end, -1)))  # -1 sorts first on ties
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def pool_summaries(summaries: Sequence[RunSummary]) -> RunSummary:
    """Repetitions of one setting as one summary: the mean of every number, the spread (min, max)
    of throughput and p50/p95 latencies, peaks of peaks, errors added up, and ``num_runs``.

    >>> runs = [summarize([]), summarize([])]
    >>> pooled = pool_summaries(runs)
    >>> pooled.num_runs, pooled.output_tok_per_s, pooled.range_of("output_tok_per_s")
    (2, None, None)
    """
    if not summaries:
        raise ValueError("pool_summaries needs at least one summary (got none): pass the runs of one setting.")
    pooled: dict[str, Any] = {}
    spread: dict[str, tuple[float, float]] = {}
    for name in (f.name for f in fields(RunSummary) if f.name not in ("num_runs", "spread")):
        values = [getattr(s, name) for s in summaries]
        if any(value is None for value in values):
            pooled[name] = None
            continue
        pooled[name] = float(np.mean(values))
        if name in SPREAD:
            spread[name] = (float(min(values)), float(max(values)))
    for name in ("peak_generating", "peak_in_flight"):  # a peak of peaks, not an average
        pooled[name] = max(int(getattr(s, name)) for s in summaries)
    for name in ("num_requests", "num_ok", "prompt_tokens_total", "output_tokens_total"):
        pooled[name] = int(round(pooled[name]))
    pooled["num_errors"] = sum(s.num_errors for s in summaries)  # errors add up
    return RunSummary(**pooled, num_runs=len(summaries), spread=spread)


def _rate(count: float, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0
