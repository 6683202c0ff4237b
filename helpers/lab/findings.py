"""The sentences of the lab's explanation, one function per effect, each computed from the numbers.

Pure text: every function takes the two settings' pooled rows (:class:`helpers.lab.table.ResultRow`,
``low`` and ``high``) and returns sentences whose conclusion follows the numbers, with
branches where it flips (ranges that overlap make a gain noise; a latency that fell is put down to
waiting for a slot only where the time to first token was most of it). The per-step cost and the
hardware, both read from step growth against batch growth, are :mod:`helpers.lab.step_cost`.
:mod:`helpers.lab.explain` decides which findings a run has the numbers for and puts them in order.

Example::

    >>> from dataclasses import replace
    >>> from helpers.lab.table import ResultRow
    >>> from helpers.load.summary import summarize
    >>> empty = summarize([])
    >>> low = ResultRow(8, "1 run", replace(empty, num_requests=50, peak_generating=8))
    >>> high = ResultRow(64, "1 run", replace(empty, num_requests=50, peak_generating=50))
    >>> print(slots_text(low, high))  # doctest: +ELLIPSIS
    Only 50 requests exist, so max_num_seqs=64 can run at most 50 at once: 64 acts like 50, ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helpers.lab.table import ResultRow
from helpers.load.summary import RunSummary
from helpers.paged.kv_math import blocks_for
from helpers.units import duration, share

NEAR_LINEAR = 0.875  # of the linear speed-up (7x of 8x) counts as near-linear
CHANGE = 0.10  # relative change below which a latency or a step time is "about the same"
STALL = 3.0  # p99 / median gap between tokens from which decode counts as stalled by prefill
MOSTLY_WAITING = 0.5  # share of the p95 latency spent before the first token from which requests were "mostly waiting"
# Share of a setting's requests that may fail before its batch stops being the setting's own: above it the
# survivors ran in a batch the failures shrank, so the slot, step-cost and hardware findings are left out.
FAILED_SHARE = 0.10


def failed_share(row: ResultRow) -> float:
    """The share of a pooled row's requests that failed (``num_requests`` is per run, ``num_errors`` over all)."""
    total = row.summary.num_requests * row.summary.num_runs
    return row.summary.num_errors / total if total else 0.0


def failed_text(low: ResultRow, high: ResultRow) -> str | None:
    """Failed requests of both settings in words, or None when none failed."""
    parts, clean = [], []
    for row in (low, high):
        errors = row.summary.num_errors
        if errors:
            total = row.summary.num_requests * row.summary.num_runs
            parts.append(f"{errors}{f' of {total}' if total else ''} requests failed at "
                         f"max_num_seqs={row.max_num_seqs}")
        else:
            clean.append(str(row.max_num_seqs))
    if not parts:
        return None
    return (" and ".join(parts) + (f" (none at {clean[0]})" if clean else "")
            + ". Failed requests add no tokens and no latencies: the numbers below describe the requests "
            "that succeeded.")


def headline(low: ResultRow, high: ResultRow, speedup: float | None, linear: float) -> str:
    a, b = low.max_num_seqs, high.max_num_seqs
    if speedup is None:
        return f"No throughput to compare: a setting has no successful requests ({a} vs {b})."
    failures = [f"{row.summary.num_errors} of {row.summary.num_requests * row.summary.num_runs} requests failed "
                f"at max_num_seqs={row.max_num_seqs}" for row in (low, high) if row.summary.num_errors]
    what = f"max_num_seqs={b} gave {speedup:.2f}x the output tokens/s of max_num_seqs={a}"
    if max(failed_share(low), failed_share(high)) > FAILED_SHARE:
        return (f"{what}, but {' and '.join(failures)}: the difference measures the failures, not what more "
                "slots do.")
    text = f"{what}: {_verdict(low, high, speedup, linear)}"
    return text + (f" ({'; '.join(failures)}.)" if failures else "")


