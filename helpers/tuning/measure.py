"""What the tuning notebook reads from the world: load tests with ``/metrics`` polled
(:func:`measure`), the server's tokenizer and KV-cache report (:func:`shared_prefix_tokens`,
:func:`kv_pool_bytes`, :func:`capacity_point`) and a checkpoint's files (:func:`served_config`,
:func:`checkpoint_parameters`).
Whether this machine can serve an FP8 KV cache is :func:`helpers.hardware.fp8_kv_refusal`.

Everything here does I/O; what follows from the results is in :mod:`helpers.tuning.measurement`,
:mod:`helpers.tuning.arithmetic` and :mod:`helpers.tuning.comparison`.

In a notebook cell::

    >>> m = await measure(server, workload, lever="KV pool", setting="2 GiB")   # doctest: +SKIP
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.hardware import other_vllm_servers
from helpers.load.client import DEFAULT_TIMEOUT_S, chat_messages
from helpers.load.poller import watch
from helpers.load.run import run_load_test
from helpers.load.warmup import fresh_copy, needs_warm_up, warm_up
from helpers.load.workload import ServerTokenizer, Workload
from helpers.serve.process import death_of
from helpers.serve.standby import standing_by_pids
from helpers.tuning.measurement import CapacityPoint, Measurement

# On the H200 one load of the notebook (64 requests, 1-8 s) measured the same flags up to 1.55x apart in two runs,
# and the lab's five runs on one server spread by 20%: on a GPU a load is repeated and its median run kept. On a
# CPU a load lasts tens of seconds, and a repeat would cost the notebook's time budget.
GPU_REPEATS = 3
# A run this long is not repeated (a slower GPU, a T4, a small pool): the lab's runs of 9 s on the H200 (the 8B
# shape at 8 slots) lay within 1% of each other, and repeats would cost a slow GPU minutes.
LONG_RUN_S = 10.0


def repeats_for(server: Any) -> int:
    """How many times :func:`measure` runs a load on ``server``: :data:`GPU_REPEATS` on a GPU, 1 on a CPU."""
    return GPU_REPEATS if needs_warm_up(server) else 1


async def measure(server: Any, workload: Workload, *, lever: str, setting: str,
                  interval_s: float = 0.25, timeout_s: float = DEFAULT_TIMEOUT_S,
                  progress: bool = True, repeats: int | None = None) -> Measurement:
    """Run ``workload`` against ``server`` (all requests at once) while polling ``/metrics``.

    In a notebook: ``m = await measure(server, workload, lever="KV pool", setting="2 GiB")``.
    Counters (preemptions, prefix-cache hits) are differences over the run, so a server can
    serve several measurements in a row. ``interval_s`` and ``timeout_s`` must be positive,
    finite numbers of seconds (``ValueError`` otherwise, before anything is sent). Other vLLM
    servers on the machine (they share its cores) are counted before and after the run.

    The load runs ``repeats`` times (default :func:`repeats_for`: 3 on a GPU, 1 on a CPU; once where
    its first run lasted :data:`LONG_RUN_S` or more), each repeat with fresh prompts (nothing of an
    earlier run in the prefix cache); the measurement is
    the run with the median output tok/s, whole (its latencies and engine counters are that
    run's), and ``runs_tok_s`` keeps every run's output tok/s, the spread a comparison shows.

    A server that dies during the run ends it at once (its requests fail fast, see
    :func:`~helpers.load.run.run_load_test`): the measurement keeps the requests that finished
    before, counts the rest as failed, and says why in ``failure`` ("server died: exit code -9");
    the comparison code then names it instead of comparing it. Nothing is raised. A run with
    failed requests ends the repeats and is the measurement.
    """
    interval_s = validate.positive_number(interval_s, "interval_s", unit="seconds",
                                          hint="It is how often /metrics is polled, e.g. 0.25.")
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds")
    repeats = repeats_for(server) if repeats is None else validate.positive_int(
        repeats, "repeats", hint="It is how many times the load runs, e.g. 3.")
    label = f"{lever}: {setting}"
    # a GPU server's first load pays one-time costs: an untimed burst of the same shape pays them (helpers.load.warmup)
    await warm_up(server, workload)
    own_pid = getattr(getattr(server, "process", None), "pid", None)
    idle = standing_by_pids()  # this notebook's next servers, started ahead and idle (helpers.serve.ahead)
    others = other_vllm_servers(exclude_pid=own_pid, exclude_pids=idle)
    runs = []
    for index in range(repeats):
        load = workload if index == 0 else fresh_copy(workload, output_tokens=workload.output_tokens)
        run_label = label if repeats == 1 else f"{label} (run {index + 1} of {repeats})"
        runs.append(await watch(run_load_test(server, load, label=run_label, timeout_s=timeout_s,
                                              progress=progress), server, interval_s=interval_s))
        if runs[-1][0].summary.num_errors or (runs[0][0].summary.wall_s or 0.0) >= LONG_RUN_S:
            break
    others = max(others, other_vllm_servers(exclude_pid=own_pid, exclude_pids=idle))
    if others and progress:
        print(f"{label}: {others} other vLLM server(s) ran on this machine during the run; they share its CPU "
              "(or GPU), so these numbers are less reliable than usual.")
    run, samples = _median_run(runs)
    failure = death_of(server) if run.summary.num_errors else None
    m = Measurement(lever, setting, run, samples, getattr(getattr(server, "config", None), "max_num_seqs", None),
                    others, failure=failure, runs_tok_s=tuple(r.summary.output_tok_per_s or 0.0 for r, _ in runs))
    if failure is not None:
        print(f"{lever}: {m.trouble()}")
    return m


def _median_run(runs: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """The run (with its samples) of the median output tok/s; the last, where it had failed requests."""
    if runs[-1][0].summary.num_errors:
        return runs[-1]
    ranked = sorted(runs, key=lambda pair: pair[0].summary.output_tok_per_s or 0.0)
    return ranked[(len(ranked) - 1) // 2]


def shared_prefix_tokens(server: Any, workload: Workload) -> int:
    """Tokens the first two requests of ``workload`` have in common once the server's chat
    template is applied: the most any request can share with another (template, system
    prompt, and the start of the user turn). Asks the server's ``/tokenize``."""
    tokenizer = ServerTokenizer.of(server)
    ids = [tokenizer.encode_chat(chat_messages(spec)) for spec in workload.requests[:2]]
    if len(ids) < 2:
        return 0
    common = 0
    for a, b in zip(*ids):
        if a != b:
            break
        common += 1
    return common


def kv_pool_bytes(server: Any) -> int | None:
    """The bytes of the server's KV pool, as its start-up report has them (``server.kv_cache``, parsed once
    by :func:`helpers.serve.log.parse_kv_cache_report`): the size it was given (``kv_cache_space_gib``), else
    the engine's log line "Available KV cache memory: X GiB" (a GPU sized by ``gpu_memory_utilization``);
    None when neither is known or the server reported no KV cache."""
    kv = getattr(server, "kv_cache", None)
    return kv.memory_bytes if kv is not None and kv.memory_bytes else None


def capacity_point(label: str, server: Any, bytes_per_token: int) -> CapacityPoint:
    """A started server's KV pool as a :class:`CapacityPoint` (its pool size from
    :func:`kv_pool_bytes`, its token count from the engine's report)."""
    kv = server.kv_cache
    if kv is None:
        raise validate.InvalidArgumentError(
            f"the server did not report its KV cache (log: {server.log_path}); pass a started server.")
    return CapacityPoint(label, kv_pool_bytes(server) or 0, bytes_per_token, kv.num_tokens, kv.max_concurrency)


def served_config(model: Any) -> dict[str, Any] | None:
    """The config.json of a :class:`~helpers.serve.model.ModelChoice`: its folder's, or for a hub id the copy
    ``resolve_model`` left in the local Hugging Face cache (nothing is downloaded); None where there is none."""
    if model.source == "hub":
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model.model, "config.json")
        path = Path(cached) if isinstance(cached, str) else None
    else:
        path = Path(model.model) / "config.json"
    return json.loads(path.read_text()) if path is not None and path.is_file() else None


def checkpoint_parameters(model_dir: str | Path) -> int:
    """Parameters actually stored in a folder's ``*.safetensors`` files, read from their headers
    (a little-endian length, then JSON with every tensor's shape): no tensor is loaded."""
    total = 0
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, tensor in header.items():
            if name != "__metadata__":
                count = 1
                for dim in tensor["shape"]:
                    count *= dim
                total += count
    return total
