"""What a batching simulation records: one record per request, one per engine step, a summary.

Plain frozen dataclasses, filled in by the schedulers of `helpers.batching.sim`, drawn by
`helpers.batching.view`, and reduced to headline numbers by `summarize_batching` (a pure
function: any number can be recomputed from the records). Times are seconds since the start
of the trace.

Taught in the continuous-batching notebook.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchRequestRecord:
    """What happened to one request. Times in seconds since the start of the trace."""

    request_id: str
    arrival_s: float
    prompt_len: int
    output_len: int
    admitted_s: float  # first time it got a slot
    queue_wait_s: float  # admitted_s - arrival_s
    ttft_s: float  # arrival -> end of the step that sampled its first token
    finish_s: float  # end of the step that sampled its last token
    e2e_s: float  # finish_s - arrival_s
    num_preemptions: int


@dataclass(frozen=True)
class StepRecord:
    """One engine step: what it held and how long it took."""

    index: int
    start_s: float
    duration_s: float
    slots: tuple[str | None, ...]  # request id in each batch slot; None = idle slot
    prefill_ids: frozenset[str]  # requests computing prompt tokens in this step
    decode_ids: frozenset[str]  # requests computing one output token in this step
    num_prefill_tokens: int
    num_decode_seqs: int  # sequences charged a decode (static: includes padding rows, not in decode_ids)
    num_tokens_produced: int  # output tokens sampled at the end of this step
    num_waiting: int  # arrived requests still waiting after this step's admissions
    num_free_blocks: int | None  # KV blocks left; None = memory not simulated

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def num_idle_slots(self) -> int:
        return sum(s is None for s in self.slots)

    @property
    def num_busy_slots(self) -> int:
        """Slots whose request computes tokens in this step. A static batch's member holds its
        slot and computes nothing while the batch's prompts are prefilled (continuous batching
        would only do so with a step budget of fewer tokens than running requests)."""
        return sum(s is not None and (s in self.prefill_ids or s in self.decode_ids) for s in self.slots)


@dataclass(frozen=True)
class BatchingSummary:
    """The headline numbers of one simulation; units in the names."""

    num_requests: int
    num_output_tokens: int
    num_steps: int
    num_preemptions: int
    makespan_s: float  # first arrival -> last token
    output_tok_s: float  # num_output_tokens / makespan_s
    slot_utilization: float  # 0-1: busy slot-seconds / (max_num_seqs * seconds of steps); see num_busy_slots
    e2e_p50_s: float
    e2e_p95_s: float
    ttft_p50_s: float
    ttft_p95_s: float


@dataclass(frozen=True)
class SimResult:
    """One simulation: its policy and slot count, what happened to each request and in each step."""

    policy: str  # "static" or "continuous"
    max_num_seqs: int
    requests: tuple[BatchRequestRecord, ...]  # in trace order
    steps: tuple[StepRecord, ...]
    summary: BatchingSummary


def summarize_batching(
    requests: Sequence[BatchRequestRecord], steps: Sequence[StepRecord], max_num_seqs: int
) -> BatchingSummary:
    """Headline numbers from raw records (a pure function: recompute anything from the records).

    Utilization is time-weighted over the steps only: time with no step (idle engine
    waiting for arrivals) counts neither for nor against it. A slot is busy in a step when
    its request computes tokens in it (`StepRecord.num_busy_slots`): holding the slot while
    waiting for a prefill is not work. Percentiles interpolate linearly (numpy's default).

    >>> s = [StepRecord(0, 0.0, 1.0, ("a", None), frozenset(), frozenset({"a"}), 0, 1, 1, 0, None)]
    >>> r = [BatchRequestRecord("a", 0.0, 1, 1, 0.0, 0.0, 1.0, 1.0, 1.0, 0)]
    >>> summarize_batching(r, s, max_num_seqs=2).slot_utilization  # one slot of two busy
    0.5
    """
    num_tokens = sum(r.output_len for r in requests)
    makespan = max(r.finish_s for r in requests) - min(r.arrival_s for r in requests)
    busy = sum(s.duration_s * s.num_busy_slots for s in steps)
    total = sum(s.duration_s for s in steps) * max_num_seqs
    e2e = [r.e2e_s for r in requests]
    ttft = [r.ttft_s for r in requests]
    return BatchingSummary(
        num_requests=len(requests),
        num_output_tokens=num_tokens,
        num_steps=len(steps),
        num_preemptions=sum(r.num_preemptions for r in requests),
        makespan_s=makespan,
        output_tok_s=num_tokens / makespan if makespan > 0 else float("inf"),
        slot_utilization=busy / total if total > 0 else 0.0,
        e2e_p50_s=float(np.percentile(e2e, 50)),
        e2e_p95_s=float(np.percentile(e2e, 95)),
        ttft_p50_s=float(np.percentile(ttft, 50)),
        ttft_p95_s=float(np.percentile(ttft, 95)),
    )