def _verdict(low: ResultRow, high: ResultRow, speedup: float, linear: float) -> str:
    """The headline's judgement of the speed-up; where the runs have ranges, they decide what counts as noise."""
    a, b = low.max_num_seqs, high.max_num_seqs
    n = high.summary.num_requests
    ceiling = min(b, n) / min(a, n) if n else linear  # n requests: at most n run at once
    noise = ranges_overlap(low.summary, high.summary)
    overlap = " The runs' throughput ranges overlap, though: this gain is within run-to-run noise." if noise else ""
    if n and n <= a:  # every request had a slot at the smaller setting already: more slots cannot batch more
        return (f"not from batching: all {n} requests fit in {a} slots, so {b} could run no more of them at once "
                "(the most more slots can give here is 1x).")
    if speedup >= NEAR_LINEAR * linear:
        return f"near-linear scaling ({linear:g}x would be linear).{overlap}"
    if 1.15 < ceiling < linear and speedup >= 0.85 * ceiling:
        return f"close to the {ceiling:.2f}x that {n} requests allow, short of linear ({linear:g}x).{overlap}"
    if speedup >= 1.15:
        return f"sub-linear, {speedup / linear:.0%} of the {linear:g}x that linear scaling would give.{overlap}"
    if noise:
        return (f"no real {'gain' if speedup >= 1 else 'difference'} from {b / a:g}x the slots: the runs' "
                "throughput ranges overlap.")
    if noise is False and speedup > 1:
        return (f"a small gain from {b / a:g}x the slots ({speedup / linear:.0%} of the {linear:g}x that linear "
                "scaling would give), larger than the run-to-run noise: the runs' ranges do not overlap.")
    if speedup > 0.9 and noise is None:
        return f"no real gain from {b / a:g}x the slots."
    return "throughput fell with more slots."


def ranges_overlap(low: RunSummary, high: RunSummary) -> bool | None:
    """Whether the two settings' throughput ranges over their runs overlap; None where a setting had one run."""
    low_range, high_range = low.range_of("output_tok_per_s"), high.range_of("output_tok_per_s")
    if low_range is None or high_range is None:
        return None
    return high_range[0] <= low_range[1] and low_range[0] <= high_range[1]


def throughput_text(low: ResultRow, high: ResultRow, speedup: float, linear: float) -> str:
    a, b = low.max_num_seqs, high.max_num_seqs
    lo, hi = low.summary, high.summary
    text = (f"Output throughput was {_tok_s_with_range(lo)} at {a} and {_tok_s_with_range(hi)} at {b}: "
            f"{speedup:.2f}x, where {b / a:g}x the slots would give {linear:g}x if every step cost the same "
            f"however many requests it carries.")
    noise = ranges_overlap(lo, hi)
    if noise is True:
        text += " The repetitions' ranges overlap, so the difference is within run-to-run noise."
    elif noise is False:
        text += (f" The ranges do not overlap: the {'gain' if speedup > 1 else 'difference'} is larger than the "
                 "run-to-run noise.")
    return text


def latency_text(low: ResultRow, high: ResultRow) -> str:
    a, b = low.max_num_seqs, high.max_num_seqs
    lo, hi = low.summary, high.summary
    p95_low, p95_high = lo.e2e_p95_s, hi.e2e_p95_s
    change = (p95_high - p95_low) / p95_low
    n = hi.num_requests
    queued = bool(n) and n > a  # with no more requests than slots at the low setting, nobody waited for one
    tpot = ratio(hi.tpot_mean_ms, lo.tpot_mean_ms)
    slower_steps = tpot is not None and tpot > 1 + CHANGE
    steps = f" (mean time per output token {tpot - 1:+.0%})" if tpot is not None else ""
    text = (f"p95 end-to-end latency went from {duration(p95_low)} at {a} to {duration(p95_high)} at {b} "
            f"({change:+.0%})")
    if change < -CHANGE:
        text += "."
        if lo.ttft_p95_s:
            waited = lo.ttft_p95_s / p95_low
            text += f" At {a} the p95 time to first token was {duration(lo.ttft_p95_s)}, {share(waited)} of the p95 latency"
            text += (": the slowest requests were mostly waiting for their first token" if waited > MOSTLY_WAITING
                     else ": the slowest requests spent more of it generating than waiting")
            text += (", queued for a slot while earlier requests finished." if queued and waited > MOSTLY_WAITING
                     else ".")
            if queued:
                text += (f" At {b} no request waits for a slot." if n <= b else f" At {b} fewer requests wait for a slot.")
    elif change > CHANGE:
        if slower_steps:
            text += f": more requests share every step, so each step is slower for everyone{steps}"
            text += (f", and at {b} this cost more than the queueing it removed." if queued else ".")
        else:
            text += f", though the steps did not get slower{steps}: the extra time is not the cost of sharing steps."
    else:
        text += ": about the same."
        if queued and slower_steps:
            text += f" Removing the wait for a slot was paid for by slower shared steps{steps}."
        elif not queued:
            text += f" No request waited for a slot at either setting ({n} requests, {a} slots)."
    p50_low, p50_high = lo.e2e_p50_s, hi.e2e_p50_s
    if p50_low and p50_high:
        p50_change = (p50_high - p50_low) / p50_low
        if p50_change > CHANGE and change < -CHANGE and queued:
            text += (f" The median went the other way ({duration(p50_low)} -> {duration(p50_high)}): at {a} early "
                     f"requests finished fast and late ones waited; at {b} everyone runs together and finishes together.")
        else:
            text += f" The median went from {duration(p50_low)} to {duration(p50_high)} ({p50_change:+.0%})."
    return text


