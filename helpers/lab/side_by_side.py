"""The lab's two settings measured side by side on a GPU: both servers up at once, the settings taking turns.

On a GPU the lab measures its two settings side by side (:func:`run_side_by_side`): both servers
up at once, each with a KV pool the lab fits in, and the settings taking turns, the order flipped
every repetition. A small model's step there is mostly the host CPU's work, and one setting's
runs after the other's, on servers started minutes apart, let a slow spell of the host land on
one setting: on the H200 (SmolLM2, 2026-12-04) lab 1's five 8-slot runs came in two groups,
2,297-2,386 and 3,271-3,375 output tok/s, and its 64/8 ratio read 4.94x, where 8 alternating
pairs on two servers up at once measured 3.87x (pairs 3.43-4.68x) and notebook 04 predicted 4.04x
(``scripts/bench_lab_pairs.py``, ``results/gpu/README.md``). On a CPU two servers would share its
two cores, so the lab keeps :func:`helpers.lab.sweep.run_sweep` there.

Each load test is :func:`helpers.lab.sweep.run_one_load`, the same as :func:`helpers.lab.sweep.run_sweep`'s:
warmed first on a GPU, saved with its records, a server's death marking its setting's later tests not run.
Taught in ``labs/01_concurrency_lab.ipynb``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.errors import CourseError
from helpers.hardware import detect_device
from helpers.lab import sweep
from helpers.lab.sweep import (
    START_ERRORS,
    Fit,
    SweepPlan,
    SweepResult,
    check_sweep,
    default_max_model_len,
    fit_on,
    mark_not_run,
    run_one_load,
    start_failure,
    start_with_retries,
)
from helpers.load.workload import LAB_PROMPT_LENS
from helpers.serve.config import GPU_SHARE

CHAT_TEMPLATE_TOKENS = 40  # what a chat template adds around a prompt (about 30 on SmolLM2), with room


async def run_side_by_side(settings: Sequence[int], plan: SweepPlan, out: Path | str, *, fit: Fit | None = None,
                           attempts: int = 1, quiet: bool = False,
                           kv_cache_space_gib: float | None = None) -> SweepResult:
    """Like :func:`run_sweep`, with every setting's server up at once and the settings taking turns:
    repetition r of each setting (the order flipped every repetition) before repetition r + 1.

    ``kv_cache_space_gib``: each server's KV pool (default :func:`lab_kv_gib`: what the plan's load
    needs, with room to spare); vLLM's default would give the first server 90% of the GPU and leave
    the next none. On a GPU each server also gets an equal share of ``gpu_memory_utilization``
    (notebook 06's replicas' rule, ``helpers.serve.config.GPU_SHARE``): vLLM checks at start-up that
    its utilization's share of the GPU is free, whatever KV pool it is given.

    Where the first server starts and a later one does not (two copies of a large model on a
    smaller GPU), the started servers stop and the settings are measured one after the other
    (:func:`helpers.lab.sweep.run_sweep`), with a line that says why. Where the first does not
    start, every load test is marked not run. A server that dies during the load tests has its
    remaining ones marked not run while the others go on. Every run records ``side_by_side`` (the
    settings whose servers were up).
    """
    check_sweep(settings, plan, default_max_model_len())
    attempts = validate.positive_int(attempts, "attempts")
    gib = kv_cache_space_gib if kv_cache_space_gib is not None else lab_kv_gib(plan)
    result = SweepResult(plan=plan)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    others = sweep.other_vllm_servers()
    memory = {"kv_cache_space_gib": gib}
    if detect_device() == "cuda":  # vLLM refuses a start unless its utilization's share of the GPU is free
        memory["gpu_memory_utilization"] = round(GPU_SHARE / len(settings), 2)
    with ExitStack() as stack:
        servers = {}
        for max_num_seqs in settings:
            try:
                servers[max_num_seqs] = stack.enter_context(start_with_retries(max_num_seqs, attempts, quiet,
                                                                               **memory))
            except START_ERRORS as error:
                why = start_failure(error)
                if servers:
                    print(f"The server at max_num_seqs={max_num_seqs} did not start beside the others ({why}): "
                          "measuring the settings one after the other instead.", flush=True)
                    break
                for setting in settings:
                    mark_not_run(result, setting, 0, f"server at max_num_seqs={max_num_seqs} did not start: {why}",
                                 out, started_at)
                print(result.describe_not_run(), flush=True)
                return result
            if quiet:
                print(f"max_num_seqs={max_num_seqs}: server ready in {servers[max_num_seqs].startup_seconds:.0f} s "
                      f"(KV pool {gib:g} GiB)", flush=True)
        if len(servers) == len(settings):
            await _take_turns(servers, result, fit, others, out, quiet, started_at)
    if len(servers) < len(settings):  # leaving the with-block stopped the servers that did start
        return await sweep.run_sweep(settings, plan, out, fit=fit, attempts=attempts, quiet=quiet)
    if result.not_run:
        print(result.describe_not_run() + f"\n(saved in {result.not_run_file})", flush=True)
    return result


async def _take_turns(servers: dict[int, Any], result: SweepResult, fit: Fit | None, others: int, out: Path | str,
                      quiet: bool, started_at: str) -> None:
    """Size the load on the first server (``fit``), then repetition r of every setting before r + 1, the order
    flipped each time; a setting whose server died drops out."""
    settings = list(servers)
    going = list(settings)
    if fit is not None and not await fit_on(servers[settings[0]], settings[0], fit, result, out, started_at):
        going = going[1:]
    for repetition in range(result.plan.repetitions):
        for max_num_seqs in (going if repetition % 2 == 0 else going[::-1]):
            if not await run_one_load(servers[max_num_seqs], max_num_seqs, repetition, others, result, out, quiet,
                                      started_at, side_by_side=settings):
                going = [n for n in going if n != max_num_seqs]


def lab_kv_gib(plan: SweepPlan, bytes_per_token: int | None = None) -> float:
    """A KV pool (GiB) for one server of :func:`run_side_by_side`: the plan's requests at their longest
    (the lab's longest prompt, a chat template's tokens, every output token), times 1.5, at
    ``bytes_per_token`` (default: the served model's, ``helpers.serve.model.resolve_model``; 4 GiB
    where its config cannot be read), and at least 0.25 GiB.

    >>> lab_kv_gib(SweepPlan(5, 50, 256), bytes_per_token=23_040)  # SmolLM2: 50 x 808 tokens x 22.5 KiB x 1.5
    1.3
    >>> lab_kv_gib(SweepPlan(5, 50, 256), bytes_per_token=131_072)  # Llama-3.1-8B: 128 KiB a token
    7.4
    """
    if bytes_per_token is None:
        from helpers.paged.kv_math import kv_bytes_per_token, load_config
        from helpers.serve.model import resolve_model

        try:
            bytes_per_token = kv_bytes_per_token(load_config(resolve_model().model))
        except (OSError, ValueError, KeyError, CourseError):
            return 4.0
    tokens = plan.num_requests * (max(LAB_PROMPT_LENS) + CHAT_TEMPLATE_TOKENS + plan.output_tokens)
    return round(max(0.25, 1.5 * tokens * bytes_per_token / 2**30), 2)
