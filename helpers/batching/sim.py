"""Static vs continuous batching, simulated one engine step at a time.

Both simulators take the same trace (`helpers.batching.trace`) and the same clock
(`helpers.batching.step_time.StepTimeModel`) and return a `SimResult`: one record per request, one
per step, and a summary. They are pure and deterministic: no I/O, no randomness.

- static: a batch forms from the waiting requests (at most max_num_seqs), prefills, then
  decodes in lock-step until its longest member finishes; finished members' slots sit idle
  (and are still computed, as padding) until the whole batch is done.
- continuous (vLLM's scheduler, simplified): every step, running requests are scheduled
  first, oldest first; then waiting requests join while there is a free slot, token budget
  and, when memory is simulated, KV blocks. A running request that cannot get a block for
  its next token preempts the newest running request (recompute: its KV is freed and it
  goes back to the front of `waiting`, to prefill prompt + output so far when re-admitted).

Like vLLM's V1 scheduler, a step gives each scheduled request some new tokens: a chunk of
its prompt (chunked prefill, within max_num_batched_tokens per step) or one decode token.
When a request has computed all its known tokens, the step samples its next output token.

Leaves out: priorities, prefix-cache hits, speculative decoding, stop strings, the KV
allocated chunk by chunk (we allocate a request's whole prompt when it is admitted), and
any memory limit for static batching.

Taught in the continuous-batching notebook; drawn by `helpers.batching.view`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import zlib

import numpy as np

from helpers.batching.trace import Request
from helpers.paged.cache import PagedKVCache
from helpers.batching.step_time import StepTimeModel


class RequestStatus(Enum):
    WAITING = "waiting"  # arrived, not admitted yet (or preempted)
    RUNNING = "running"  # holds a batch slot (and KV blocks)
    FINISHED = "finished"


@dataclass(frozen=True)
class RequestRecord:
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
    num_prefill_tokens: int
    num_decode_seqs: int  # sequences charged a decode (static: includes padding rows)
    num_tokens_produced: int  # output tokens sampled at the end of this step
    num_waiting: int  # arrived requests still waiting after this step's admissions
    num_free_blocks: int | None  # KV blocks left; None = memory not simulated

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def num_idle_slots(self) -> int:
        return sum(s is None for s in self.slots)


@dataclass(frozen=True)
class BatchingSummary:
    """The headline numbers of one simulation; units in the names."""

    num_requests: int
    num_output_tokens: int
    num_steps: int
    num_preemptions: int
    makespan_s: float  # first arrival -> last token
    output_tok_s: float  # num_output_tokens / makespan_s
    slot_utilization: float  # 0-1: busy slot-seconds / (max_num_seqs * seconds of steps)
    e2e_p50_s: float
    e2e_p95_s: float
    ttft_p50_s: float
    ttft_p95_s: float


@dataclass(frozen=True)
class SimResult:
    policy: str  # "static" or "continuous"
    max_num_seqs: int
    requests: tuple[RequestRecord, ...]  # in trace order
    steps: tuple[StepRecord, ...]
    summary: BatchingSummary


def summarize(
    requests: Sequence[RequestRecord], steps: Sequence[StepRecord], max_num_seqs: int
) -> BatchingSummary:
    """Headline numbers from raw records (a pure function: recompute anything from the records).

    Utilization is time-weighted over the steps only: time with no step (idle engine
    waiting for arrivals) counts neither for nor against it. Percentiles interpolate
    linearly (numpy's default).

    >>> s = [StepRecord(0, 0.0, 1.0, ("a", None), frozenset(), 0, 1, 1, 0, None)]
    >>> r = [RequestRecord("a", 0.0, 1, 1, 0.0, 0.0, 1.0, 1.0, 1.0, 0)]
    >>> summarize(r, s, max_num_seqs=2).slot_utilization  # one slot of two busy
    0.5
    """
    num_tokens = sum(r.output_len for r in requests)
    makespan = max(r.finish_s for r in requests) - min(r.arrival_s for r in requests)
    busy = sum(s.duration_s * (len(s.slots) - s.num_idle_slots) for s in steps)
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


@dataclass(eq=False)  # compared and hashed by identity: one object per request
class _Seq:
    """Mutable state of one request inside a simulation (vLLM calls this a Request)."""

    req: Request
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose KV has been computed
    num_output_tokens: int = 0
    num_kv_tokens: int = 0  # tokens with a KV slot allocated
    slot: int | None = None
    admitted_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    num_preemptions: int = 0

    @property
    def request_id(self) -> str:
        return self.req.request_id

    @property
    def num_tokens(self) -> int:  # prompt + output so far: what a recompute must prefill
        return self.req.prompt_len + self.num_output_tokens

    @property
    def is_decoding(self) -> bool:  # one known token left to compute, and it is an output
        return self.num_output_tokens > 0 and self.num_tokens - self.num_computed_tokens == 1

    def token_ids(self) -> list[int]:
        # Synthetic ids, distinct per request (crc32 is stable across runs, unlike hash()),
        # so a prefix cache finds nothing to share.
        base = zlib.crc32(self.request_id.encode()) * 100_000
        return [base + i for i in range(self.num_tokens)]

    def record(self) -> RequestRecord:
        r = self.req
        assert self.admitted_s is not None and self.first_token_s is not None and self.finish_s is not None
        return RequestRecord(
            request_id=r.request_id, arrival_s=r.arrival_s, prompt_len=r.prompt_len, output_len=r.output_len,
            admitted_s=self.admitted_s, queue_wait_s=self.admitted_s - r.arrival_s,
            ttft_s=self.first_token_s - r.arrival_s, finish_s=self.finish_s, e2e_s=self.finish_s - r.arrival_s,
            num_preemptions=self.num_preemptions,
        )


def _execute(scheduled: dict[_Seq, int], end_s: float) -> list[_Seq]:
    """Apply one step's computed tokens. Every request that has now computed all its known
    tokens samples one output token at end_s. Returns the requests that sampled one."""
    sampled = []
    for seq, n in scheduled.items():
        seq.num_computed_tokens += n
        assert seq.num_computed_tokens <= seq.num_tokens
        if seq.num_computed_tokens == seq.num_tokens:  # caught up: sample the next token
            seq.num_output_tokens += 1  # num_tokens grows by one: that token is computed next
            seq.first_token_s = end_s if seq.first_token_s is None else seq.first_token_s
            if seq.num_output_tokens == seq.req.output_len:
                seq.status, seq.finish_s = RequestStatus.FINISHED, end_s
            sampled.append(seq)
    return sampled


def _result(policy: str, max_num_seqs: int, seqs: list[_Seq], steps: list[StepRecord]) -> SimResult:
    produced = sum(s.num_tokens_produced for s in steps)
    assert produced == sum(q.req.output_len for q in seqs), "output tokens not conserved"
    assert all(q.status is RequestStatus.FINISHED for q in seqs)
    records = tuple(q.record() for q in seqs)
    return SimResult(policy, max_num_seqs, records, tuple(steps), summarize(records, steps, max_num_seqs))


def simulate_static(trace: Sequence[Request], max_num_seqs: int, model: StepTimeModel | None = None) -> SimResult:
    """Static batching: take up to max_num_seqs waiting requests, run them until the
    longest finishes, repeat. Prefill packs the batch's prompts into steps of
    max_num_batched_tokens; decode then runs in lock-step and charges every row of the
    batch, finished or not (padding), as a naive `generate()` on a padded tensor does.

    >>> from helpers.batching.trace import Request
    >>> trace = [Request("a", 0, 4, 1), Request("b", 0, 4, 3)]
    >>> r = simulate_static(trace, 2, StepTimeModel(overhead_s=1, prefill_token_s=0, decode_seq_s=0))
    >>> [s.slots for s in r.steps]  # a is done after its prefill; its slot idles
    [('a', 'b'), (None, 'b'), (None, 'b')]
    """
    model = model or StepTimeModel()
    seqs = [_Seq(r) for r in sorted(trace, key=lambda r: r.arrival_s)]
    pending: deque[_Seq] = deque(seqs)
    waiting: deque[_Seq] = deque()
    steps: list[StepRecord] = []
    now = 0.0
    while pending or waiting:
        while pending and pending[0].req.arrival_s <= now:
            waiting.append(pending.popleft())
        if not waiting:  # engine idle until the next arrival
            now = pending[0].req.arrival_s
            continue
        batch = [waiting.popleft() for _ in range(min(max_num_seqs, len(waiting)))]
        for slot, seq in enumerate(batch):
            seq.status, seq.slot, seq.admitted_s = RequestStatus.RUNNING, slot, now
        while any(q.status is RequestStatus.RUNNING for q in batch):
            while pending and pending[0].req.arrival_s <= now:
                waiting.append(pending.popleft())
            prefilling = [q for q in batch if q.num_output_tokens == 0]
            scheduled: dict[_Seq, int] = {}
            if prefilling:  # prefill phase: pack prompt chunks into the token budget
                budget = model.max_num_batched_tokens
                for seq in prefilling:
                    n = min(seq.num_tokens - seq.num_computed_tokens, budget)
                    if n > 0:
                        scheduled[seq], budget = n, budget - n
                num_prefill, num_decode = sum(scheduled.values()), 0
            else:  # decode phase, lock-step: one token for every unfinished member
                scheduled = {q: 1 for q in batch if q.status is RequestStatus.RUNNING}
                num_prefill, num_decode = 0, len(batch)  # finished rows are padding, still computed
            slots = tuple(q.request_id if q.status is RequestStatus.RUNNING else None for q in batch)
            slots += (None,) * (max_num_seqs - len(batch))
            duration = model.step_seconds(num_prefill, num_decode)
            sampled = _execute(scheduled, now + duration)
            prefill_ids = frozenset(q.request_id for q in scheduled) if prefilling else frozenset()
            steps.append(StepRecord(
                index=len(steps), start_s=now, duration_s=duration, slots=slots, prefill_ids=prefill_ids,
                num_prefill_tokens=num_prefill, num_decode_seqs=num_decode, num_tokens_produced=len(sampled),
                num_waiting=len(waiting), num_free_blocks=None,
            ))
            now += duration
    return _result("static", max_num_seqs, seqs, steps)


def simulate_continuous(
    trace: Sequence[Request],
    max_num_seqs: int,
    model: StepTimeModel | None = None,
    num_kv_blocks: int | None = None,
    block_size: int = 16,
) -> SimResult:
    """Continuous batching: requests join and leave the running batch at every step.

    Each step: (1) `running` requests, oldest first, get their next tokens within the
    budget; one that needs a new KV block when none is free preempts the newest running
    request (recompute), itself if it is the newest. (2) If nothing was preempted,
    `waiting` requests join in arrival order while num_running < max_num_seqs, budget is
    left and `PagedKVCache.can_allocate` says their tokens fit. num_kv_blocks=None means
    unlimited memory.

    >>> from helpers.batching.trace import Request
    >>> trace = [Request("a", 0, 4, 1), Request("b", 0, 4, 3), Request("c", 0, 4, 1)]
    >>> r = simulate_continuous(trace, 2, StepTimeModel(overhead_s=1, prefill_token_s=0, decode_seq_s=0))
    >>> [s.slots for s in r.steps]  # c takes a's slot as soon as a finishes
    [('a', 'b'), ('c', 'b'), (None, 'b')]
    """
    model = model or StepTimeModel()
    seqs = [_Seq(r) for r in sorted(trace, key=lambda r: r.arrival_s)]
    kv = None if num_kv_blocks is None else PagedKVCache(num_kv_blocks, block_size)
    if kv is not None:
        worst = max(-(-(r.prompt_len + r.output_len - 1) // block_size) for r in trace)
        if worst > num_kv_blocks:  # it could never run, even alone
            raise ValueError(f"a request needs {worst} KV blocks; the pool has {num_kv_blocks}")
    pending: deque[_Seq] = deque(seqs)
    waiting: deque[_Seq] = deque()
    running: list[_Seq] = []
    slots: list[str | None] = [None] * max_num_seqs
    steps: list[StepRecord] = []
    now = 0.0

    def preempt(seq: _Seq) -> None:  # recompute: drop its KV, back to the front of the queue
        if kv is not None:
            kv.free(seq.request_id)
        slots[seq.slot], seq.slot = None, None
        seq.status, seq.num_computed_tokens, seq.num_kv_tokens = RequestStatus.WAITING, 0, 0
        seq.num_preemptions += 1
        waiting.appendleft(seq)

    while pending or waiting or running:
        while pending and pending[0].req.arrival_s <= now:
            waiting.append(pending.popleft())
        if not (waiting or running):  # engine idle until the next arrival
            now = pending[0].req.arrival_s
            continue
        scheduled: dict[_Seq, int] = {}
        budget = model.max_num_batched_tokens
        preempted = False
        for seq in list(running):  # (1) running first, oldest first
            if seq.status is not RequestStatus.RUNNING or budget == 0:
                break  # preempted by an older request's append, or out of budget
            n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            if kv is not None and seq.num_kv_tokens < seq.num_computed_tokens + n:
                assert seq.is_decoding  # prompts get all their blocks at admission
                while not kv.can_append(seq.request_id):
                    victim = running.pop()  # the newest request gives way
                    preempt(victim)
                    preempted = True
                    if victim is seq:
                        break
                if seq.status is not RequestStatus.RUNNING:
                    break
                kv.append(seq.request_id, seq.num_tokens)  # the token id is irrelevant here
                seq.num_kv_tokens += 1
            scheduled[seq], budget = n, budget - n
        while not preempted and waiting and len(running) < max_num_seqs and budget > 0:
            seq = waiting[0]  # (2) admit waiting requests, first come first served
            if kv is not None:
                if not kv.can_allocate(seq.token_ids()):
                    break  # head of line blocks: no skipping ahead
                kv.allocate(seq.request_id, seq.token_ids())
                seq.num_kv_tokens = seq.num_tokens
            waiting.popleft()
            seq.status, seq.slot = RequestStatus.RUNNING, slots.index(None)
            slots[seq.slot] = seq.request_id
            seq.admitted_s = now if seq.admitted_s is None else seq.admitted_s
            running.append(seq)
            n = min(seq.num_tokens, budget)
            scheduled[seq], budget = n, budget - n
        assert len(running) <= max_num_seqs and budget >= 0
        if not scheduled:  # everything got preempted: schedule again from the new queues
            assert preempted and not running
            continue
        decoding = [q for q in scheduled if q.is_decoding]
        num_prefill = sum(n for q, n in scheduled.items() if not q.is_decoding)
        duration = model.step_seconds(num_prefill, len(decoding))
        prefill_ids = frozenset(q.request_id for q in scheduled if not q.is_decoding)
        slots_now, free_now = tuple(slots), None if kv is None else kv.num_free_blocks
        sampled = _execute(scheduled, now + duration)
        for seq in sampled:
            if seq.status is RequestStatus.FINISHED:  # leaves now; its slot is free next step
                running.remove(seq)
                slots[seq.slot] = None
                if kv is not None:
                    kv.free(seq.request_id)
        steps.append(StepRecord(
            index=len(steps), start_s=now, duration_s=duration, slots=slots_now, prefill_ids=prefill_ids,
            num_prefill_tokens=num_prefill, num_decode_seqs=len(decoding), num_tokens_produced=len(sampled),
            num_waiting=len(waiting), num_free_blocks=free_now,
        ))
        now += duration
    assert kv is None or kv.num_used_blocks == 0, "KV blocks leaked"
    return _result("continuous", max_num_seqs, seqs, steps)


def simulate(
    trace: Sequence[Request],
    policy: str,
    max_num_seqs: int,
    model: StepTimeModel | None = None,
    num_kv_blocks: int | None = None,
) -> SimResult:
    """`simulate_static` or `simulate_continuous` by name ("static" / "continuous").
    Static batching ignores num_kv_blocks.

    >>> from helpers.batching.trace import lab_trace
    >>> simulate(lab_trace(8), "continuous", 4).summary.num_output_tokens
    512
    """
    if policy == "static":
        return simulate_static(trace, max_num_seqs, model)
    if policy == "continuous":
        return simulate_continuous(trace, max_num_seqs, model, num_kv_blocks)
    raise ValueError(f"unknown policy {policy!r}: 'static' or 'continuous'")