def slots_text(low: ResultRow, high: ResultRow) -> str:
    a, b = low.max_num_seqs, high.max_num_seqs
    n = high.summary.num_requests
    peak_low, peak_high = low.summary.peak_generating, high.summary.peak_generating
    if n and n < b:
        text = (f"Only {n} requests exist, so max_num_seqs={b} can run at most {n} at once: {b} acts like {n}, "
                f"and the best possible gain is {n}/{min(a, n)} = {n / min(a, n):.2f}x, not {b / a:g}x.")
    else:
        text = f"There were {n} requests for {b} slots, so every slot could be used."
    text += (f" The client saw at most {peak_high} requests generating tokens at the same moment at {b} "
             f"(at {a}: {peak_low}), so the batch grew {peak_high / peak_low:.2f}x.")
    if n and peak_high < 0.9 * min(n, b):
        text += f" Not all {min(n, b)} overlapped: " + _why_not_all_overlapped(high)
    if peak_low < a:
        text += f" At {a} the slots were not always full (peak {peak_low})."
    return text


def prefill_text(low: ResultRow, high: ResultRow) -> str:
    b, hi = high.max_num_seqs, high.summary
    prompt, output = hi.prompt_tokens_total, hi.output_tokens_total
    prefill = prompt / output
    text = (f"The prompts carry {prompt:,.0f} tokens (chat template included) against {output:,.0f} generated "
            f"tokens: prefill is {prefill:.1f}x the decode tokens, ")
    if prefill >= 1:
        text += "most of the tokens processed, "
    text += ("and it is the same work at every max_num_seqs: more slots cannot make it smaller, only "
             "decode steps gain from a bigger batch.")
    if hi.ttft_p50_s is not None and hi.ttft_p95_s is not None:
        text += (f" vLLM runs prompt chunks in the same steps as other requests' decoding, so at {b} the first "
                 f"token came after {duration(hi.ttft_p50_s)} (p50) and {duration(hi.ttft_p95_s)} (p95)")
        text += (f", {share(hi.ttft_p95_s / hi.e2e_p95_s)} of the p95 latency." if hi.e2e_p95_s else ".")
    itl_p50, itl_p99 = hi.itl_p50_ms, hi.itl_p99_ms
    if itl_p50 and itl_p99:
        stall = itl_p99 / itl_p50
        if stall >= STALL:
            text += (f" Steps that carried a prefill chunk stalled the requests already decoding: the slowest 1% of "
                     f"gaps between tokens took {duration(itl_p99 / 1000)} or more, {stall:.0f}x the median gap of "
                     f"{duration(itl_p50 / 1000)}.")
        else:
            text += (f" Decode was not visibly stalled by prefill: even the slowest 1% of gaps between tokens "
                     f"({duration(itl_p99 / 1000)}) stayed within {STALL:g}x the median gap "
                     f"({duration(itl_p50 / 1000)}).")
    return text


