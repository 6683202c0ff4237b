"""Notebook 03's findings in words and tables, each built from the numbers of the run (pure).

The notebook runs the allocators and the server; these functions say what the numbers show, and
the wording follows them: a share inside the paper's range reads differently from one below it,
a pool that fits every request differently from one that does not, a prefix-cache hit of exactly
the shared full blocks differently from none at all. Nothing is canned.

- :func:`describe_blocks`: one request's block table and the pool's free blocks, one line.
- :func:`waste_table`: where each simulated run's reserved slots went (``KVRunSummary`` rows).
- :func:`paper_table` and :func:`explain_waste`: those shares beside the PagedAttention paper's, and why.
- :func:`explain_capacity`: how many of the lab's requests the real pool holds under each scheme.
- :func:`explain_prefix_hits`: what ``vllm:prefix_cache_hits`` counted for two requests with one prefix.

Taught in ``notebooks/03_paged_attention.ipynb``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from helpers.paged.capacity import Capacity, LengthMix
from helpers.paged.sim_summary import KVRunSummary
from helpers.units import share

# The PagedAttention paper (Kwon et al., SOSP 2023): share of reserved KV memory holding tokens
PAPER_PRIOR = (0.20, 0.38)  # earlier systems
PAPER_VLLM = 0.96  # vLLM

Summaries = Mapping[tuple[str, str], KVRunSummary]  # (trace, scheme) -> summary


def describe_blocks(cache: Any, request_id: str) -> str:
    """``request_id``'s block table, its tokens, the empty slots of its last block, and the free blocks.

    >>> from helpers.paged.cache import PagedKVCache
    >>> cache = PagedKVCache(num_blocks=8, block_size=16)
    >>> cache.allocate("a", list(range(37)))
    >>> describe_blocks(cache, "a")
    'a: block table [0, 1, 2], 37 tokens, 11 empty slots in its last block; free blocks: 5'
    """
    table, tokens = cache.block_table(request_id), cache.num_tokens(request_id)
    empty = len(table) * cache.block_size - tokens
    return (f"{request_id}: block table {table}, {tokens} tokens, {empty} empty slot{'s' * (empty != 1)} in its last "
            f"block; free blocks: {cache.num_free_blocks}")


def waste_table(summaries: Summaries) -> str:
    """One row per (trace, scheme): tokens/reserved and where the rest went, concurrency, queueing, steps."""
    header = (f"{'trace':<20}{'scheme':<24}{'tokens/reserved':>16}{'partial block':>14}{'reserved, empty':>16}"
              f"{'short holes':>12}{'running':>9}{'waiting':>9}{'preempted':>10}{'steps':>7}")
    lines = [header, "-" * len(header)]
    for (trace_name, scheme), s in summaries.items():
        lines.append(f"{trace_name:<20}{scheme:<24}{s.mean_utilization:>16.0%}{s.mean_internal_waste:>14.0%}"
                     f"{s.mean_reserved_unused:>16.0%}{s.mean_external_fragmentation:>12.0%}{s.mean_running:>9.1f}"
                     f"{s.waiting_steps:>9}{s.num_preemptions:>10}{s.num_steps:>7}")
    return "\n".join(lines)


def paper_table(summaries: Summaries, traces: Sequence[str] = ("random", "shared prefix", "random, max_tokens")) -> str:
    """The paper's share of reserved slots holding tokens, then each trace's naive and paged share."""
    prior = f"{PAPER_PRIOR[0]:.0%}-{PAPER_PRIOR[1]:.0%}"
    lines = [f"{'':<42}{'naive / prior systems':>22}{'paged / vLLM':>14}",
             f"{'PagedAttention paper':<42}{prior:>22}{PAPER_VLLM:>14.0%}"]
    for trace_name in traces:
        a, b = summaries[(trace_name, "naive")], summaries[(trace_name, "paged")]
        lines.append(f"{'this notebook, ' + trace_name + ' trace':<42}{a.mean_utilization:>22.0%}"
                     f"{b.mean_utilization:>14.0%}")
    return "\n".join(lines)


def explain_waste(summaries: Summaries, *, max_model_len: int, block_size: int) -> str:
    """Why each scheme's share is what it is, against the paper; what paging and prefix caching did to serving.

    Naive: a request holding t tokens in a max_model_len reservation uses about t / max_model_len
    of it. Paged: the waste is the empty tail of a last block, about (block_size - 1) / 2 slots,
    so the share reaches the paper's 96% only once a request holds about 24 times that.
    Reads the ("random", ...), ("random, max_tokens", "naive") and ("shared prefix", ...) runs."""
    n, p = summaries[("random", "naive")], summaries[("random", "paged")]
    prior = f"{PAPER_PRIOR[0]:.0%}-{PAPER_PRIOR[1]:.0%}"
    where = ("inside" if PAPER_PRIOR[0] <= n.mean_utilization <= PAPER_PRIOR[1]
             else "below" if n.mean_utilization < PAPER_PRIOR[0] else "above")
    lines = [(f"Naive: a live request held {n.mean_request_tokens:.0f} tokens on average in a {max_model_len}-slot "
              f"reservation, so {n.mean_utilization:.0%} of reserved slots held tokens: {where} the paper's {prior}.")]
    if where != "inside":
        lines.append(f"  The share is roughly (tokens a request holds) / max_model_len, so it moves with the trace: "
                     f"{'longer' if where == 'above' else 'shorter'} requests relative to max_model_len than in the "
                     "paper's traces.")
    lines.append(f"Paged: a live request wasted {p.mean_request_waste:.1f} slots on average in its last block "
                 f"(about (block size - 1) / 2 = {(block_size - 1) / 2:.1f} expected), beside "
                 f"{p.mean_request_tokens:.0f} tokens, so {p.mean_utilization:.0%} of reserved slots held tokens.")
    if p.mean_utilization >= PAPER_VLLM - 0.005:
        lines.append(f"  That matches the paper's {PAPER_VLLM:.0%}.")
    else:
        needed = p.mean_request_waste * PAPER_VLLM / (1 - PAPER_VLLM)  # tokens per request at which that waste is 4 %
        lines.append(f"  Below the paper's {PAPER_VLLM:.0%} mainly because our requests are short: with "
                     f"{p.mean_request_waste:.1f} wasted slots, a request must hold about {needed:.0f} tokens for the "
                     f"waste to be {1 - PAPER_VLLM:.0%}; ours hold {p.mean_request_tokens:.0f}. The waste per request "
                     "is bounded by the block size, not by max_model_len.")
    gain, faster = p.mean_running / n.mean_running, n.num_steps / p.num_steps
    lines.append(f"Effect on serving: paged ran {p.mean_running:.1f} requests at a time against {n.mean_running:.1f} "
                 f"({gain:.1f}x), queued {p.waiting_steps} request-steps against {n.waiting_steps}, and finished the "
                 f"trace in {p.num_steps} steps instead of {n.num_steps} ({faster:.1f}x sooner), with "
                 f"{p.num_preemptions} preemptions.")
    c = summaries[("random, max_tokens", "naive")]
    lines.append(f"With per-request max_tokens the naive cache reserves less ({c.mean_utilization:.0%} of reserved slots "
                 f"hold tokens), but {c.mean_external_fragmentation:.0%} of the pool sat in holes too short for the "
                 "next request on average: external fragmentation, which paging does not have.")
    sp, sc = summaries[("shared prefix", "paged")], summaries[("shared prefix", "paged + prefix caching")]
    served = sc.mean_utilization / (1 - sc.sharing_saving)  # request-tokens served per reserved slot
    lines.append(f"Prefix caching stored {sc.sharing_saving:.0%} fewer token slots than the requests see, so each "
                 f"reserved slot served {served:.2f} request-tokens, and it ran {sc.mean_running:.1f} requests at a "
                 f"time against {sp.mean_running:.1f} ({sc.num_preemptions} preemptions against {sp.num_preemptions}).")
    if sc.mean_utilization < sp.mean_utilization:
        lines.append(f"  Its tokens/reserved is lower ({sc.mean_utilization:.0%} against {sp.mean_utilization:.0%}) "
                     "although it wastes no more: shared blocks count once, so fewer token slots stand beside the "
                     "same partly filled last blocks.")
    return "\n".join(lines)


def explain_capacity(rows: Sequence[Capacity], mix: LengthMix, max_model_len: int) -> str:
    """What ``helpers.paged.capacity.lab_capacity``'s rows (naive, exact, paged at the server's block
    size, then any smaller block size) say about the lab's requests in this pool."""
    naive, exact, paged = rows[0], rows[1], rows[2]
    left_out = mix.num_requests - naive.num_fit
    lines = [f"Reserving max_model_len ({max_model_len:,} slots) each, {naive.num_fit} of the lab's {mix.num_requests} "
             f"requests hold memory at once" + (f"; the other {left_out} wait for one to finish." if left_out else ".")]
    held = paged.slots_per_request * paged.num_requests / paged.pool_slots  # every request at full length
    fits = f"all of them fit, together {share(held)} of the pool" if paged.all_fit else f"{paged.num_fit} fit"
    lines.append(f"With blocks of {paged.unit_slots}, {fits}; the pool could hold {paged.max_requests:,} requests of "
                 f"this mix, {paged.max_requests / naive.max_requests:.1f}x the naive {naive.max_requests:,}.")
    tail = paged.slots_per_request - exact.slots_per_request  # empty slots of last blocks, per request
    tail_text = f"{tail:.0f}" if tail == 0 or tail >= 1 else f"{tail:.2g}"  # a few empty slots never read as 0
    compared = ("fewer requests of this mix than" if paged.max_requests < exact.max_requests
                else "as many requests of this mix as")
    lines.append(f"With blocks of {paged.unit_slots}, {share(paged.token_share)} of the held slots hold tokens at full "
                 f"length: the empty tails of last blocks cost {tail_text} slots per request on average, so paging holds "
                 f"{compared} the contiguous row with exact reservations ({paged.max_requests:,} against "
                 f"{exact.max_requests:,}). That row is an ideal: it needs every client to state an exact max_tokens, "
                 "and no hole ever to form.")
    for small in rows[3:]:
        lines.append(f"Blocks of {small.unit_slots} would leave " + (
            f"no empty tail at all on this mix (every request's length is a multiple of {small.unit_slots})."
            if small.token_share == 1 else f"{share(1 - small.token_share)} of the held slots empty on this mix."))
    return "\n".join(lines)


