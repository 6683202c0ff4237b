"""One KV-allocator run reduced to the numbers the PagedAttention paper quotes (pure).

`summarize_kv_run(frames)` turns the frames of `helpers.paged.sim.simulate_allocator` into a
`KVRunSummary`: the share of reserved KV slots that hold tokens (the paper's measure), where
the rest went, concurrency, queueing and preemptions. Taught in the PagedAttention notebook.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helpers.errors import InvalidArgumentError
from helpers.paged.sim import KVFrame


@dataclass(frozen=True)
class KVRunSummary:
    """The numbers of one run, next to which the notebook puts the paper's.

    `mean_utilization` is summed token slots over summed reserved slots across all steps
    (a slot-step average, so busy steps weigh more): the PagedAttention paper's measure of
    how much reserved KV memory holds token states (prior systems 20-38%, vLLM ~96%).

    >>> from helpers.paged.cache import PagedKVCache
    >>> from helpers.paged.sim import simulate_allocator
    >>> from helpers.paged.trace import KVRequest
    >>> trace = [KVRequest("a", 0, (1, 2, 3), output_len=2)]
    >>> s = summarize_kv_run(simulate_allocator(trace, PagedKVCache(2, block_size=4)))
    >>> s.mean_utilization, s.num_steps  # 4 of 4 slots, then 5 of 8, then nothing reserved
    (0.75, 3)
    """

    scheme: str
    capacity_slots: int
    num_steps: int  # steps until the last request finished (or max_steps)
    num_finished: int
    mean_utilization: float  # token slots / reserved slots, summed over steps
    peak_utilization: float  # highest single-step token slots / reserved slots
    mean_reserved_fraction: float  # reserved slots / capacity, averaged over steps
    peak_reserved_slots: int
    peak_token_slots: int
    mean_running: float  # concurrent requests, averaged over steps
    peak_running: int
    waiting_steps: int  # sum over steps of requests waiting: queueing delay, in request-steps
    num_preemptions: int
    sharing_saving: float  # 1 - physical token slots / logical tokens: memory saved by prefix sharing
    # Where the rest of the reserved slots went, summed over steps like mean_utilization, so that
    # mean_utilization + mean_internal_waste + mean_reserved_unused == 1 whenever anything was reserved.
    mean_internal_waste: float = 0.0  # paged: empty tails of partly filled last blocks / reserved
    mean_reserved_unused: float = 0.0  # contiguous: reserved ahead for tokens not (yet) generated / reserved
    mean_external_fragmentation: float = 0.0  # contiguous: free slots in holes too short for a request / capacity
    mean_request_tokens: float = 0.0  # tokens a live request holds, averaged over request-steps
    mean_request_waste: float = 0.0  # reserved slots without a token per live request (physical, so sharing lowers it)

    def describe(self) -> str:
        """One line for a notebook cell."""
        return (
            f"{self.scheme}: {self.mean_utilization:.0%} of reserved KV slots hold tokens, "
            f"{self.mean_running:.1f} requests running on average (peak {self.peak_running}), "
            f"{self.waiting_steps} request-steps waiting, {self.num_preemptions} preemptions, "
            f"done in {self.num_steps} steps"
        )


def summarize_kv_run(frames: Sequence[KVFrame]) -> KVRunSummary:
    """Reduce one run's frames to a `KVRunSummary` (pure; frames are not changed)."""
    if not frames:
        raise InvalidArgumentError("no frames to summarize: pass the list simulate_allocator returned.")
    usages = [f.usage for f in frames]
    reserved = sum(u.reserved_slots for u in usages)
    tokens = sum(u.token_slots for u in usages)
    logical = sum(u.logical_tokens for u in usages)
    request_steps = sum(u.num_requests for u in usages)
    return KVRunSummary(
        scheme=frames[0].scheme,
        capacity_slots=usages[0].capacity_slots,
        num_steps=len(frames),
        num_finished=frames[-1].num_finished,
        mean_utilization=tokens / reserved if reserved else 0.0,
        peak_utilization=max(u.utilization for u in usages),
        mean_reserved_fraction=sum(u.reserved_slots / u.capacity_slots for u in usages) / len(usages),
        peak_reserved_slots=max(u.reserved_slots for u in usages),
        peak_token_slots=max(u.token_slots for u in usages),
        mean_running=sum(f.num_running for f in frames) / len(frames),
        peak_running=max(f.num_running for f in frames),
        waiting_steps=sum(f.num_waiting for f in frames),
        num_preemptions=frames[-1].num_preemptions,
        sharing_saving=1 - tokens / logical if logical else 0.0,
        mean_internal_waste=sum(u.internal_waste_slots for u in usages) / reserved if reserved else 0.0,
        mean_reserved_unused=sum(u.reserved_unused_slots for u in usages) / reserved if reserved else 0.0,
        mean_external_fragmentation=sum(u.external_fragmentation_slots for u in usages)
        / sum(u.capacity_slots for u in usages),
        mean_request_tokens=logical / request_steps if request_steps else 0.0,
        mean_request_waste=(reserved - tokens) / request_steps if request_steps else 0.0,
    )