def kv_text(kv: dict[str, Any] | None, request_tokens: Sequence[int], max_model_len: int | None,
            high_seqs: int) -> str:
    """The KV pool the server reported (``KVCacheReport`` as a dict) against what the requests need."""
    if not kv or not kv.get("num_tokens"):
        return "The server did not report its KV-cache size, so this effect cannot be checked here."
    pool = int(kv["num_tokens"])
    block = kv.get("block_size")
    mml = max_model_len or kv.get("max_model_len")
    text = f"The server's KV cache holds {pool:,} tokens"
    if block and kv.get("num_blocks"):
        text += f" ({kv['num_blocks']:,} blocks of {block})"
    if not request_tokens:
        return text + "; the requests' sizes are unknown, so the need cannot be compared."
    need = sum(request_tokens)
    n = len(request_tokens)
    if block:
        need_blocks = sum(blocks_for(t, block) for t in request_tokens)
        capacity = int(kv.get("num_blocks") or pool // block)
        text += (f". All {n} requests at once need {need:,} tokens, {need_blocks:,} blocks "
                 f"({share(need_blocks / capacity)} of the pool; a request's last block is partly empty)")
        fits = need_blocks <= capacity
    else:
        text += f". All {n} requests at once need {need:,} tokens ({share(need / pool)} of the pool)"
        fits = need <= pool
    if fits:
        text += (". So the KV cache never limited the batch here: PagedAttention hands out blocks as tokens "
                 "arrive, and every request fit.")
    else:
        text += (". They do not all fit: the scheduler has to keep requests waiting, or preempt running ones, "
                 "so KV capacity limited the batch, not max_num_seqs.")
    if mml:
        naive, held = n * mml, pool // mml
        running = min(n, high_seqs)  # the most requests this setting runs at once
        text += f" A naive allocator reserving max_model_len = {mml:,} tokens per request would need {naive:,}"
        if held >= n:
            text += ", which would also fit in this pool: memory is not the constraint in this lab."
        elif held < running:
            text += (f", more than the pool: it could hold only {held} requests at once "
                     f"(fewer than {running}), where paging holds them all" + ("." if fits else " that fit."))
        else:
            text += (f", more than the pool, but it could still hold {held} requests at once, no fewer than the "
                     f"{running} that max_num_seqs={high_seqs} runs at once: at this setting the reservation "
                     "would not have limited the batch either.")
    return text


def ratio(top: float | None, bottom: float | None) -> float | None:
    """``top / bottom``, or None when either is missing or ``bottom`` is 0.

    >>> ratio(3.0, 2.0), ratio(None, 2.0), ratio(3.0, 0)
    (1.5, None, None)
    """
    return top / bottom if top is not None and bottom else None


def _why_not_all_overlapped(high: ResultRow) -> str:
    """Why fewer requests generated at once than the setting allows, as far as the numbers show it."""
    hi = high.summary
    if hi.num_errors:
        return f"{hi.num_errors} requests failed at {high.max_num_seqs}, and a failed request never generates."
    if hi.ttft_p95_s is not None and hi.e2e_p50_s is not None and hi.ttft_p95_s > hi.e2e_p50_s:
        # With every request sent at once, a p95 first token after the median finish means the
        # slowest twentieth started generating after half of the requests had finished.
        text = (f"the first requests finished before the last ones started generating (p95 time to first token "
                f"{duration(hi.ttft_p95_s)}, median end-to-end {duration(hi.e2e_p50_s)})")
        if hi.num_requests <= (high.max_num_seqs or 0):
            text += (": with a slot for every request, what held the last ones back was prefill, which vLLM admits "
                     "a chunk at a time, or KV space (see the KV-cache finding)")
        return text + "."
    return ("some requests were not generating while others were (still in prefill or already done); these "
            "numbers do not show which.")


def _tok_s_with_range(summary: RunSummary) -> str:
    """Output tok/s, with the runs' range when several runs were pooled: "160 tok/s (runs: 152-168)"."""
    spread = summary.range_of("output_tok_per_s")
    if spread is not None:
        return f"{summary.output_tok_per_s:.0f} tok/s (runs: {spread[0]:.0f}-{spread[1]:.0f})"
    return f"{summary.output_tok_per_s:.0f} tok/s"
