"""Static vs continuous batching, simulated one engine step at a time.

Both simulators take the same trace (`helpers.batching.trace`) and the same clock
(`helpers.batching.step_time.StepTimeModel`) and return a `SimResult`
(`helpers.batching.sim_records`): one record per request, one per step, and a summary.
They are pure and deterministic: no I/O, no randomness.

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
allocated chunk by chunk (vLLM admits a request only if its whole prompt fits, as we do,
then takes the blocks chunk by chunk; we take them all at admission), and any memory
limit for static batching.

Taught in the continuous-batching notebook; drawn by `helpers.batching.view`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from helpers import validate
from helpers.batching.sim_records import SimResult, StepRecord, summarize_batching
from helpers.batching.sim_state import RequestStatus, SeqState, execute_step
from helpers.batching.step_time import StepTimeModel
from helpers.batching.trace import BatchRequest
from helpers.paged.cache import PagedKVCache
from helpers.paged.kv_math import blocks_for


def _result(policy: str, max_num_seqs: int, seqs: list[SeqState], steps: list[StepRecord]) -> SimResult:
    produced = sum(s.num_tokens_produced for s in steps)
    assert produced == sum(q.req.output_len for q in seqs), "output tokens not conserved"
    assert all(q.status is RequestStatus.FINISHED for q in seqs)
    records = tuple(q.record() for q in seqs)
    return SimResult(policy, max_num_seqs, records, tuple(steps), summarize_batching(records, steps, max_num_seqs))


def _start(trace: Sequence[BatchRequest], max_num_seqs: int, model: StepTimeModel | None,
           ) -> tuple[StepTimeModel, list[SeqState]]:
    """Check the caller's inputs; the clock (default: StepTimeModel()) and one SeqState per request, by arrival."""
    validate.positive_int(max_num_seqs, "max_num_seqs", hint="It is how many requests a batch holds.")
    if not trace:
        raise validate.InvalidArgumentError("the trace is empty: pass at least one BatchRequest "
                                            "(e.g. helpers.batching.trace.lab_trace()).")
    return model or StepTimeModel(), [SeqState(r) for r in sorted(trace, key=lambda r: r.arrival_s)]


def simulate_static(trace: Sequence[BatchRequest], max_num_seqs: int, model: StepTimeModel | None = None) -> SimResult:
    """Static batching: take up to max_num_seqs waiting requests, run them until the
    longest finishes, repeat. Prefill packs the batch's prompts into steps of
    max_num_batched_tokens; decode then runs in lock-step and charges every row of the
    batch, finished or not (padding), as a naive `generate()` on a padded tensor does.

    >>> from helpers.batching.trace import BatchRequest as R
    >>> trace = [R("a", 0, 4, 1), R("b", 0, 4, 3)]
    >>> r = simulate_static(trace, 2, StepTimeModel(overhead_s=1, prefill_token_s=0, decode_seq_s=0))
    >>> [s.slots for s in r.steps]  # a is done after its prefill; its slot idles
    [('a', 'b'), (None, 'b'), (None, 'b')]
    """
    model, seqs = _start(trace, max_num_seqs, model)
    pending: deque[SeqState] = deque(seqs)
    waiting: deque[SeqState] = deque()
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
            scheduled: dict[SeqState, int] = {}
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
            sampled = execute_step(scheduled, now + duration)
            # A member left out of the prefill budget, or already prefilled, holds its slot and computes nothing.
            ids = frozenset(q.request_id for q in scheduled)
            prefill_ids, decode_ids = (ids, frozenset()) if prefilling else (frozenset(), ids)
            steps.append(StepRecord(
                index=len(steps), start_s=now, duration_s=duration, slots=slots, prefill_ids=prefill_ids,
                decode_ids=decode_ids,
                num_prefill_tokens=num_prefill, num_decode_seqs=num_decode, num_tokens_produced=len(sampled),
                num_waiting=len(waiting), num_free_blocks=None,
            ))
            now += duration
    return _result("static", max_num_seqs, seqs, steps)


def simulate_continuous(
    trace: Sequence[BatchRequest],
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

    >>> from helpers.batching.trace import BatchRequest as R
    >>> trace = [R("a", 0, 4, 1), R("b", 0, 4, 3), R("c", 0, 4, 1)]
    >>> r = simulate_continuous(trace, 2, StepTimeModel(overhead_s=1, prefill_token_s=0, decode_seq_s=0))
    >>> [s.slots for s in r.steps]  # c takes a's slot as soon as a finishes
    [('a', 'b'), ('c', 'b'), (None, 'b')]
    """
    model, seqs = _start(trace, max_num_seqs, model)
    kv = None if num_kv_blocks is None else PagedKVCache(num_kv_blocks, block_size)
    if kv is not None:
        worst = max(blocks_for(r.prompt_len + r.output_len - 1, block_size) for r in trace)
        if worst > num_kv_blocks:  # it could never run, even alone
            raise ValueError(f"a request needs {worst} KV blocks; the pool has {num_kv_blocks}")
    pending: deque[SeqState] = deque(seqs)
    waiting: deque[SeqState] = deque()
    running: list[SeqState] = []
    slots: list[str | None] = [None] * max_num_seqs
    steps: list[StepRecord] = []
    now = 0.0

    def preempt(seq: SeqState) -> None:  # recompute: drop its KV, back to the front of the queue
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
        scheduled: dict[SeqState, int] = {}
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
        sampled = execute_step(scheduled, now + duration)
        for seq in sampled:
            if seq.status is RequestStatus.FINISHED:  # leaves now; its slot is free next step
                running.remove(seq)
                slots[seq.slot] = None
                if kv is not None:
                    kv.free(seq.request_id)
        steps.append(StepRecord(
            index=len(steps), start_s=now, duration_s=duration, slots=slots_now, prefill_ids=prefill_ids,
            decode_ids=frozenset(q.request_id for q in decoding),
            num_prefill_tokens=num_prefill, num_decode_seqs=len(decoding), num_tokens_produced=len(sampled),
            num_waiting=len(waiting), num_free_blocks=free_now,
        ))
        now += duration
    assert kv is None or kv.num_used_blocks == 0, "KV blocks leaked"
    return _result("continuous", max_num_seqs, seqs, steps)


def simulate_batching(
    trace: Sequence[BatchRequest],
    policy: str,
    max_num_seqs: int,
    model: StepTimeModel | None = None,
    num_kv_blocks: int | None = None,
) -> SimResult:
    """`simulate_static` or `simulate_continuous` by name ("static" / "continuous").
    Static batching ignores num_kv_blocks.

    >>> from helpers.batching.trace import lab_trace
    >>> simulate_batching(lab_trace(8), "continuous", 4).summary.num_output_tokens
    512
    """
    if policy == "static":
        return simulate_static(trace, max_num_seqs, model)
    if policy == "continuous":
        return simulate_continuous(trace, max_num_seqs, model, num_kv_blocks)
    raise validate.InvalidArgumentError(f"unknown policy {policy!r}: pass 'static' or 'continuous'.")
