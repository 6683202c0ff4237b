"""Checks for the tuning notebook's exercises: each works out the right answer from this run's
measurements (or from the model's config) and compares it with the learner's.

Taught in ``notebooks/05_throughput_tuning.ipynb``; worked solutions in
``docs/solutions/05_throughput_tuning.md``. Each exercise has a pure ``grade_*`` function that
returns a :class:`helpers.feedback.Feedback`, and a ``check_*`` function that prints it (what
the notebook's cells call); an unanswered exercise (``None``) never stops the notebook.

Example::

    >>> check_fp8_weight_gib(None)
    ✏️ FP8 weights of a 70B model: not answered yet (set `answer` above and run the cell again).
    >>> check_fp8_weight_gib(65.7)
    ✅ FP8 weights of a 70B model: correct (65.71).
    >>> bool(grade_fp8_weight_gib(131.4))
    False
"""

from __future__ import annotations

from typing import Any

from helpers.answer_audit import made_in
from helpers.feedback import Feedback, grade_choice, grade_number, graded, show
from helpers.paged.kv_math import tokens_that_fit
from helpers.serve.preflight import VLLM_GPU_MEMORY_UTILIZATION
from helpers.tuning.arithmetic import (
    BYTES_PER_WEIGHT,
    GIB,
    LLAMA_31_70B,
    count_parameters,
    ideal_prefix_hits,
)

LEVERS = ("kv pool", "max_num_seqs", "prefix caching", "quantization")


# ----- grading (pure: what tests call) ------------------------------------------------------------
def grade_pool_blocks(answer: Any, pool_bytes: int, bytes_per_token: int | None, block_size: int) -> Feedback:
    """Whole blocks in a pool of ``pool_bytes`` on a server with this KV size per token and block size: a pool the
    notebook does not start, so no cell shows the answer."""
    if bytes_per_token is None:
        return Feedback(False, "This server's model came from the hub without a local config.json, so the notebook "
                               "did not count its KV bytes per token: open its config.json to work them out.")
    blocks = tokens_that_fit(pool_bytes, bytes_per_token, block_size) // block_size
    return grade_number(answer, blocks, name="blocks in the pool",
                        hint="one block holds block_size tokens of KV_BYTES_PER_TOKEN bytes each; count whole "
                             "blocks only (round down).")


def grade_hits_per_request(answer: Any, measurement: Any) -> Feedback:
    """Prompt tokens the prefix cache served a request, on average over the run: its hits (last sample minus the
    first) over its requests."""
    requests = max(measurement.summary.num_requests, 1)
    return grade_number(answer, measurement.prefix_cache_hits / requests, name="cached prompt tokens per request",
                        rel_tol=0.01, hint="the counter counts from the server's start: what did this run add? "
                                           "Then share it among the run's requests.",
                        audit_since=made_in(measurement.run.records))  # numbers shown before the run are not its own


def grade_ideal_hits(answer: Any, num_requests: int, shared_tokens: int, block_size: int) -> Feedback:
    """The most prompt tokens prefix caching can serve: later requests x whole shared blocks."""
    return grade_number(answer, ideal_prefix_hits(num_requests, shared_tokens, block_size),
                        name="best possible prefix-cache hits",
                        hint="the first request finds nothing; only full blocks of the shared part are shared.")


def grade_fp8_tokens(answer: Any, pool_bytes: int, bf16_bytes_per_token: int, block_size: int) -> Feedback:
    """Token slots in the same pool when every K and V value takes 1 byte instead of 2."""
    return grade_number(answer, tokens_that_fit(pool_bytes, bf16_bytes_per_token // 2, block_size),
                        name="KV tokens with an FP8 cache",
                        hint="halve the bytes per token, then count whole blocks only.")


def grade_fp8_weight_gib(answer: Any) -> Feedback:
    """GiB of weights of Llama-3.1-70B's shapes at one byte per weight (the notebook's table shows the 8B's)."""
    return grade_number(answer, count_parameters(LLAMA_31_70B) * BYTES_PER_WEIGHT["fp8"] / GIB,
                        name="FP8 weights of a 70B model", rel_tol=0.01,
                        hint="parameters x 1 byte, divided by 2**30 bytes per GiB.")


H200_GIB = 143_771 / 1024  # an H200's memory as nvidia-smi reports it (143,771 MiB), sold as "141 GB"


def grade_70b_fits_h200(answer: Any) -> Feedback:
    """Whether Llama-3.1-70B's bf16 weights fit the share of one H200 vLLM takes by default: "yes" or "no"."""
    weights = count_parameters(LLAMA_31_70B) * BYTES_PER_WEIGHT["bf16"] / GIB
    share = VLLM_GPU_MEMORY_UTILIZATION * H200_GIB
    fits = weights <= share
    return grade_choice(answer, "yes" if fits else "no", name="70B in bf16 on one H200", options=("yes", "no"),
                        why=f"{weights:.1f} GiB of bf16 weights against {VLLM_GPU_MEMORY_UTILIZATION} x "
                            f"{H200_GIB:.1f} GiB = {share:.1f} GiB that vLLM takes by default"
                            + (", before activations and any KV cache." if fits else
                               ": they do not fit even before activations and the KV cache."))


def grade_first_lever(answer: Any) -> Feedback:
    """A support chatbot: every request repeats the same 1,500-token system prompt."""
    return grade_choice(answer, "prefix caching", name="first lever", options=LEVERS,
                        why="Most of every prompt is the same system prompt: with prefix caching its KV is "
                            "computed once and reused, which cuts prefill work and TTFT for every later request. "
                            "It is on by default in current vLLM, so measuring it first means checking that it "
                            "works: no --no-enable-prefix-caching, nothing that differs before the shared part "
                            "(a timestamp at the top), and vllm:prefix_cache_hits_total / "
                            "vllm:prefix_cache_queries_total on /metrics near the shared share of each prompt.")


# ----- checking (prints the verdict: what the notebook calls) ----------------------------------------
def check_pool_blocks(answer: Any, pool_bytes: int, bytes_per_token: int | None, block_size: int) -> None:
    show(graded(grade_pool_blocks, answer, pool_bytes, bytes_per_token, block_size))


def check_hits_per_request(answer: Any, measurement: Any) -> None:
    show(graded(grade_hits_per_request, answer, measurement))


def check_ideal_hits(answer: Any, num_requests: int, shared_tokens: int, block_size: int) -> None:
    show(graded(grade_ideal_hits, answer, num_requests, shared_tokens, block_size))


def check_fp8_tokens(answer: Any, pool_bytes: int, bf16_bytes_per_token: int, block_size: int) -> None:
    show(graded(grade_fp8_tokens, answer, pool_bytes, bf16_bytes_per_token, block_size))


def check_fp8_weight_gib(answer: Any) -> None:
    show(graded(grade_fp8_weight_gib, answer))


def check_70b_fits_h200(answer: Any) -> None:
    show(graded(grade_70b_fits_h200, answer))


def check_first_lever(answer: Any) -> None:
    show(graded(grade_first_lever, answer))
