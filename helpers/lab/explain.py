"""Why throughput did (not) scale 8x: the lab's explanation, written from the measured numbers.

:func:`explain` takes the pooled rows of the low and high setting (``max_num_seqs`` 8 and
64 in the lab) plus what the server reported, and writes one finding per effect (the
sentences are :mod:`helpers.lab.findings`). Every sentence is computed from the numbers,
and each effect has branches where the conclusion can flip. The effects:

1. requests, not slots: only N requests exist, so 64 slots act like N; read the peak
   number of requests actually generating at once;
2. per-step cost: a step over more sequences takes longer, so tokens/s per running
   request falls;
3. prefill interleaves with decode: long prompts are the same work at 8 and 64, and their
   chunks slow the decode steps they share (TTFT and inter-token stalls at 64);
4. KV-cache capacity, in tokens and blocks, as the server reported it, against what the
   requests need (and what a naive max_model_len reservation would need);
5. the hardware: what the device does with a bigger batch, and whether the measured step
   growth shows the steps bound by work per request (on a CPU, compute-bound) or by a shared part.

A setting where more than ``findings.FAILED_SHARE`` of the requests failed ran its survivors in
a batch the failures shrank: the headline says so, and the findings on slots, step cost and
the hardware are left out rather than put down to ``max_num_seqs``.

:func:`explain_runs` builds the inputs from saved runs. The learner's own checks of these
numbers are :mod:`helpers.lab.checks`. Taught in ``labs/01_concurrency_lab.ipynb``; the
instructor's worked solution is ``docs/solutions/01_concurrency_lab.md``.

Example::

    >>> from dataclasses import replace
    >>> from helpers.lab.table import ResultRow
    >>> from helpers.load.summary import summarize
    >>> empty = summarize([])
    >>> low = ResultRow(8, "2 runs", replace(empty, num_requests=50, output_tok_per_s=100.0, peak_generating=8))
    >>> high = ResultRow(64, "2 runs", replace(empty, num_requests=50, output_tok_per_s=720.0, peak_generating=50))
    >>> "near-linear" in explain(low, high).headline
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from helpers.errors import InvalidArgumentError
from helpers.lab import findings, step_cost
from helpers.lab.table import ResultRow, random_weights_note, runs_table
from helpers.load.summary import describe_failures


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
    low: ResultRow,
    high: ResultRow,
    *,
    device: str | None = None,
    kv_cache: dict[str, Any] | None = None,
    request_kv_tokens: Sequence[int] = (),
    max_model_len: int | None = None,
    cpu_count: int | None = None,
    failure_reasons: Sequence[str] = (),
) -> Explanation:
    """The explanation for two settings' pooled rows (``runs_table(runs, pooled=True)``).

    ``kv_cache``: the server's KVCacheReport as a dict; ``request_kv_tokens``: prompt +
    output tokens of each request of one run (what the KV cache must hold).
    Missing numbers drop the findings that need them; they are never made up. Failed
    requests (``num_errors``) get a finding of their own, first, with ``failure_reasons``
    (sentences on why they failed): every number here is computed from the requests that succeeded.
    """
    if low.max_num_seqs is None or high.max_num_seqs is None or not low.max_num_seqs < high.max_num_seqs:
        raise InvalidArgumentError(
            f"explain needs a low and a higher max_num_seqs, got {low.max_num_seqs} and {high.max_num_seqs}: "
            "pass the pooled rows of two settings, the lower first.")
    lo, hi = low.summary, high.summary
    linear = high.max_num_seqs / low.max_num_seqs
    speedup = findings.ratio(hi.output_tok_per_s, lo.output_tok_per_s)
    explanation = Explanation(findings.headline(low, high, speedup, linear))
    add = explanation.findings.append
    failed = findings.failed_text(low, high)
    # Past FAILED_SHARE the batch each setting ran is the failures' doing, not max_num_seqs's: the
    # findings that read the batch or the step it made would explain the failures as a slot effect.
    batch_is_the_settings = max(findings.failed_share(low), findings.failed_share(high)) <= findings.FAILED_SHARE
    if failed:
        failed = " ".join([failed, *failure_reasons])
        if not batch_is_the_settings:
            failed += (f" More than {findings.FAILED_SHARE:.0%} of a setting's requests failed, so the findings on "
                       "slots, step cost and the hardware are left out: they would describe a batch the failures "
                       "shrank, not the setting.")
        add(Finding("failed requests", failed))
    if speedup is not None:
        add(Finding("throughput", findings.throughput_text(low, high, speedup, linear)))
    if lo.e2e_p95_s and hi.e2e_p95_s:
        add(Finding("latency", findings.latency_text(low, high)))
    peaks = bool(lo.peak_generating and hi.peak_generating) and batch_is_the_settings
    if peaks:
        add(Finding("requests, not slots", findings.slots_text(low, high)))
    growth = findings.ratio(hi.tpot_mean_ms, lo.tpot_mean_ms)
    if growth and peaks:  # a mean time per token of 0 (no decode step timed) has no growth to read
        add(Finding("per-step cost", step_cost.step_text(low, high, growth, speedup)))
    if hi.prompt_tokens_total and hi.output_tokens_total:
        add(Finding("prefill interleaves with decode", findings.prefill_text(low, high)))
    add(Finding("KV-cache capacity", findings.kv_text(kv_cache, request_kv_tokens, max_model_len, high.max_num_seqs)))
    if device and batch_is_the_settings:
        add(Finding("the hardware", step_cost.hardware_text(device, growth, low, high, cpu_count)))
    return explanation


def explain_runs(runs: Sequence[Any], low_seqs: int | None = None, high_seqs: int | None = None) -> Explanation:
    """:func:`explain` for saved runs (``LoadTestRun``), pooling the repetitions of each setting.

    Default: the lowest and the highest ``max_num_seqs`` among the runs.
    """
    rows = {row.max_num_seqs: row for row in runs_table(runs, pooled=True) if row.max_num_seqs is not None}
    if len(rows) < 2:
        raise InvalidArgumentError(f"explain_runs needs runs at two max_num_seqs settings, got {sorted(rows)}: "
                                   "pass the runs of both settings.")
    low_seqs = min(rows) if low_seqs is None else low_seqs
    high_seqs = max(rows) if high_seqs is None else high_seqs
    for seqs in (low_seqs, high_seqs):
        if seqs not in rows:
            raise InvalidArgumentError(f"no runs at max_num_seqs={seqs}; the runs have {sorted(rows)}.")
    groups = {seqs: [run for run in runs if run.max_num_seqs == seqs] for seqs in (low_seqs, high_seqs)}
    reference = groups[high_seqs][0]
    tokens = [(r.prompt_tokens or 0) + (r.output_tokens or 0) for r in reference.records if r.ok]
    reasons = [f"At {seqs}: {text}" for seqs in (low_seqs, high_seqs)
               if (text := describe_failures([r for run in groups[seqs] for r in run.records]))]
    explanation = explain(
        rows[low_seqs], rows[high_seqs],
        device=reference.server.device, kv_cache=reference.server.kv_cache,
        request_kv_tokens=tokens, max_model_len=reference.server.max_model_len,
        cpu_count=reference.cpu_cores, failure_reasons=reasons,
    )
    note = random_weights_note(runs)
    if note is not None:
        explanation.findings.insert(0, Finding("the model", note))
    return explanation
