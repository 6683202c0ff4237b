"""The lab's guided questions: each learner answer recomputed from their own records and graded.

One pair per question: a pure ``grade_*`` function returns a :class:`helpers.feedback.Feedback`
(what tests call), and the ``check_*`` function of the same name prints it (what the lab's
cells call; it never raises). The expected value always comes from the learner's own run,
with the same definitions as :mod:`helpers.load.summary`, so only the method is checked.
Taught in ``labs/01_concurrency_lab.ipynb``.

Example::

    >>> from helpers.load.client import RequestRecord
    >>> records = [RequestRecord(i, ok=True, prompt_tokens=30, output_tokens=64, send_s=0.0, ttft_s=1.0,
    ...                          e2e_s=2.0 + i, done_s=2.0 + i) for i in range(4)]
    >>> print(grade_e2e_percentile(3.5, records, 50))
    ✅ p50 end-to-end latency (s): correct (3.5).
    >>> check_kv_blocks(None, records, 16)
    ✏️ KV blocks for all requests at once: not answered yet (set `answer` above and run the cell again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helpers.answer_audit import SIGNIFICANT_DIGITS, made_in
from helpers.feedback import Feedback, grade_choice, grade_number, graded, show
from helpers.lab.findings import ratio
from helpers.load.summary import percentile, summarize
from helpers.paged.kv_math import blocks_for

REL_TOL = 0.02  # answers within 2% count: learners round
# A ratio of two measured numbers, which no cell prints: one of the run's hundreds of 3-digit numbers can equal it
# by chance (on 2026-12-04 a TPOT p95 of 1.48 s "showed" a speed-up of 1.478 and failed CI), so the answer audit
# wants 4 digits of a plain number for these, or 3 of one written as a ratio (helpers.answer_audit).
RATIO_AUDIT_DIGITS = 4


def grade_answer(answer: Any, expected: float | None, what: str, rel_tol: float = REL_TOL, hint: str = "",
                 audit_digits: int = SIGNIFICANT_DIGITS, made_from: Sequence[Any] = ()) -> Feedback:
    """A learner's number against ``expected`` (None: the run had nothing to compute it from); ``audit_digits``
    as in :func:`helpers.feedback.grade_number`; ``made_from``: the records it is computed from, so the answer audit
    looks only at what was shown once they existed (:func:`helpers.answer_audit.made_in`).

    >>> grade_answer(1.0, None, "p50").message
    'p50: there is nothing to check against (no successful requests in this run).'
    """
    if expected is None and answer is not None:
        return Feedback(False, f"{what}: there is nothing to check against (no successful requests in this run).")
    # an int stays one: a whole number of requests or blocks is echoed as 48, not 48.0
    expected = 0.0 if expected is None else expected if isinstance(expected, int) else float(expected)
    return grade_number(answer, expected, name=what, rel_tol=rel_tol, hint=hint,
                        audit_digits=audit_digits, audit_since=made_in(made_from))


def grade_e2e_percentile(answer: Any, records: Sequence[Any], q: float) -> Feedback:
    """The q-th percentile of end-to-end latency over successful requests, in seconds (numpy's definition)."""
    values = [r.e2e_s for r in records if r.ok and r.e2e_s is not None]
    return grade_answer(answer, percentile(values, q), f"p{q:g} end-to-end latency (s)",
                        hint="use the successful requests' e2e_s and numpy's percentile", made_from=records)


def grade_throughput(answer: Any, records: Sequence[Any]) -> Feedback:
    """Output tokens of successful requests divided by the wall time (first send -> last return)."""
    return grade_answer(answer, summarize(records).output_tok_per_s, "output throughput (tok/s)",
                        hint="output tokens of the successful requests / (last done_s - first send_s)",
                        made_from=records)


def grade_speedup(answer: Any, low_records: Sequence[Any], high_records: Sequence[Any]) -> Feedback:
    """The high setting's output tokens/s over the low setting's."""
    return _grade_high_over_low(answer, low_records, high_records, "output_tok_per_s",
                                "speed-up (high / low throughput)", "divide the two settings' output tokens/s")


# The guided questions behind the explanation: one per effect, each recomputed from the
# learner's own records, so the learner version of the lab can leave the explanation to them.
def grade_peak_generating(answer: Any, records: Sequence[Any]) -> Feedback:
    """Most requests generating at one moment: between first token (send + ttft) and last (send + e2e)."""
    return grade_answer(answer, summarize(records).peak_generating, "requests generating at once", rel_tol=0.0,
                        hint="count overlapping intervals [send_s + ttft_s, send_s + e2e_s) of successful requests",
                        made_from=records)


def grade_step_growth(answer: Any, low_records: Sequence[Any], high_records: Sequence[Any]) -> Feedback:
    """How many times longer the mean time per output token was at the high setting than at the low one."""
    return _grade_high_over_low(answer, low_records, high_records, "tpot_mean_ms",
                                "growth of the time per output token (high / low)",
                                "per request (e2e_s - ttft_s) / (output_tokens - 1), averaged, then the ratio")


def grade_prefill_ratio(answer: Any, records: Sequence[Any]) -> Feedback:
    """Prompt tokens over output tokens of the successful requests (prefill work against decode work)."""
    summary = summarize(records)
    return grade_answer(answer, ratio(summary.prompt_tokens_total, summary.output_tokens_total),
                        "prompt tokens / output tokens", hint="sum prompt_tokens and output_tokens of successful requests",
                        audit_digits=RATIO_AUDIT_DIGITS, made_from=records)


def kv_blocks_needed(records: Sequence[Any], block_size: int) -> int:
    """Blocks all successful requests hold at once at their full length (prompt + output), whole blocks each.

    >>> from helpers.load.client import RequestRecord
    >>> kv_blocks_needed([RequestRecord(0, ok=True, prompt_tokens=30, output_tokens=64)] * 2, 16)
    12
    """
    return sum(blocks_for((r.prompt_tokens or 0) + (r.output_tokens or 0), block_size) for r in records if r.ok)


def grade_kv_blocks(answer: Any, records: Sequence[Any], block_size: int) -> Feedback:
    """Blocks of ``block_size`` tokens that all successful requests hold at once."""
    return grade_answer(answer, kv_blocks_needed(records, block_size), "KV blocks for all requests at once",
                        rel_tol=0.0, hint=f"per request ceil((prompt_tokens + output_tokens) / {block_size}), summed",
                        made_from=records)


def grade_kv_limited(answer: Any, records: Sequence[Any], kv_cache: dict[str, Any]) -> Feedback:
    """Did the KV cache limit the batch? ``"yes"`` when the requests' blocks exceed the server's pool."""
    block, blocks = kv_cache.get("block_size"), kv_cache.get("num_blocks")
    if not block:
        return Feedback(False, "The server did not report its block size: this question cannot be checked here.")
    blocks = int(blocks or kv_cache["num_tokens"] // block)
    need = kv_blocks_needed(records, block)
    return grade_choice(answer, "yes" if need > blocks else "no", name="did the KV cache limit the batch",
                        options=("yes", "no"), why=f"{need:,} blocks needed at once, {blocks:,} in the pool")


def _grade_high_over_low(answer: Any, low_records: Sequence[Any], high_records: Sequence[Any], field: str,
                         what: str, hint: str) -> Feedback:
    """A summary field of the high setting's run over the same field of the low setting's."""
    expected = ratio(getattr(summarize(high_records), field), getattr(summarize(low_records), field))
    return grade_answer(answer, expected, what, hint=hint, audit_digits=RATIO_AUDIT_DIGITS,
                        made_from=[*low_records, *high_records])


# ----- what the lab's cells call: grade and print, never raise -------------------------------------
def check_e2e_percentile(answer: Any, records: Sequence[Any], q: float) -> None:
    show(graded(grade_e2e_percentile, answer, records, q))


def check_throughput(answer: Any, records: Sequence[Any]) -> None:
    show(graded(grade_throughput, answer, records))


def check_speedup(answer: Any, low_records: Sequence[Any], high_records: Sequence[Any]) -> None:
    show(graded(grade_speedup, answer, low_records, high_records))


def check_peak_generating(answer: Any, records: Sequence[Any]) -> None:
    show(graded(grade_peak_generating, answer, records))


def check_step_growth(answer: Any, low_records: Sequence[Any], high_records: Sequence[Any]) -> None:
    show(graded(grade_step_growth, answer, low_records, high_records))


def check_prefill_ratio(answer: Any, records: Sequence[Any]) -> None:
    show(graded(grade_prefill_ratio, answer, records))


def check_kv_blocks(answer: Any, records: Sequence[Any], block_size: int) -> None:
    show(graded(grade_kv_blocks, answer, records, block_size))


def check_kv_limited(answer: Any, records: Sequence[Any], kv_cache: dict[str, Any]) -> None:
    show(graded(grade_kv_limited, answer, records, kv_cache))
