"""What the tuning notebook reads from the world: load tests with ``/metrics`` polled
(:func:`measure`), the server's tokenizer and log (:func:`shared_prefix_tokens`,
:func:`kv_pool_bytes`, :func:`capacity_point`), this machine's CPU
(:func:`cpu_supports_fp8_kv`) and a checkpoint's files (:func:`checkpoint_parameters`).

Everything here does I/O; what follows from the results is in :mod:`helpers.tuning.measurement`,
:mod:`helpers.tuning.arithmetic` and :mod:`helpers.tuning.comparison`.

In a notebook cell::

    >>> m = await measure(server, workload, lever="KV pool", setting="2 GiB")   # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

from helpers import validate
from helpers.hardware import detect_cpu, other_vllm_servers
from helpers.load.client import DEFAULT_TIMEOUT_S, chat_messages
from helpers.load.poller import watch
from helpers.load.run import run_load_test
from helpers.load.warmup import warm_up
from helpers.load.workload import ServerTokenizer, Workload
from helpers.serve.process import death_of
from helpers.tuning.arithmetic import GIB
from helpers.tuning.measurement import CapacityPoint, Measurement


async def measure(server: Any, workload: Workload, *, lever: str, setting: str,
                  interval_s: float = 0.25, timeout_s: float = DEFAULT_TIMEOUT_S,
                  progress: bool = True) -> Measurement:
    """Run ``workload`` against ``server`` (all requests at once) while polling ``/metrics``.

    In a notebook: ``m = await measure(server, workload, lever="KV pool", setting="2 GiB")``.
    Counters (preemptions, prefix-cache hits) are differences over the run, so a server can
    serve several measurements in a row. ``interval_s`` and ``timeout_s`` must be positive,
    finite numbers of seconds (``ValueError`` otherwise, before anything is sent). Other vLLM
    servers on the machine (they share its cores) are counted before and after the run.

    A server that dies during the run ends it at once (its requests fail fast, see
    :func:`~helpers.load.run.run_load_test`): the measurement keeps the requests that finished
    before, counts the rest as failed, and says why in ``failure`` ("server died: exit code -9");
    the comparison code then names it instead of comparing it. Nothing is raised.
    """
    interval_s = validate.positive_number(interval_s, "interval_s", unit="seconds",
                                          hint="It is how often /metrics is polled, e.g. 0.25.")
    timeout_s = validate.positive_number(timeout_s, "timeout_s", unit="seconds")
    label = f"{lever}: {setting}"
    # a GPU server's first load pays one-time costs: an untimed burst of the same shape pays them (helpers.load.warmup)
    await warm_up(server, workload)
    own_pid = getattr(getattr(server, "process", None), "pid", None)
    others = other_vllm_servers(exclude_pid=own_pid)
    run, samples = await watch(run_load_test(server, workload, label=label, timeout_s=timeout_s,
                                             progress=progress), server, interval_s=interval_s)
    others = max(others, other_vllm_servers(exclude_pid=own_pid))
    if others and progress:
        print(f"{label}: {others} other vLLM server(s) ran on this machine during the run; they share its CPU "
              "(or GPU), so these numbers are less reliable than usual.")
    failure = death_of(server) if run.summary.num_errors else None
    m = Measurement(lever, setting, run, samples, getattr(getattr(server, "config", None), "max_num_seqs", None),
                    others, failure=failure)
    if failure is not None:
        print(f"{lever}: {m.trouble()}")
    return m



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
    """The bytes of the server's KV pool: the size it was given (``kv_cache_space_gib``), else
    the engine's own log line "Available KV cache memory: X GiB" (a GPU sized by
    ``gpu_memory_utilization``); None when neither is known."""
    kv = getattr(server, "kv_cache", None)
    if kv is not None and kv.memory_bytes:
        return int(kv.memory_bytes)
    match = re.search(r"Available KV cache memory: ([\d.]+) GiB", server.log_text())
    return int(float(match.group(1)) * GIB) if match else None


def capacity_point(label: str, server: Any, bytes_per_token: int) -> CapacityPoint:
    """A started server's KV pool as a :class:`CapacityPoint` (its pool size from
    :func:`kv_pool_bytes`, its token count from the engine's report)."""
    kv = server.kv_cache
    if kv is None:
        raise validate.InvalidArgumentError(
            f"the server did not report its KV cache (log: {server.log_path}); pass a started server.")
    return CapacityPoint(label, kv_pool_bytes(server) or 0, bytes_per_token, kv.num_tokens, kv.max_concurrency)


def cpu_supports_fp8_kv() -> bool:
    """Whether vLLM's CPU build can keep the KV cache in FP8 here: its CPU attention kernels
    for FP8 need x86 with AVX-512 or AMX. Follows ``VLLM_COURSE_CPU_ISA=avx2`` too."""
    flags = detect_cpu().flags
    return "avx512f" in flags or "amx_tile" in flags


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
