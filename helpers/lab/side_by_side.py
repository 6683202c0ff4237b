"""The lab's two settings measured side by side: both servers up at once, the settings taking turns.

The lab measures its two settings side by side (:func:`run_side_by_side`): both servers up at
once, each with a KV pool the lab fits in, and the settings taking turns, the order flipped every
repetition, so that a slow spell of the machine lands on both. On a GPU a small model's step is
mostly the host CPU's work, and one setting's runs after the other's, on servers started minutes
apart, let a slow spell land on one setting: on the H200 (SmolLM2, 2026-12-04) lab 1's five
8-slot runs came in two groups, 2,297-2,386 and 3,271-3,375 output tok/s, and its 64/8 ratio read
4.94x, where 8 alternating pairs on two servers up at once measured 3.87x (pairs 3.43-4.68x) and
notebook 04 predicted 4.04x (``scripts/bench_lab_pairs.py``, ``results/gpu/README.md``).

On a CPU the two servers start together (:func:`helpers.serve.together.start_together`): on the
2-core EPYC (AVX-512 BF16, 2026-12-04) both were ready in 23.3 s against 39.7 s one after the other
(``scripts/bench_start_together.py``, ``results/cpu/start_together-2026-12-04.json``). While one
setting runs the other's server is idle (about 0.02 of a core). The script's six loads of the
8-slot server alone and six beside the idle one had medians of 127.0 and 128.2 output tok/s (loads
spread 119-135); two earlier checks the same evening read 3.5% and 7% slower beside it. Both
settings run beside the other's idle server, so the ratio sees any such cost on both sides.
Where the memory does not hold both, the settings run one after the other (:func:`helpers.lab.sweep.run_sweep`).

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
from helpers.serve.server import VLLMServer, with_settings
from helpers.serve.standby import STANDING_BY, standing_by_pids
from helpers.serve.together import start_together

CHAT_TEMPLATE_TOKENS = 40  # what a chat template adds around a prompt (about 30 on SmolLM2), with room


async def run_side_by_side(settings: Sequence[int], plan: SweepPlan, out: Path | str, *, fit: Fit | None = None,
                           attempts: int = 1, quiet: bool = False,
                           kv_cache_space_gib: float | None = None) -> SweepResult:
    """Like :func:`run_sweep`, with every setting's server up at once and the settings taking turns:
    repetition r of each setting (the order flipped every repetition) before repetition r + 1.

    ``kv_cache_space_gib``: each server's KV pool (default :func:`lab_kv_gib`: what the plan's load
    needs, with room to spare); vLLM's default would give the first server 92% of the GPU and leave
    the next none. On a GPU each server also gets an equal share of ``gpu_memory_utilization``
    (notebook 06's replicas' rule, ``helpers.serve.config.GPU_SHARE``): vLLM checks at start-up that
    its utilization's share of the GPU is free, whatever KV pool it is given.

    On a CPU the servers start together (:func:`helpers.serve.together.start_together`); where they
    cannot (not enough memory for all of them), the settings are measured one after the other
    (:func:`helpers.lab.sweep.run_sweep`), with a line that says why. On a GPU they start one after
    the other; where the first starts and a later one does not (two copies of a large model on a
    smaller GPU), the started servers stop and the settings are measured one after the other
    (:func:`helpers.lab.sweep.run_sweep`), with a line that says why. Where the first does not
    start, every load test is marked not run. A server that dies during the load tests has its
    remaining ones marked not run while the others go on. Every run records ``side_by_side`` (the
    settings whose servers were up).
    """
    check_sweep(settings, plan, default_max_model_len())
    attempts = validate.positive_int(attempts, "attempts")
    memory = server_memory(settings, plan, kv_cache_space_gib)
    result = SweepResult(plan=plan)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    others = sweep.other_vllm_servers(exclude_pids=standing_by_pids())  # its own, started ahead, are not others
    with ExitStack() as stack:
        servers = (_start_together_on_a_cpu(settings, memory, quiet, stack) if detect_device() == "cpu" else
                   _start_one_by_one(settings, attempts, quiet, memory, stack, result, out, started_at))
        if servers is None:  # the first server did not start: every load test is marked not run
            return result
        if len(servers) == len(settings):
            await _take_turns(servers, result, fit, others, out, quiet, started_at)
    if len(servers) < len(settings):  # leaving the with-block stopped the servers that did start
        return await sweep.run_sweep(settings, plan, out, fit=fit, attempts=attempts, quiet=quiet)
    if result.not_run:
        print(result.describe_not_run() + f"\n(saved in {result.not_run_file})", flush=True)
    return result


def lab_servers(settings: Sequence[int], plan: SweepPlan, kv_cache_space_gib: float | None = None
                ) -> dict[str, dict[str, Any]]:
    """Each setting's server as :func:`run_side_by_side` starts it, label -> settings: for
    :func:`helpers.serve.ahead.start_ahead`, so that a lab can start them before the experiment.

    >>> lab_servers((8, 64), SweepPlan(2, 50, 64), kv_cache_space_gib=1.0)  # doctest: +SKIP
    {'max_num_seqs=8': {'max_num_seqs': 8, 'kv_cache_space_gib': 1.0}, 'max_num_seqs=64': {...}}
    """
    memory = server_memory(settings, plan, kv_cache_space_gib)
    return {f"max_num_seqs={n}": {"max_num_seqs": n, **memory} for n in settings}


def server_memory(settings: Sequence[int], plan: SweepPlan, kv_cache_space_gib: float | None) -> dict[str, Any]:
    """Every server's memory settings: the KV pool (default :func:`lab_kv_gib`) and, on a GPU, an equal share
    of ``gpu_memory_utilization``: vLLM refuses a start unless its utilization's share of the GPU is free."""
    memory: dict[str, Any] = {"kv_cache_space_gib": kv_cache_space_gib if kv_cache_space_gib is not None
                              else lab_kv_gib(plan)}
    if detect_device() == "cuda":
        memory["gpu_memory_utilization"] = round(GPU_SHARE / len(settings), 2)
    return memory


