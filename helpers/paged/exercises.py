"""Automatic checks for the exercises of the PagedAttention notebook (``notebooks/03_paged_attention.ipynb``).

Each exercise has a pure ``grade_*`` function, which works out the right answer with the
course's own helpers (the allocator, the simulator, the capacity arithmetic) rather than
from a stored constant, and returns a :class:`helpers.feedback.Feedback`; and a ``check_*``
function, which the notebook calls: it prints the feedback (``show(graded(...))``) and never
raises, so a notebook whose answers are still ``None`` runs from top to bottom in CI. Worked solutions are in
``docs/solutions/03_paged_attention.md``, out of the learner's way.

Example::

    >>> grade_blocks_after_tokens((3, 11)).ok
    True
    >>> check_blocks_after_tokens(None)
    ✏️ No answer yet: set `answer` to (blocks, empty_slots) and run the cell again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helpers import answer_audit
from helpers.feedback import Feedback, graded, not_answered, show
from helpers.paged.cache import PagedKVCache
from helpers.paged.capacity import LAB_MIX, LengthMix, fit
from helpers.paged.kv_math import blocks_for
from helpers.paged.sim import simulate_allocator
from helpers.paged.sim_summary import summarize_kv_run
from helpers.paged.trace import random_trace, shared_prefix_trace


def _as_ints(answer: Any, n: int) -> tuple[int, ...] | None:
    """`answer` as a tuple of n ints, or None when it has another shape."""
    try:
        values = tuple(answer) if n > 1 else (answer,)
        if len(values) == n and all(float(v) == int(v) for v in values):
            return tuple(int(v) for v in values)
    except (TypeError, ValueError):
        pass
    return None


# ----- exercise 1: a block table after 37 tokens ---------------------------------------------------
def blocks_after_tokens(num_tokens: int = 37, block_size: int = 16) -> tuple[int, int]:
    """(blocks in the block table, empty slots in them) for one request, asked of the real allocator.

    >>> blocks_after_tokens(37, 16)
    (3, 11)
    """
    cache = PagedKVCache(num_blocks=num_tokens + 1, block_size=block_size)
    cache.allocate("r", list(range(num_tokens)))
    usage = cache.usage()
    return len(cache.block_table("r")), usage.internal_waste_slots


def grade_blocks_after_tokens(answer: Any, num_tokens: int = 37, block_size: int = 16) -> Feedback:
    blocks, empty = blocks_after_tokens(num_tokens, block_size)
    answer_audit.expect("blocks after tokens", blocks, empty)
    if answer is None:
        return not_answered("(blocks, empty_slots)")
    given = _as_ints(answer, 2)
    if given is None:
        return Feedback(False, "Give two whole numbers: (blocks in the block table, empty slots in those blocks).")
    if given == (blocks, empty):
        last = num_tokens - (blocks - 1) * block_size  # tokens in the last block
        return Feedback(True, f"Correct: {num_tokens} tokens fill {blocks - 1} blocks of {block_size} and {last} "
                              f"slots of block {blocks}, leaving {empty} empty.")
    if given[0] != blocks:
        hint = f"Not quite: count blocks of {block_size} and round up; the partly filled last block counts too."
    else:
        hint = (f"The block count is right; the empty slots are the rest of the last block "
                f"(blocks × {block_size} − tokens).")
    return Feedback(False, hint)


def check_blocks_after_tokens(answer: Any) -> None:
    """Exercise 1: a request holds 37 tokens, block size 16. Blocks held? Empty slots in them?"""
    show(graded(grade_blocks_after_tokens, answer))


# ----- exercise 2: how much of a system prompt can be shared ----------------------------------------
def shared_blocks(block_size: int, system_prompt_len: int = 64) -> int:
    """Blocks two requests with the same system prompt share under prefix caching, from the allocator.

    >>> shared_blocks(16), shared_blocks(128)
    (4, 0)
    """
    first, second = shared_prefix_trace(num_requests=2, seed=0, system_prompt_len=system_prompt_len)[:2]
    need = sum(blocks_for(len(r.prompt_token_ids), block_size) for r in (first, second))
    cache = PagedKVCache(num_blocks=need, block_size=block_size, enable_prefix_caching=True)
    cache.allocate(first.request_id, first.prompt_token_ids)
    cache.allocate(second.request_id, second.prompt_token_ids)
    return cache.usage().shared_blocks


def grade_shared_blocks(answer: Any, block_sizes: tuple[int, int] = (16, 128), system_prompt_len: int = 64) -> Feedback:
    right = tuple(shared_blocks(bs, system_prompt_len) for bs in block_sizes)
    answer_audit.expect("shared blocks", *right)
    if answer is None:
        return not_answered(f"(shared_at_{block_sizes[0]}, shared_at_{block_sizes[1]})")
    given = _as_ints(answer, 2)
    if given is None:
        return Feedback(False, "Give two whole numbers, one per block size.")
    if given == right:
        unshared = system_prompt_len - right[1] * block_sizes[1]  # tokens each request stores for itself
        return Feedback(True, f"Correct: only full blocks are shared. At {block_sizes[0]} the "
                              f"{system_prompt_len}-token system prompt fills {right[0]} blocks; at {block_sizes[1]} "
                              f"it fills {right[1]}, so every request keeps its own copy of {unshared} "
                              "system-prompt tokens.")
    return Feedback(False, "Not quite: a block is shared only when it is full and every token in it and before it "
                           "matches. How many full blocks does a 64-token prefix make at each size?")


def check_shared_blocks(answer: Any) -> None:
    """Exercise 2: blocks of a 64-token system prompt shared at block size 16, and at 128."""
    show(graded(grade_shared_blocks, answer))


# ----- exercise 3: the block size that wastes least -------------------------------------------------
BLOCK_SIZE_CHOICES = (8, 16, 32, 64)
POOL_SLOTS = 1024  # the same memory for every block size


def utilization_by_block_size(
    block_sizes: Sequence[int] = BLOCK_SIZE_CHOICES, seed: int = 0, max_model_len: int = 256
) -> dict[int, float]:
    """Share of reserved slots holding tokens on `random_trace(seed)`, one paged run per block size."""
    trace = random_trace(seed=seed, max_model_len=max_model_len)
    return {
        bs: summarize_kv_run(simulate_allocator(trace, PagedKVCache(POOL_SLOTS // bs, bs))).mean_utilization
        for bs in block_sizes
    }


def grade_best_block_size(answer: Any) -> Feedback:
    if answer is None:
        return not_answered("one block size: " + ", ".join(map(str, BLOCK_SIZE_CHOICES)))
    by_size = utilization_by_block_size()
    best = max(by_size, key=by_size.get)
    given = _as_ints(answer, 1)
    table = ", ".join(f"{bs}: {u:.1%}" for bs, u in by_size.items())
    if given is None or given[0] not in by_size:
        return Feedback(False, f"Pick one of {BLOCK_SIZE_CHOICES}.")
    if given[0] == best:
        return Feedback(True, f"Correct: block size {best} wastes least ({table} of reserved slots hold tokens). "
                              "A request wastes at most block_size − 1 slots, in its last block. Now say why "
                              "vLLM still uses 16 on GPU and 128 on CPU (see the summary).")
    return Feedback(False, f"Not the best here: block size {given[0]} keeps {by_size[given[0]]:.1%} of reserved slots "
                           "busy. Where is a paged request's only waste, and how big can it be?")


def check_best_block_size(answer: Any) -> None:
    """Exercise 3: which block size of 8, 16, 32, 64 wastes least on the default random trace?"""
    show(graded(grade_best_block_size, answer))


# ----- exercise 4: the lab on a smaller GPU pool ----------------------------------------------------
GPU_POOL_SLOTS = 12_000  # token slots of a hypothetical small GPU pool
GPU_BLOCK_SIZE = 16
GPU_MAX_MODEL_LEN = 4096


def lab_fit_on_gpu_pool(mix: LengthMix = LAB_MIX) -> tuple[int, int]:
    """(naive, paged) count of the mix's requests that hold memory at once on the exercise's GPU pool.

    >>> lab_fit_on_gpu_pool()
    (2, 43)
    """
    naive = fit(mix, GPU_POOL_SLOTS, scheme="naive", max_model_len=GPU_MAX_MODEL_LEN)
    paged = fit(mix, GPU_POOL_SLOTS, scheme="paged", block_size=GPU_BLOCK_SIZE)
    return naive.num_fit, paged.num_fit


def grade_lab_fit(answer: Any) -> Feedback:
    right = lab_fit_on_gpu_pool()
    answer_audit.expect("the lab on a GPU pool", *right)
    if answer is None:
        return not_answered("(naive, paged)")
    given = _as_ints(answer, 2)
    if given is None:
        return Feedback(False, "Give two whole numbers: (requests that fit naively, requests that fit paged).")
    if given == right:
        return Feedback(True, f"Correct: {right[0]} naive (each reserves {GPU_MAX_MODEL_LEN} slots) against "
                              f"{right[1]} paged, counting each request at its longest in whole blocks of "
                              f"{GPU_BLOCK_SIZE}.")
    wrong = [name for name, g, r in zip(("naive", "paged"), given, right) if g != r]
    return Feedback(False, f"The {' and '.join(wrong)} count is off. Naive: how many {GPU_MAX_MODEL_LEN}-slot runs fit "
                           f"in {GPU_POOL_SLOTS:,} slots? Paged: add up blocks of {GPU_BLOCK_SIZE} per request, "
                           "in the mix's order (16, 64, 256, 512-token prompts, +64 output), until the pool is full.")


def check_lab_fit(answer: Any) -> None:
    """Exercise 4: how many of the lab's 50 requests fit at once on the exercise's GPU pool, naive vs paged?"""
    show(graded(grade_lab_fit, answer))
