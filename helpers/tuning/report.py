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
from helpers.tuning.comparison import NOISE, arrow, compare_measurements, describe_ratio


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
    return "-" if m.prefix_hit_rate is None else f"{m.prefix_hit_rate:.0%}"


def checklist(pairs: Sequence[tuple[Any, Any]], noise: float = NOISE) -> str:
    """A Markdown table: one row per (before, after) pair of
    :class:`~helpers.tuning.measurement.Measurement` objects, before -> after for every
    number this run measured, and a verdict computed from the throughput and p95 ratios
    (changes under ``noise`` are called noise; runs during which another vLLM server ran are
    marked less reliable). Failed requests are counted in the verdict; numbers no request
    measured read "-".
    """
    noise = validate.non_negative_number(noise, "noise", hint="It is a fraction, e.g. 0.25 for 25%.")
    lines = [("| lever | before -> after | output tok/s | p95 end-to-end s | TTFT p50 s | KV tokens | "
             "peak running | preemptions | prefix-cache hits | other vLLM servers | verdict from this run |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for before, after in pairs:
        b, a, c = before.summary, after.summary, compare_measurements(before, after)
        kb, ka = before.kv_cache or {}, after.kv_cache or {}
        lines.append(
            f"| {before.lever} | {before.setting} -> {after.setting} "
            f"| {arrow(b.output_tok_per_s, a.output_tok_per_s, '.0f')} "
            f"| {arrow(b.e2e_p95_s, a.e2e_p95_s, '.1f')} "
            f"| {arrow(b.ttft_p50_s, a.ttft_p50_s, '.2f')} "
            f"| {arrow(kb.get('num_tokens'), ka.get('num_tokens'), ',')} "
            f"| {before.engine.peak_running} -> {after.engine.peak_running} "
            f"| {before.num_preemptions} -> {after.num_preemptions} "
            f"| {_hit_rate(before)} -> {_hit_rate(after)} "
            f"| {before.other_servers} -> {after.other_servers} "
            f"| {describe_ratio(c.throughput_ratio, 'throughput', noise)}; "
            f"{describe_ratio(c.e2e_p95_ratio, 'p95', noise)}"
            f"{' (machine shared: less reliable)' if before.other_servers or after.other_servers else ''}"
            f"{_failed_note(b, a)} |")
    return "\n".join(lines)