def explain_prefix_hits(first: tuple[int, int], second: tuple[int, int], *, shared_tokens: int, block_size: int) -> str:
    """Two requests sharing ``shared_tokens`` leading tokens, sent one after the other: each one's
    (prefix-cache queries, hits) in tokens, from ``/metrics``; and whether the second found
    exactly the shared part's full blocks (shared_tokens // block_size of them).

    >>> print(explain_prefix_hits((624, 0), (624, 512), shared_tokens=600, block_size=128))
    first request   prefix-cache queries + 624 tokens, hits +   0 tokens
    second request  prefix-cache queries + 624 tokens, hits + 512 tokens
    The second request found exactly the 512 tokens in the shared part's full blocks (4 blocks of 128): they were not computed or stored again.
    """
    expected = shared_tokens // block_size * block_size
    lines = [f"{name:<15} prefix-cache queries +{queries:>4} tokens, hits +{hits:>4} tokens"
             for name, (queries, hits) in (("first request", first), ("second request", second))]
    hits = second[1]
    if hits == expected:
        lines.append(f"The second request found exactly the {expected} tokens in the shared part's full blocks "
                     f"({expected // block_size} blocks of {block_size}): they were not computed or stored again.")
    elif hits == 0:
        lines.append("No hits: is prefix caching off on this server? (start_server(enable_prefix_caching=True))")
    else:
        lines.append(f"The second request found {hits} tokens in the cache; full blocks of the shared part hold "
                     f"{expected}.")
    return "\n".join(lines)
