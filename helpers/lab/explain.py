"""Why throughput did (not) scale 8x: the lab's explanation, written from the measured numbers.

:func:`explain` takes the pooled summaries of the low and high setting (``max_num_seqs`` 8
and 64 in the lab) plus what the server reported, and writes one finding per effect. Every
sentence is computed from the numbers, and each effect has branches where the conclusion
can flip (a near-linear speed-up is called near-linear; a KV cache too small to hold the
requests is said to be the limit). The effects:

1. requests, not slots: only N requests exist, so 64 slots act like N; read the peak
   number of requests actually generating at once;
2. per-step cost: a step over more sequences takes longer, so tokens/s per running
   request falls;
3. prefill interleaves with decode: long prompts are the same work at 8 and 64, and their
   chunks slow the decode steps they share (TTFT and inter-token stalls at 64);
4. KV-cache capacity, in tokens and blocks, as the server reported it, against what the
   requests need (and what a naive max_model_len reservation would need);
5. the hardware: on a CPU, steps are compute-bound.

:func:`explain_runs` builds the inputs from saved runs. The ``check_*`` functions give a
learner feedback on numbers they computed themselves; they print and never raise.

Taught in ``labs/01_concurrency_lab.ipynb``; the instructor's worked solution is
``docs/solutions/01_concurrency_lab.md``.

Example::

    >>> low = {"max_num_seqs": 8, "num_requests": 50, "output_tok_per_s": 100.0, "peak_generating": 8}
    >>> high = {"max_num_seqs": 64, "num_requests": 50, "output_tok_per_s": 720.0, "peak_generating": 50}
    >>> "near-linear" in explain(low, high).headline
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from helpers.paged.kv_math import blocks_for
from helpers.load.summary import describe_failures, percentile, pool_summaries, summarize

NEAR_LINEAR = 0.875  # of the linear speed-up (7x of 8x) counts as near-linear
CHANGE = 0.10  # relative change below which a latency is "about the same"
STALL = 3.0  # p99 / median gap between tokens from which decode counts as stalled by prefill


@dataclass(frozen=True)
class Finding:
    effect: str  # short name of the effect, e.g. "per-step cost"
    text: str  # sentences built from the numbers


@dataclass
class Explanation:
    headline: str
    findings: list[Finding] = field(default_factory=list)

    def markdown(self) -> str:
        parts = [f"**{self.headline}**"] + [f"- **{f.effect}.** {f.text}" for f in self.findings]
        return "\n\n".join(parts)

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __str__(self) -> str:
        return "\n\n".join([self.headline] + [f"{f.effect}: {f.text}" for f in self.findings])

    def effect(self, name: str) -> Finding | None:
        return next((f for f in self.findings if f.effect == name), None)


def explain(
    low: dict[str, Any],
    high: dict[str, Any],
    *,
    device: str | None = None,
    kv_cache: dict[str, Any] | None = None,
    request_kv_tokens: Sequence[int] = (),
    max_model_len: int | None = None,
    cpu_count: int | None = None,
) -> Explanation:
    """The explanation for two settings' pooled summaries (each with ``max_num_seqs``).

    ``kv_cache``: the server's KVCacheReport as a dict; ``request_kv_tokens``: prompt +
    output tokens of each request of one run (what the KV cache must hold).
    Missing numbers drop the findings that need them; they are never made up. Failed
    requests (``num_errors``) get a finding of their own, first: every number here is
    computed from the requests that succeeded.
    """
    low_seqs, high_seqs = int(low["max_num_seqs"]), int(high["max_num_seqs"])
    assert low_seqs < high_seqs, (low_seqs, high_seqs)
    linear = high_seqs / low_seqs
    speedup = _ratio(high.get("output_tok_per_s"), low.get("output_tok_per_s"))
    explanation = Explanation(_headline(low, high, speedup, linear))
    add = explanation.findings.append
    failed = _failed_text(low, high)
    if failed:
        add(Finding("failed requests", failed))
    if speedup is not None:
        add(Finding("throughput", _throughput_text(low, high, speedup, linear)))
    if low.get("e2e_p95_s") and high.get("e2e_p95_s"):
        add(Finding("latency", _latency_text(low, high)))
    if high.get("peak_generating") and low.get("peak_generating"):
        add(Finding("requests, not slots", _slots_text(low, high, linear)))
    growth = _ratio(high.get("tpot_mean_ms"), low.get("tpot_mean_ms"))
    if growth is not None and high.get("peak_generating") and low.get("peak_generating"):
        add(Finding("per-step cost", _step_text(low, high, growth, speedup)))
    if high.get("prompt_tokens_total") and high.get("output_tokens_total"):
        add(Finding("prefill interleaves with decode", _prefill_text(low, high)))
    add(Finding("KV-cache capacity", _kv_text(kv_cache, request_kv_tokens, max_model_len, high_seqs)))
    if device:
        add(Finding("the hardware", _hardware_text(device, growth, low, high, cpu_count)))
    return explanation


def explain_runs(runs: Sequence[Any], low_seqs: int | None = None, high_seqs: int | None = None) -> Explanation:
    """:func:`explain` for saved runs (``LoadTestRun``), pooling the repetitions of each setting.

    Default: the lowest and the highest ``max_num_seqs`` among the runs.
    """
    groups: dict[int, list[Any]] = {}
    for run in runs:
        groups.setdefault(run.max_num_seqs, []).append(run)
    settings = sorted(s for s in groups if s is not None)
    assert len(settings) >= 2, f"need runs at two settings, got {settings}"
    low_seqs = settings[0] if low_seqs is None else low_seqs
    high_seqs = settings[-1] if high_seqs is None else high_seqs
    pooled = {}
    for seqs in (low_seqs, high_seqs):
        pooled[seqs] = {"max_num_seqs": seqs, **pool_summaries([summarize(r.records) for r in groups[seqs]])}
    reference = groups[high_seqs][0]
    tokens = [(r.prompt_tokens or 0) + (r.output_tokens or 0) for r in reference.records if r.ok]
    explanation = explain(
        pooled[low_seqs], pooled[high_seqs],
        device=reference.server.get("device"), kv_cache=reference.server.get("kv_cache"),
        request_kv_tokens=tokens, max_model_len=reference.server.get("max_model_len"),
        cpu_count=_cores(reference.hardware),
    )
    from helpers.lab.results import random_weights_note  # here: results imports the load tester

    failed = explanation.effect("failed requests")
    if failed is not None:
        reasons = [f"At {seqs}: {text}" for seqs in (low_seqs, high_seqs)
                   if (text := describe_failures([r for run in groups[seqs] for r in run.records]))]
        index = explanation.findings.index(failed)
        explanation.findings[index] = Finding(failed.effect, " ".join([failed.text, *reasons]))
    note = random_weights_note(runs)
    if note is not None:
        explanation.findings.insert(0, Finding("the model", note))
    return explanation


# ----- the findings ----------------------------------------------------------------------------
def _failed_text(low, high) -> str | None:
    """Failed requests of both settings in words, or None when none failed (or none were counted).

    >>> print(_failed_text({"max_num_seqs": 8, "num_errors": 0}, {"max_num_seqs": 64, "num_errors": 3,
    ...                    "num_requests": 50, "num_runs": 2}))  # doctest: +ELLIPSIS
    3 of 100 requests failed at max_num_seqs=64 (none at 8). Failed requests add no tokens and no latencies: ...
    """
    parts, clean = [], []
    for summary in (low, high):
        errors = int(summary.get("num_errors") or 0)
        if errors:
            total = summary.get("num_requests")
            total = int(round(total * (summary.get("num_runs") or 1))) if total else None
            parts.append(f"{errors}{f' of {total}' if total else ''} requests failed at "
                         f"max_num_seqs={summary['max_num_seqs']}")
        else:
            clean.append(str(summary["max_num_seqs"]))
    if not parts:
        return None
    return (" and ".join(parts) + (f" (none at {clean[0]})" if clean else "")
            + ". Failed requests add no tokens and no latencies: the numbers below describe the requests "
            "that succeeded.")


def _headline(low, high, speedup, linear) -> str:
    a, b = low["max_num_seqs"], high["max_num_seqs"]
    if speedup is None:
        return f"No throughput to compare: a setting has no successful requests ({a} vs {b})."
    n = high.get("num_requests") or 0
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


def _throughput_text(low, high, speedup, linear) -> str:
    a, b = low["max_num_seqs"], high["max_num_seqs"]
    text = (f"Output throughput was {_rng(low, 'output_tok_per_s', 'tok/s')} at {a} and "
            f"{_rng(high, 'output_tok_per_s', 'tok/s')} at {b}: {speedup:.2f}x, where {b / a:g}x the slots "
            f"would give {linear:g}x if every step cost the same however many requests it carries.")
    low_max, high_min = low.get("output_tok_per_s_max"), high.get("output_tok_per_s_min")
    if low_max is not None and high_min is not None:
        if high_min <= low_max:
            text += " The repetitions' ranges overlap, so the difference is within run-to-run noise."
        else:
            text += " The ranges do not overlap: the gain is larger than the run-to-run noise."
    return text


def _latency_text(low, high) -> str:
    a, b = low["max_num_seqs"], high["max_num_seqs"]
    p95_low, p95_high = low["e2e_p95_s"], high["e2e_p95_s"]
    change = (p95_high - p95_low) / p95_low
    text = f"p95 end-to-end latency went from {p95_low:.1f} s at {a} to {p95_high:.1f} s at {b} ({change:+.0%})"
    ttft_low = low.get("ttft_p95_s")
    if change < -CHANGE:
        text += "."
        if ttft_low:
            text += (f" At {a} the slowest requests were mostly waiting: their p95 time to first token was "
                     f"{ttft_low:.1f} s, {ttft_low / p95_low:.0%} of the p95 latency, time spent queued for a slot "
                     f"while earlier requests finished.")
            n = high.get("num_requests") or 0
            text += (f" At {b} no request waits for a slot." if n and n <= b else
                     f" At {b} fewer requests wait for a slot.")
    elif change > CHANGE:
        text += (f": more requests share every step, so each step is slower for everyone, and at {b} this "
                 f"cost more than the queueing it removed.")
    else:
        text += ": about the same. Removing the wait for a slot was paid for by slower shared steps."
    p50_low, p50_high = low.get("e2e_p50_s"), high.get("e2e_p50_s")
    if p50_low and p50_high:
        p50_change = (p50_high - p50_low) / p50_low
        if p50_change > CHANGE and change < -CHANGE:
            text += (f" The median went the other way ({p50_low:.1f} -> {p50_high:.1f} s): at {a} early requests "
                     f"finished fast and late ones waited; at {b} everyone runs together and finishes together.")
        else:
            text += f" The median went from {p50_low:.1f} to {p50_high:.1f} s ({p50_change:+.0%})."
    return text


def _slots_text(low, high, linear) -> str:
    a, b = low["max_num_seqs"], high["max_num_seqs"]
    n = high.get("num_requests") or 0
    peak_low, peak_high = int(low["peak_generating"]), int(high["peak_generating"])
    if n and n < b:
        text = (f"Only {n} requests exist, so max_num_seqs={b} can run at most {n} at once: {b} acts like {n}, "
                f"and the best possible gain is {n}/{min(a, n)} = {n / min(a, n):.2f}x, not {linear:g}x.")
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


def _step_text(low, high, growth, speedup) -> str:
    a, b = low["max_num_seqs"], high["max_num_seqs"]
    batch = high["peak_generating"] / low["peak_generating"]
    tpot_low, tpot_high = low["tpot_mean_ms"], high["tpot_mean_ms"]
    text = (f"The mean time per output token (one decode step, as each request sees it) was {tpot_low:.0f} ms at "
            f"{a} and {tpot_high:.0f} ms at {b}: {growth:.2f}x longer for a {batch:.2f}x larger batch. Tokens/s "
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


def _prefill_text(low, high) -> str:
    b = high["max_num_seqs"]
    prompt, output = high["prompt_tokens_total"], high["output_tokens_total"]
    share = prompt / output
    text = (f"The prompts carry {prompt:,.0f} tokens (chat template included) against {output:,.0f} generated "
            f"tokens: prefill is {share:.1f}x the decode tokens, ")
    if share >= 1:
        text += "most of the tokens processed, "
    text += ("and it is the same work at every max_num_seqs: more slots cannot make it smaller, only "
             "decode steps gain from a bigger batch.")
    ttft_p50, ttft_p95, e2e_p95 = high.get("ttft_p50_s"), high.get("ttft_p95_s"), high.get("e2e_p95_s")
    if ttft_p50 is not None and ttft_p95 is not None:
        text += (f" vLLM runs prompt chunks in the same steps as other requests' decoding, so at {b} the first "
                 f"token came after {ttft_p50:.1f} s (p50) and {ttft_p95:.1f} s (p95)")
        text += (f", {ttft_p95 / e2e_p95:.0%} of the p95 latency." if e2e_p95 else ".")
    itl_p50, itl_p99 = high.get("itl_p50_ms"), high.get("itl_p99_ms")
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


def _kv_text(kv, request_tokens, max_model_len, high_seqs) -> str:
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


def _hardware_text(device, growth, low, high, cpu_count) -> str:
    batch = (high["peak_generating"] / low["peak_generating"]
             if high.get("peak_generating") and low.get("peak_generating") else None)
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
    text = ("On a GPU, a decode step for a small batch is bound by memory bandwidth (all weights are read "
            "once per step), so more requests per step cost little until compute saturates.")
    if growth is not None:
        text += (f" Yet here step time grew {growth:.2f}x for a {batch:.2f}x batch: the GPU (or the server "
                 "process feeding it) was saturated." if proportional else
                 f" Here step time grew only {growth:.2f}x for a {batch:.2f}x batch, as expected.")
    return text


# ----- learner checks ---------------------------------------------------------------------------
def check_answer(answer: Any, expected: float | None, what: str, rel_tol: float = 0.02, hint: str = "") -> bool:
    """Print feedback on a learner's number (via ``helpers.feedback.check_number``); True when within
    ``rel_tol`` of ``expected``. Never raises."""
    from helpers.feedback import check_number

    try:
        if expected is None and answer is not None:
            print(f"{what}: there is nothing to check against (no successful requests in this run).")
            return False
        return check_number(answer, 0.0 if expected is None else float(expected), name=what,
                            rel_tol=rel_tol, hint=hint)
    except Exception as error:  # noqa: BLE001 - feedback, never a traceback
        print(f"{what}: could not check {answer!r} ({type(error).__name__}: {error}).")
        return False


def check_e2e_percentile(answer: Any, records: Sequence[Any], q: float) -> bool:
    """The q-th percentile of end-to-end latency over successful requests, in seconds (numpy's definition)."""
    values = [r.e2e_s for r in records if r.ok and r.e2e_s is not None]
    return check_answer(answer, percentile(values, q), f"p{q:g} end-to-end latency (s)",
                        hint="use the successful requests' e2e_s and numpy's percentile")


def check_throughput(answer: Any, records: Sequence[Any]) -> bool:
    """Output tokens of successful requests divided by the wall time (first send -> last return)."""
    return check_answer(answer, summarize(records)["output_tok_per_s"], "output throughput (tok/s)",
                        hint="output tokens of the successful requests / (last done_s - first send_s)")


def check_speedup(answer: Any, low_records: Sequence[Any], high_records: Sequence[Any]) -> bool:
    expected = _ratio(summarize(high_records)["output_tok_per_s"], summarize(low_records)["output_tok_per_s"])
    return check_answer(answer, expected, "speed-up (high / low throughput)",
                        hint="divide the two settings' output tokens/s")


# The guided questions behind the explanation: one check per effect, each recomputed from the
# learner's own records, so the learner version of the lab can leave the explanation to them.
def check_peak_generating(answer: Any, records: Sequence[Any]) -> bool:
    """Most requests generating at one moment: between first token (send + ttft) and last (send + e2e)."""
    return check_answer(answer, summarize(records)["peak_generating"], "requests generating at once", rel_tol=0.0,
                        hint="count overlapping intervals [send_s + ttft_s, send_s + e2e_s) of successful requests")


def check_step_growth(answer: Any, low_records: Sequence[Any], high_records: Sequence[Any]) -> bool:
    """How many times longer the mean time per output token was at the high setting than at the low one."""
    expected = _ratio(summarize(high_records)["tpot_mean_ms"], summarize(low_records)["tpot_mean_ms"])
    return check_answer(answer, expected, "growth of the time per output token (high / low)",
                        hint="per request (e2e_s - ttft_s) / (output_tokens - 1), averaged, then the ratio")


def check_prefill_ratio(answer: Any, records: Sequence[Any]) -> bool:
    """Prompt tokens over output tokens of the successful requests (prefill work against decode work)."""
    s = summarize(records)
    return check_answer(answer, _ratio(s["prompt_tokens_total"], s["output_tokens_total"]),
                        "prompt tokens / output tokens", hint="sum prompt_tokens and output_tokens of successful requests")


def kv_blocks_needed(records: Sequence[Any], block_size: int) -> int:
    """Blocks all successful requests hold at once at their full length (prompt + output), whole blocks each.

    >>> from types import SimpleNamespace as R
    >>> kv_blocks_needed([R(ok=True, prompt_tokens=30, output_tokens=64)] * 2, 16)
    12
    """
    return sum(blocks_for((r.prompt_tokens or 0) + (r.output_tokens or 0), block_size) for r in records if r.ok)


def check_kv_blocks(answer: Any, records: Sequence[Any], block_size: int) -> bool:
    return check_answer(answer, kv_blocks_needed(records, block_size), "KV blocks for all requests at once",
                        rel_tol=0.0, hint=f"per request ceil((prompt_tokens + output_tokens) / {block_size}), summed")


def check_kv_limited(answer: Any, records: Sequence[Any], kv_cache: dict[str, Any]) -> bool:
    """Did the KV cache limit the batch? ``"yes"`` when the requests' blocks exceed the server's pool."""
    from helpers.feedback import check_choice

    block, blocks = kv_cache.get("block_size"), kv_cache.get("num_blocks")
    if not block:
        print("The server did not report its block size: this question cannot be checked here.")
        return False
    blocks = int(blocks or kv_cache["num_tokens"] // block)
    need = kv_blocks_needed(records, block)
    return check_choice(answer, "yes" if need > blocks else "no", name="did the KV cache limit the batch",
                        options=("yes", "no"), why=f"{need:,} blocks needed at once, {blocks:,} in the pool")


# ----- small helpers ----------------------------------------------------------------------------
def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def _rng(summary: dict[str, Any], key: str, unit: str) -> str:
    mean, lo, hi = summary.get(key), summary.get(f"{key}_min"), summary.get(f"{key}_max")
    if lo is not None and hi is not None and summary.get("num_runs", 1) > 1:
        return f"{mean:.0f} {unit} (runs: {lo:.0f}-{hi:.0f})"
    return f"{mean:.0f} {unit}"


def _cores(hardware: str | None) -> int | None:
    import re

    match = re.search(r"CPU: (\d+) cores", hardware or "")
    return int(match.group(1)) if match else None
