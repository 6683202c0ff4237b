"""Replay a request trace against a KV-cache allocator, one decode step at a time.

Taught in the PagedAttention notebook: the same `simulate_allocator` runs the naive
contiguous cache and the paged one on one trace (`compare_allocators` does both), and
`helpers.paged.sim_summary.summarize_kv_run` turns each run into the numbers the
PagedAttention paper quotes (share of reserved KV memory that holds tokens).

Each step: arrivals join the waiting queue; waiting requests are admitted first come,
first served while `can_allocate` says yes (the first that does not fit blocks the rest,
as in vLLM); every running request appends one token, and when `can_append` says no the
most recently admitted request is preempted back to the front of the waiting queue and
later recomputed from its prompt plus the tokens it had generated (vLLM's recompute
preemption). Then a `KVFrame` records the state; requests that finished in the step are
freed at the start of the next one.

Leaves out: compute time (a step is a step, whatever the batch size), chunked prefill,
`max_num_seqs`, and swapping. Generated token ids are a fixed function of (request id,
position), so runs are deterministic.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from helpers.errors import InvalidArgumentError
from helpers.paged.cache import PagedKVCache
from helpers.paged.contiguous import ContiguousKVCache
from helpers.paged.trace import VOCAB_SIZE, KVRequest
from helpers.paged.usage import KVUsage, PoolCell

KVCache = PagedKVCache | ContiguousKVCache  # either allocator: both answer the same verbs


@dataclass(frozen=True)
class KVFrame:
    """The state after one step of `simulate_allocator`: what the drawing and the metrics read.

    `pool` has one cell per block (paged) or per reserved run / free hole (contiguous).
    `block_tables` and `num_tokens` are keyed by request id (treat as read-only): the
    running requests, then those in `finished_now`, which still hold memory in this frame.
    `num_admitted`, `num_finished`, `num_preemptions` count since step 0; `*_now` list the
    request ids that changed state during this step.

    >>> trace = [KVRequest("r0", 0, (1, 2, 3), output_len=2)]
    >>> frames = simulate_allocator(trace, PagedKVCache(num_blocks=2, block_size=4))
    >>> [(f.step, f.num_tokens, f.finished_now) for f in frames]  # prefill's token, then one decode step
    [(0, {'r0': 4}, ()), (1, {'r0': 5}, ('r0',)), (2, {}, ())]
    """

    step: int
    scheme: str  # "contiguous", "paged" or "paged + prefix caching"
    block_size: int  # slots per pool block; 1 for contiguous
    pool: tuple[PoolCell, ...]
    block_tables: dict[str, tuple[int, ...]]
    num_tokens: dict[str, int]
    usage: KVUsage
    running: tuple[str, ...]  # admission order
    waiting: tuple[str, ...]  # arrived but not (or no longer) admitted, queue order
    admitted_now: tuple[str, ...]
    preempted_now: tuple[str, ...]
    finished_now: tuple[str, ...]
    num_admitted: int  # admissions so far, re-admissions after preemption included
    num_finished: int
    num_preemptions: int
    max_model_len: int | None = None  # contiguous only: holes shorter than this are fragments

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)


def scheme_name(cache: KVCache) -> str:
    if isinstance(cache, ContiguousKVCache):
        return "contiguous"
    return "paged + prefix caching" if cache.enable_prefix_caching else "paged"


def output_token(request_id: str, position: int) -> int:
    """The token a simulated request generates at `position`: fixed, but different per request."""
    return zlib.crc32(f"{request_id}/{position}".encode()) % VOCAB_SIZE


class _Live:
    """A request's progress through the simulation (mutable, private)."""

    def __init__(self, request: KVRequest) -> None:
        self.request = request
        self.num_generated = 0

    def token_ids(self) -> list[int]:
        """What must be in the cache on (re-)admission: prompt plus tokens generated so far."""
        rid = self.request.request_id
        return [*self.request.prompt_token_ids, *(output_token(rid, i) for i in range(self.num_generated))]

    def remaining_max_tokens(self) -> int | None:
        cap = self.request.max_tokens
        return None if cap is None else cap - self.num_generated


def _can_allocate(cache: KVCache, live: _Live) -> bool:
    if isinstance(cache, ContiguousKVCache):  # only the naive scheme reserves ahead, so only it needs the cap
        return cache.can_allocate(live.token_ids(), max_tokens=live.remaining_max_tokens())
    return cache.can_allocate(live.token_ids())


def _allocate(cache: KVCache, live: _Live) -> None:
    if isinstance(cache, ContiguousKVCache):
        cache.allocate(live.request.request_id, live.token_ids(), max_tokens=live.remaining_max_tokens())
    else:
        cache.allocate(live.request.request_id, live.token_ids())


