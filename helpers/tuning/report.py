"""The tuning notebook's Markdown tables: the closing :func:`checklist` (one row per lever,
before -> after) and the quantization :func:`memory_table`. Pure: numbers in, text out.

Example::

    >>> from helpers.tuning.arithmetic import LLAMA_31_8B, memory_rows
    >>> print(memory_table(memory_rows(LLAMA_31_8B, 22.0, weights=("fp8",), kv_dtypes=("bf16",))))
    | weights | KV cache | weights, GiB | left for KV, GiB | KV tokens | requests of 2,048 tokens |
    |---|---|---|---|---|---|
    | fp8 | bf16 | 7.48 | 13.52 | 110,765 | 54 |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helpers import validate
from helpers.tuning.arithmetic import MemoryRow
from helpers.tuning.comparison import NOISE, arrow, compare_measurements, describe_ratio, spreads_overlap, stand_in


def memory_table(rows: Sequence[MemoryRow], request_len: int = 2048) -> str:
    """:func:`~helpers.tuning.arithmetic.memory_rows` as a Markdown table."""
    request_len = validate.positive_int(request_len, "request_len")
    lines = [("| weights | KV cache | weights, GiB | left for KV, GiB | KV tokens | "
             f"requests of {request_len:,} tokens |"), "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.weights} | {r.kv_cache} | {r.weight_gib:.2f} | {r.kv_gib:.2f} | {r.kv_tokens:,} | "
                     f"{r.requests_at_len:,} |")
    return "\n".join(lines)


def _failed_note(before: Any, after: Any) -> str:
    """The verdict's note on failed requests of two RunSummary objects, or "" when none failed."""
    failed = [(s.num_errors, s.num_requests) for s in (before, after)]
    if not any(n for n, _ in failed):
        return ""
    return f"; failed requests {failed[0][0]} of {failed[0][1]} -> {failed[1][0]} of {failed[1][1]}"


def _hit_rate(m: Any) -> str:
    return "-" if m is None or m.prefix_hit_rate is None else f"{m.prefix_hit_rate:.0%}"


def _get(summary: Any, name: str) -> Any:
    return None if summary is None else getattr(summary, name)


def _verdict(before: Any, after: Any, noise: float) -> str:
    """The checklist's last column: the ratios in words, or why the pair was not compared."""
    shared = " (machine shared: less reliable)" if before.other_servers or after.other_servers else ""
    if not (before.comparable and after.comparable):
        why = "; ".join(f"{m.setting} {m.failure}" for m in (before, after) if not m.comparable)
        return f"not compared: {why}{shared}"
    c = compare_measurements(before, after)
    overlapping = spreads_overlap(before, after)
    return (f"{describe_ratio(c.throughput_ratio, 'throughput', noise, overlapping)}; "
            f"{describe_ratio(c.e2e_p95_ratio, 'p95', noise)}"
            f"{shared}{_failed_note(before.summary, after.summary)}")


def checklist(pairs: Sequence[tuple[Any, Any]], noise: float = NOISE) -> str:
    """A Markdown table: one row per (before, after) pair of
    :class:`~helpers.tuning.measurement.Measurement` objects, before -> after for every
    number this run measured, and a verdict computed from the throughput and p95 ratios
    (changes under ``noise`` are called noise; runs during which another vLLM server ran are
    marked less reliable). Failed requests are counted in the verdict; numbers no request
    measured read "-". A side not measured (None, not run, or cut short by its server dying)
    shows "-" for every number and the verdict says which side, and why, instead of comparing.
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    lines = [("| lever | before -> after | output tok/s | p95 end-to-end s | TTFT p50 s | KV tokens | "
             "peak running | preemptions | prefix-cache hits | other vLLM servers | verdict from this run |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for before, after in pairs:
        before, after = stand_in(before, after), stand_in(after, before)
        measured = [m if m.comparable else None for m in (before, after)]
        b, a = (m.summary if m is not None else None for m in measured)
        kb, ka = (m.kv_cache or {} if m is not None else {} for m in measured)
        eb, ea = (m.engine.peak_running if m is not None else None for m in measured)
        pb, pa = (m.num_preemptions if m is not None else None for m in measured)
        lines.append(
            f"| {before.lever} | {before.setting} -> {after.setting} "
            f"| {arrow(_get(b, 'output_tok_per_s'), _get(a, 'output_tok_per_s'), '.0f', missing_one=True)} "
            f"| {arrow(_get(b, 'e2e_p95_s'), _get(a, 'e2e_p95_s'), '.1f')} "
            f"| {arrow(_get(b, 'ttft_p50_s'), _get(a, 'ttft_p50_s'), '.2f')} "
            f"| {arrow(kb.get('num_tokens'), ka.get('num_tokens'), ',', missing_one=True)} "
            f"| {arrow(eb, ea, 'd', missing_one=True)} "
            f"| {arrow(pb, pa, 'd', missing_one=True)} "
            f"| {_hit_rate(measured[0])} -> {_hit_rate(measured[1])} "
            f"| {before.other_servers} -> {after.other_servers} "
            f"| {_verdict(before, after, noise)} |")
    return "\n".join(lines)
