"""What held a batch back, the cap or the KV pool, said from a run's own counters (notebook 05).

Each sentence is chosen by the numbers it prints: a cap that was never reached did not make requests wait, a pool
under which the batch still reached the cap was not the limit, and a step that took as long with more requests did
not get slower "because it carried more". ``Measurement`` objects come from :mod:`helpers.tuning.measure`.

Example::

    >>> from helpers.tuning.measurement import Measurement
    >>> print(explain_small_pool(Measurement.not_run("KV pool", "0.05 GiB", "no server"), cap=256))
    0.05 GiB: not run: no server.
"""

from __future__ import annotations

from typing import Any

from helpers.units import duration

SLOWER = 1.10  # a time per output token at least 10% longer counts as slower (the course's loads repeat within it)


def explain_batch_cap(capped: Any, default: Any, default_cap: Any) -> str:
    """The load at a small ``max_num_seqs`` (``capped``, the "8" run) against the default cap's run: how many ran at
    once, who waited, and what a token cost at each. ``default_cap``: the default cap as the notebook names it."""
    if not (capped.comparable and default.comparable):
        return " ".join(t for t in (capped.trouble(), default.trouble()) if t) or "One of the two runs did not finish."
    small, big = capped.summary, default.summary
    ran, ran_big = capped.engine.peak_running, default.engine.peak_running
    waited = ("and the rest waited" if small.num_requests > ran else "so none of its requests had to wait")
    ttft = (f"median TTFT {duration(small.ttft_p50_s)} (p95 {duration(small.ttft_p95_s)}); at {default_cap} it ran up "
            f"to {ran_big}: median TTFT {duration(big.ttft_p50_s)} (p95 {duration(big.ttft_p95_s)})")
    head = f"At {capped.setting} the engine ran at most {ran} requests at once, {waited}: {ttft}."
    if not (small.tpot_mean_ms and big.tpot_mean_ms):
        return head
    tokens = f"{duration(big.tpot_mean_ms / 1000)} against {duration(small.tpot_mean_ms / 1000)}"
    ratio = big.tpot_mean_ms / small.tpot_mean_ms
    if ratio >= SLOWER and ran_big > ran:
        return f"{head} Each output token took longer with the bigger batch ({tokens}): every step carried more requests."
    if ratio <= 1 / SLOWER:
        return f"{head} Each output token took less time at {default_cap} ({tokens})."
    return (f"{head} Each output token took about as long at both ({tokens}, within 10%): the bigger steps cost "
            "little more than the small ones here.")


def explain_small_pool(small_pool: Any, cap: Any) -> str:
    """The run on a small KV pool: whether the pool or ``max_num_seqs`` (``cap``) bounded the batch, by its peak."""
    if not small_pool.comparable:
        return small_pool.trouble() or f"{small_pool.setting}: the run did not finish."
    ran, preempted = small_pool.engine.peak_running, small_pool.num_preemptions
    cap_value = int(cap) if isinstance(cap, (int, float)) else small_pool.max_num_seqs
    evictions = (f"; it preempted {preempted} request{'s' * (preempted != 1)} to free blocks" if preempted
                 else "; nothing was preempted")
    if cap_value is not None and ran >= cap_value:
        return (f"The {small_pool.setting} KV pool still ran {ran} requests at once, the cap of max_num_seqs={cap}: "
                f"here the cap, not the pool, bounded the batch{evictions}.")
    return (f"The {small_pool.setting} KV pool ran at most {ran} requests at once with max_num_seqs={cap}: the pool, "
            f"not the cap, was the limit{evictions}.")
