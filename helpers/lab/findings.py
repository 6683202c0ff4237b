"""The sentences of the lab's explanation, one function per effect, each computed from the numbers.

Pure text: every function takes the two settings' pooled rows (:class:`helpers.lab.table.ResultRow`,
``low`` and ``high``) and returns sentences whose conclusion follows the numbers, with
branches where it flips (a step time that grew in proportion to the batch is said to have
bought little; one that hardly grew is where batching pays). :mod:`helpers.lab.explain`
decides which findings a run has the numbers for and puts them in order.

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

NEAR_LINEAR = 0.875  # of the linear speed-up (7x of 8x) counts as near-linear
CHANGE = 0.10  # relative change below which a latency is "about the same"
STALL = 3.0  # p99 / median gap between tokens from which decode counts as stalled by prefill


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
    n = high.summary.num_requests
    ceiling = min(b, n) / min(a, n) if n else linear  # n requests: at most n run at once
    what = f"max_num_seqs={b} gave {speedup:.2f}x the output tokens/s of max_num_seqs={a}"
    if speedup >= NEAR_LINEAR * linear:
        return f"{what}: near-linear scaling ({linear:g}x would be linear)."
    if 1.15 < ceiling < linear and speedup >= 0.85 * ceiling:
        return f"{what}: close to the {ceiling:.2f}x that {n} requests allow, short of linear ({linear:g}x)."
    if speedup >= 1.15:
        return f"{what}: sub-linear, {speedup / linear:.0%} of the {linear:g}x that linear scaling would give."
    if speedup > 0.9:
        return f"{what}: no real gain from {b / a:g}x the slots."
    return f"{what}: throughput fell with more slots."


def throughput_text(low: ResultRow, high: ResultRow, speedup: float, linear: float) -> str:
    a, b = low.max_num_seqs, high.max_num_seqs
    lo, hi = low.summary, high.summary
    text = (f"Output throughput was {_tok_s_with_range(lo)} at {a} and {_tok_s_with_range(hi)} at {b}: "
            f"{speedup:.2f}x, where {b / a:g}x the slots would give {linear:g}x if every step cost the same "
            f"however many requests it carries.")
    low_range, high_range = lo.range_of("output_tok_per_s"), hi.range_of("output_tok_per_s")
    if low_range is not None and high_range is not None:
        if high_range[0] <= low_range[1]:
            text += " The repetitions' ranges overlap, so the difference is within run-to-run noise."
        else:
            text += " The ranges do not overlap: the gain is larger than the run-to-run noise."
    return text


def latency_text(low: ResultRow, high: ResultRow) -> str:
    a, b = low.max_num_seqs, high.max_num_seqs
    lo, hi = low.summary, high.summary
    p95_low, p95_high = lo.e2e_p95_s, hi.e2e_p95_s
    change = (p95_high - p95_low) / p95_low
    text = f"p95 end-to-end latency went from {p95_low:.1f} s at {a} to {p95_high:.1f} s at {b} ({change:+.0%})"
    if change < -CHANGE:
        text += "."
        if lo.ttft_p95_s:
            text += (f" At {a} the slowest requests were mostly waiting: their p95 time to first token was "
                     f"{lo.ttft_p95_s:.1f} s, {lo.ttft_p95_s / p95_low:.0%} of the p95 latency, time spent queued "
                     f"for a slot while earlier requests finished.")
            n = hi.num_requests
            text += (f" At {b} no request waits for a slot." if n and n <= b else
                     f" At {b} fewer requests wait for a slot.")
    elif change > CHANGE:
        text += (f": more requests share every step, so each step is slower for everyone, and at {b} this "
                 f"cost more than the queueing it removed.")
    else:
        text += ": about the same. Removing the wait for a slot was paid for by slower shared steps."
    p50_low, p50_high = lo.e2e_p50_s, hi.e2e_p50_s
    if p50_low and p50_high:
        p50_change = (p50_high - p50_low) / p50_low
        if p50_change > CHANGE and change < -CHANGE:
            text += (f" The median went the other way ({p50_low:.1f} -> {p50_high:.1f} s): at {a} early requests "
                     f"finished fast and late ones waited; at {b} everyone runs together and finishes together.")
        else:
            text += f" The median went from {p50_low:.1f} to {p50_high:.1f} s ({p50_change:+.0%})."
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
        text += (f" Not all {min(n, b)} overlapped: prompts are admitted a chunk of prefill at a time, and the "
                 f"first requests finished before the last ones started generating.")
    if peak_low < a:
        text += f" At {a} the slots were not always full (peak {peak_low})."
    return text


def step_text(low: ResultRow, high: ResultRow, growth: float, speedup: float | None) -> str:
    a, b = low.max_num_seqs, high.max_num_seqs
    batch = batch_growth(low.summary, high.summary)
    tpot_low, tpot_high = low.summary.tpot_mean_ms, high.summary.tpot_mean_ms
    text = (f"The mean time per output token (one decode step, as each request sees it) was {tpot_low:.3g} ms at "
            f"{a} and {tpot_high:.3g} ms at {b}: {growth:.2f}x longer for a {batch:.2f}x larger batch. Tokens/s "
            f"per running request fell from {1000 / tpot_low:.1f} to {1000 / tpot_high:.1f}.")
    if growth >= 0.75 * batch:
        text += (" Step time grew almost in proportion to the batch, so a larger batch bought little: "
                 "the hardware was already busy with the smaller one.")
    elif growth <= 1.5:
        text += (" Step time hardly grew: a step for many requests cost about as much as for a few, "
                 "which is where batching pays (memory-bound decode).")
    else:
        text += (" Step time grew, but less than the batch: part of each step (reading the weights) "
                 "is shared by all the requests in it.")
    expected = batch / growth
    text += f" Batch growth over step growth predicts {expected:.2f}x the throughput"
    if speedup is None:
        text += "."
    elif abs(expected - speedup) / speedup <= 0.2:
        text += f"; measured {speedup:.2f}x, consistent: slots used and step cost account for the gain."
    else:
        text += f"; measured {speedup:.2f}x, so other effects (below) matter too."
    return text


def prefill_text(low: ResultRow, high: ResultRow) -> str:
    b, hi = high.max_num_seqs, high.summary
    prompt, output = hi.prompt_tokens_total, hi.output_tokens_total
    share = prompt / output
    text = (f"The prompts carry {prompt:,.0f} tokens (chat template included) against {output:,.0f} generated "
            f"tokens: prefill is {share:.1f}x the decode tokens, ")
    if share >= 1:
        text += "most of the tokens processed, "
    text += ("and it is the same work at every max_num_seqs: more slots cannot make it smaller, only "
             "decode steps gain from a bigger batch.")
    if hi.ttft_p50_s is not None and hi.ttft_p95_s is not None:
        text += (f" vLLM runs prompt chunks in the same steps as other requests' decoding, so at {b} the first "
                 f"token came after {hi.ttft_p50_s:.1f} s (p50) and {hi.ttft_p95_s:.1f} s (p95)")
        text += (f", {hi.ttft_p95_s / hi.e2e_p95_s:.0%} of the p95 latency." if hi.e2e_p95_s else ".")
    itl_p50, itl_p99 = hi.itl_p50_ms, hi.itl_p99_ms
    if itl_p50 and itl_p99:
        stall = itl_p99 / itl_p50
        if stall >= STALL:
            text += (f" Steps that carried a prefill chunk stalled the requests already decoding: the slowest 1% of "
                     f"gaps between tokens took {itl_p99:,.0f} ms or more, {stall:.0f}x the median gap of "
                     f"{itl_p50:.0f} ms.")
        else:
            text += (f" Decode was not visibly stalled by prefill: even the slowest 1% of gaps between tokens "
                     f"({itl_p99:,.0f} ms) stayed within {STALL:g}x the median gap ({itl_p50:.0f} ms).")
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
                 f"({need_blocks / capacity:.0%} of the pool; a request's last block is partly empty)")
        fits = need_blocks <= capacity
    else:
        text += f". All {n} requests at once need {need:,} tokens ({need / pool:.0%} of the pool)"
        fits = need <= pool
    if fits:
        text += (". So the KV cache never limited the batch here: PagedAttention hands out blocks as tokens "
                 "arrive, and every request fit.")
    else:
        text += (". They do not all fit: the scheduler has to keep requests waiting, or preempt running ones, "
                 "so KV capacity limited the batch, not max_num_seqs.")
    if mml:
        naive = n * mml
        text += f" A naive allocator reserving max_model_len = {mml:,} tokens per request would need {naive:,}"
        if naive > pool:
            text += (f", more than the pool: it could hold only {pool // mml} requests at once "
                     f"(fewer than {min(n, high_seqs)}), where paging holds them all"
                     + ("." if fits else " that fit."))
        else:
            text += ", which would also fit in this pool: memory is not the constraint in this lab."
    return text


def hardware_text(device: str, growth: float | None, low: ResultRow, high: ResultRow,
                  cpu_count: int | None) -> str:
    batch = batch_growth(low.summary, high.summary)
    proportional = growth is not None and batch is not None and growth >= 0.75 * batch
    if device == "cpu":
        cores = f"{cpu_count} CPU cores" if cpu_count else "CPU cores"
        text = (f"On {cores} the model's matrix multiplications are compute-bound: a step over k requests does "
                "about k times the arithmetic on the same cores, unlike a GPU, where a decode step for a few "
                "requests mostly waits for weights to arrive from memory and more requests ride along almost free.")
        if growth is not None:
            text += (" The measured step growth agrees." if proportional else
                     f" Here step time grew {growth:.2f}x for a {batch:.2f}x batch, less than proportionally: "
                     "some per-step work (weights, Python overhead) is shared.")
        return text
    text = ("On a GPU, a decode step has a fixed cost the whole batch shares: reading every weight once (most of "
            "a step for a large model) and the host's work of scheduling, launching kernels and streaming tokens "
            "(most of a step for a small one), so more requests per step cost little until the GPU or the host "
            "saturates.")
    if growth is not None:
        text += (f" Yet here step time grew {growth:.2f}x for a {batch:.2f}x batch: the GPU (or the server "
                 "process feeding it) was saturated." if proportional else
                 f" Here step time grew only {growth:.2f}x for a {batch:.2f}x batch, as expected.")
    return text


def batch_growth(low: RunSummary, high: RunSummary) -> float | None:
    """How many times more requests generated at once at the high setting; None where a peak is 0."""
    return ratio(high.peak_generating, low.peak_generating) if high.peak_generating else None


def ratio(top: float | None, bottom: float | None) -> float | None:
    """``top / bottom``, or None when either is missing or ``bottom`` is 0.

    >>> ratio(3.0, 2.0), ratio(None, 2.0), ratio(3.0, 0)
    (1.5, None, None)
    """
    return top / bottom if top is not None and bottom else None


def _tok_s_with_range(summary: RunSummary) -> str:
    """Output tok/s, with the runs' range when several runs were pooled: "160 tok/s (runs: 152-168)"."""
    spread = summary.range_of("output_tok_per_s")
    if spread is not None:
        return f"{summary.output_tok_per_s:.0f} tok/s (runs: {spread[0]:.0f}-{spread[1]:.0f})"
    return f"{summary.output_tok_per_s:.0f} tok/s"