def simulate_allocator(trace: Sequence[KVRequest], cache: KVCache, max_steps: int = 5_000) -> list[KVFrame]:
    """Run `trace` against an empty `cache` until every request finishes; one `KVFrame` per step.

    A request that generates its last token in step t is still drawn in frame t (listed
    in `finished_now`); its memory is freed at the start of step t + 1. Raises ValueError
    when a request can never run (it needs more than the whole pool) instead of waiting
    forever. Stops early, unfinished, after `max_steps` steps.

    >>> trace = [KVRequest("a", 0, tuple(range(20)), output_len=1), KVRequest("b", 0, tuple(range(20)), output_len=1)]
    >>> frames = simulate_allocator(trace, PagedKVCache(num_blocks=2, block_size=16))  # room for one at a time
    >>> [(list(f.block_tables), f.waiting) for f in frames]  # who holds memory, who waits
    [(['a'], ('b',)), (['b'], ()), ([], ())]
    """
    if cache.num_used_blocks:
        raise InvalidArgumentError("simulate_allocator needs an empty cache: pass a new one, e.g. PagedKVCache(64).")
    pending = deque(sorted(trace, key=lambda r: r.arrival_step))  # not arrived yet
    waiting: deque[_Live] = deque()
    running: list[_Live] = []  # admission order: the last one is preempted first
    finished: list[_Live] = []  # done in the previous step, freed at the start of this one
    num_admitted = num_finished = num_preemptions = 0
    frames: list[KVFrame] = []
    for step in range(max_steps):
        if not (pending or waiting or running or finished):
            break
        for live in finished:
            cache.free(live.request.request_id)
        while pending and pending[0].arrival_step <= step:
            waiting.append(_Live(pending.popleft()))

        admitted: list[str] = []
        while waiting and _can_allocate(cache, waiting[0]):
            live = waiting.popleft()
            _allocate(cache, live)
            running.append(live)
            admitted.append(live.request.request_id)
        if waiting and not running:
            raise ValueError(
                f"request {waiting[0].request.request_id} can never be admitted: it needs more KV memory "
                "than the whole pool (or, contiguous, more than max_model_len)"
            )

        preempted: list[str] = []
        for live in list(running):  # one decode step: every running request gets one token
            rid = live.request.request_id
            while live in running and not cache.can_append(rid):
                victim = running.pop()  # the most recently admitted gives way
                cache.free(victim.request.request_id)
                waiting.appendleft(victim)  # first in line again; recomputed when memory frees up
                preempted.append(victim.request.request_id)
                if victim is live and not running:
                    raise ValueError(f"request {rid} cannot grow: alone it fills the whole pool")
            if live not in running:  # preempted, here or by an earlier request of this step
                continue
            cache.append(rid, output_token(rid, live.num_generated))
            live.num_generated += 1

        finished = [live for live in running if live.num_generated >= live.request.output_len]
        running = [live for live in running if live not in finished]
        num_admitted += len(admitted)
        num_preemptions += len(preempted)
        num_finished += len(finished)
        cache.check_invariants()

        shown = [live.request.request_id for live in (*running, *finished)]
        frames.append(
            KVFrame(
                step=step,
                scheme=scheme_name(cache),
                block_size=cache.block_size,
                pool=cache.pool_state(),
                block_tables={rid: tuple(cache.block_table(rid)) for rid in shown},
                num_tokens={rid: cache.num_tokens(rid) for rid in shown},
                usage=cache.usage(),
                running=tuple(live.request.request_id for live in running),
                waiting=tuple(live.request.request_id for live in waiting),
                admitted_now=tuple(admitted),
                preempted_now=tuple(preempted),
                finished_now=tuple(live.request.request_id for live in finished),
                num_admitted=num_admitted,
                num_finished=num_finished,
                num_preemptions=num_preemptions,
                max_model_len=cache.max_model_len if isinstance(cache, ContiguousKVCache) else None,
            )
        )
    return frames


def compare_allocators(
    trace: Sequence[KVRequest],
    num_blocks: int = 64,
    block_size: int = 16,
    max_model_len: int = 256,
    enable_prefix_caching: bool = False,
    max_steps: int = 5_000,
) -> tuple[list[KVFrame], list[KVFrame]]:
    """Run `trace` on a contiguous and a paged cache of the same size: num_blocks * block_size slots.

    Returns (contiguous frames, paged frames). Leaves out everything `simulate_allocator` does.

    >>> trace = [KVRequest("a", 0, (1, 2, 3), output_len=1)]
    >>> naive, paged = compare_allocators(trace, num_blocks=4, block_size=4, max_model_len=8)
    >>> naive[0].usage.reserved_slots, paged[0].usage.reserved_slots  # 8 reserved up front vs 1 block of 4
    (8, 4)
    """
    naive = simulate_allocator(trace, ContiguousKVCache(num_blocks * block_size, max_model_len), max_steps)
    paged = simulate_allocator(trace, PagedKVCache(num_blocks, block_size, enable_prefix_caching), max_steps)
    return naive, paged