def _start_together_on_a_cpu(settings: Sequence[int], memory: dict[str, Any], quiet: bool,
                             stack: ExitStack) -> dict[int, Any]:
    """Every setting's server, started at once (:func:`helpers.serve.together.start_together`: on a CPU a start is
    mostly one process importing vLLM on one core, so two starts launched together take little longer than one);
    none (an empty dict) where they cannot all start together, with a line that says why."""
    servers = [VLLMServer(max_num_seqs=n, **memory) for n in settings]
    try:
        start_together(servers, labels=[f"max_num_seqs={n}" for n in settings], quiet=quiet)
    except START_ERRORS as error:
        print(f"The servers did not start together ({start_failure(error)}): "
              "measuring the settings one after the other instead.", flush=True)
        return {}
    for server in servers:
        stack.enter_context(server)  # stopped when the caller's with-block ends
    if quiet:
        print(", ".join(f"max_num_seqs={n}: server ready in {s.startup_seconds:.0f} s" for n, s in zip(settings, servers))
              + f" (started together; KV pool {memory['kv_cache_space_gib']:g} GiB each)", flush=True)
    return dict(zip(settings, servers))


def _start_one_by_one(settings: Sequence[int], attempts: int, quiet: bool, memory: dict[str, Any], stack: ExitStack,
                      result: SweepResult, out: Path | str, started_at: str) -> dict[int, Any] | None:
    """Every setting's server, one after the other (a GPU); those that started before one that did not (the caller
    then measures one after the other), or None where the first did not (every load test marked not run). A server
    standing by (lab 1's check keeps its own) comes first, so that a fresh start that fails beside it is the later
    one: the settings are then measured one after the other, and leaving the caller's block stops it."""
    servers: dict[int, Any] = {}
    standing = [n for n in settings if with_settings(None, {"max_num_seqs": n, **memory}) in STANDING_BY]
    for max_num_seqs in [*standing, *(n for n in settings if n not in standing)]:
        try:
            servers[max_num_seqs] = stack.enter_context(start_with_retries(max_num_seqs, attempts, quiet, **memory))
        except START_ERRORS as error:
            why = start_failure(error)
            if servers:
                print(f"The server at max_num_seqs={max_num_seqs} did not start beside the others ({why}): "
                      "measuring the settings one after the other instead.", flush=True)
                return servers
            for setting in settings:
                mark_not_run(result, setting, 0, f"server at max_num_seqs={max_num_seqs} did not start: {why}",
                             out, started_at)
            print(result.describe_not_run(), flush=True)
            return None
        if quiet:
            print(f"max_num_seqs={max_num_seqs}: server ready in {servers[max_num_seqs].startup_seconds:.0f} s "
                  f"(KV pool {memory['kv_cache_space_gib']:g} GiB)", flush=True)
    return {n: servers[n] for n in settings}  # the settings' order: the first one's server sizes the load


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
    ``bytes_per_token`` (default: the served model's, ``helpers.serve.model.resolve_model``, in the
    dtype this machine serves it: float32 on a CPU without bfloat16 arithmetic doubles it; 4 GiB
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
            bytes_per_token = kv_bytes_per_token(load_config(resolve_model().model), dtype_bytes=_served_bytes())
        except (OSError, ValueError, KeyError, CourseError):
            return 4.0
    tokens = plan.num_requests * (max(LAB_PROMPT_LENS) + CHAT_TEMPLATE_TOKENS + plan.output_tokens)
    return round(max(0.25, 1.5 * tokens * bytes_per_token / 2**30), 2)


def _served_bytes() -> int | None:
    """4 where this machine serves float32 (a CPU without bfloat16 arithmetic), else None (the model's own dtype)."""
    if detect_device() != "cpu":
        return None
    from helpers.hardware import detect_cpu
    from helpers.serve.config import cpu_dtype

    return 4 if cpu_dtype(detect_cpu())[0] == "float32" else None
