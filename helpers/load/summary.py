"""From raw load-test records to one flat summary: a pure function, units in the field names.

:func:`summarize` is the only place the course turns records into numbers, after vLLM's
serve benchmark (``calculate_metrics``). Latencies are in seconds (``_s``: on a CPU they are
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

What it leaves out: goodput against latency targets, per-second time series.

Example::

    >>> from helpers.load.loadtest import RequestRecord
    >>> records = [RequestRecord(0, ok=True, output_tokens=3, send_s=0.0, ttft_s=1.0, e2e_s=2.0, done_s=2.0),
    ...            RequestRecord(1, ok=False, error="boom", send_s=0.0, done_s=1.0)]
    >>> s = summarize(records)
    >>> s["num_ok"], s["num_errors"], s["output_tok_per_s"], s["tpot_mean_ms"]
    (1, 1, 1.5, 500.0)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

PERCENTILES = (50, 95, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """numpy's percentile (linear interpolation); None for no values.

    >>> percentile([1, 2, 3, 4], 50)
    2.5
    """
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def summarize(records: Sequence[Any]) -> dict[str, Any]:
    """One flat dict of numbers for one run's records (see the module docstring for definitions)."""
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
    return summary


def describe_failures(records: Sequence[Any], *, max_reasons: int = 3) -> str | None:
    """How many requests failed and why, in words; None when every request succeeded.

    Works on any records with ``ok`` and ``error`` (the load tester's, the step-time
    measurements' ``TimedRequest``, the KV demo's ``TokenRequestRecord``). Identical errors
    are counted together, the most frequent first, at most ``max_reasons`` of them.

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


def pool_summaries(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Repetitions of one setting as one row: the mean of every number, plus ``_min`` / ``_max``
    of throughput and p95 latency, and ``num_runs``.

    >>> pool_summaries([{"output_tok_per_s": 90.0}, {"output_tok_per_s": 110.0}])["output_tok_per_s_min"]
    90.0
    """
    assert summaries, "nothing to pool"
    pooled: dict[str, Any] = {"num_runs": len(summaries)}
    for key in summaries[0]:
        values = [s[key] for s in summaries if isinstance(s.get(key), (int, float))]
        if values and len(values) == len(summaries):
            pooled[key] = float(np.mean(values))
            if key in ("output_tok_per_s", "e2e_p95_s", "e2e_p50_s", "ttft_p95_s", "ttft_p50_s", "requests_per_s"):
                pooled[f"{key}_min"], pooled[f"{key}_max"] = float(min(values)), float(max(values))
        else:
            pooled[key] = None
    for key in ("peak_generating", "peak_in_flight"):  # a peak of peaks, not an average
        if pooled.get(key) is not None:
            pooled[key] = max(int(s[key]) for s in summaries)
    for key in ("num_requests", "num_ok", "prompt_tokens_total", "output_tokens_total"):
        if isinstance(pooled.get(key), float):
            pooled[key] = int(round(pooled[key]))
    pooled["num_errors"] = sum(int(s.get("num_errors") or 0) for s in summaries)  # errors add up
    return pooled


def _rate(count: float, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0
