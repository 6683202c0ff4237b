"""The module text's tuning command beside a server started with vLLM's defaults: what each server really ran with.

The module's command adds ``--gpu-memory-utilization 0.9 --max-num-seqs 256 --enable-prefix-caching``. What a
server does without them is read from the running server, not assumed:

- the KV pool (bytes and token slots), prefix caching and ``gpu_memory_utilization``: the labels of
  ``vllm:cache_config_info`` on ``/metrics``, and the engine's "KV cache size" log line;
- ``max_num_seqs``: in no metric. The log's ``non-default args: {...}`` line names it when it was passed; when it
  was not, vLLM used its default for the device, which vLLM 0.32 logs only at DEBUG level. :func:`batch_cap`
  then gives :func:`vllm_default_max_num_seqs`, vLLM 0.32's own table (``EngineArgs.get_batch_defaults``), and says
  so; ``tests/test_tuning_command.py`` checks that table against vLLM's function on the machine the tests run on.

On vLLM's CPU build the course always gives the KV pool a size in bytes (``--kv-cache-memory-bytes``, 2 GiB by
default: :mod:`helpers.serve.config`), because the CPU build otherwise sizes it as ``--gpu-memory-utilization`` x
the machine's *total* RAM (minus what the process holds) and refuses to start when less than that is free. With an
explicit size the CPU build ignores the fraction entirely, so on a CPU the module's 0.9 changes nothing: the
server's ``cache_config_info`` shows it, and the same pool. Pure: labels and log text in, rows out.
Taught in ``notebooks/05_throughput_tuning.ipynb``.

Example::

    >>> batch_cap("INFO non-default args: {'model': 'm', 'max_num_seqs': 256}", device="cpu")
    (256, 'passed on the command line')
    >>> batch_cap("INFO non-default args: {'model': 'm'}", device="cpu")
    (128, "vLLM's default on a CPU, the same in 0.26 and 0.32 (not logged: vLLM prints it at DEBUG level only)")
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The module text's tuning command, as start_server settings.
MODULE_COMMAND = {"gpu_memory_utilization": 0.9, "max_num_seqs": 256, "enable_prefix_caching": True}

_PASSED = re.compile(r"non-default args: \{.*?'max_num_seqs': (\d+)")
GIB = 2**30


def vllm_default_max_num_seqs(device: str, memory_gib: float | None = None, name: str = "") -> int:
    """The ``max_num_seqs`` vLLM's OpenAI server picks when none is passed, for one CPU worker or one GPU.

    From ``EngineArgs.get_batch_defaults``, whose GPU table is the same in 0.26 (the course's GPU pin) and 0.32:
    128 per CPU worker; on a GPU, 1,024 with 70 GiB or more (except an A100), else 256. vLLM also caps it at the
    step's token budget, which is larger in every case here.

    >>> vllm_default_max_num_seqs("cpu"), vllm_default_max_num_seqs("cuda", 139.8, "NVIDIA H200")
    (128, 1024)
    >>> vllm_default_max_num_seqs("cuda", 79.2, "NVIDIA A100-SXM4-80GB"), vllm_default_max_num_seqs("cuda", 15.0, "T4")
    (256, 256)
    """
    if device == "cpu":
        return 128
    if memory_gib is not None and memory_gib >= 70 and "a100" not in name.lower():
        return 1024
    return 256


def batch_cap(log_text: str, *, device: str, memory_gib: float | None = None, name: str = "") -> tuple[int, str]:
    """The server's ``max_num_seqs`` and where the number comes from, in words."""
    passed = _PASSED.findall(log_text)
    if passed:
        return int(passed[-1]), "passed on the command line"
    where = "a CPU" if device == "cpu" else f"this GPU ({name or 'unnamed'})"
    return (vllm_default_max_num_seqs(device, memory_gib, name),
            f"vLLM's default on {where}, the same in 0.26 and 0.32 (not logged: vLLM prints it at DEBUG level only)")


@dataclass(frozen=True)
class EngineSettings:
    """What one running server reported about the three settings the module's command changes."""

    label: str  # e.g. "defaults", "module's command"
    max_num_seqs: int
    max_num_seqs_source: str  # "passed on the command line", or vLLM's default and why it is not read
    kv_pool_bytes: int | None  # the pool's bytes (cache_config_info's kv_cache_memory_bytes, or the log's)
    kv_tokens: int | None  # token slots the engine reported
    prefix_caching: str | None  # cache_config_info's enable_prefix_caching: "True" / "False"
    gpu_memory_utilization: str | None  # cache_config_info's gpu_memory_utilization (vLLM's default: 0.92)


def engine_settings(label: str, cache_info: Mapping[str, str], log_text: str, kv_cache: Mapping[str, Any] | None,
                    *, device: str, memory_gib: float | None = None, name: str = "") -> EngineSettings:
    """One server's :class:`EngineSettings` from its ``cache_config_info`` labels, its log and its KV report.

    >>> info = {"enable_prefix_caching": "True", "gpu_memory_utilization": "0.92", "kv_cache_memory_bytes": "2147483648"}
    >>> s = engine_settings("defaults", info, "non-default args: {'model': 'm'}", {"num_tokens": 93184}, device="cpu")
    >>> s.max_num_seqs, s.kv_pool_bytes, s.kv_tokens, s.prefix_caching
    (128, 2147483648, 93184, 'True')
    """
    cap, source = batch_cap(log_text, device=device, memory_gib=memory_gib, name=name)
    kv = kv_cache or {}
    raw = cache_info.get("kv_cache_memory_bytes")
    pool = int(raw) if raw and raw.isdigit() else kv.get("memory_bytes")
    return EngineSettings(label, cap, source, pool, kv.get("num_tokens"), cache_info.get("enable_prefix_caching"),
                          cache_info.get("gpu_memory_utilization"))


def settings_table(settings: Sequence[EngineSettings]) -> str:
    """The servers side by side, one row per setting, as Markdown.

    >>> a = EngineSettings("defaults", 128, "vLLM's default", 2 * GIB, 93184, "True", "0.92")
    >>> b = EngineSettings("module's command", 256, "passed", 2 * GIB, 93184, "True", "0.9")
    >>> print(settings_table([a, b]))
    | read from the running server | defaults | module's command |
    |---|---|---|
    | max_num_seqs | 128 (vLLM's default) | 256 (passed) |
    | KV pool | 2.000 GiB, 93,184 token slots | 2.000 GiB, 93,184 token slots |
    | prefix caching | True | True |
    | gpu_memory_utilization | 0.92 | 0.9 |
    """
    def pool(s: EngineSettings) -> str:
        size = "-" if s.kv_pool_bytes is None else f"{s.kv_pool_bytes / GIB:.3f} GiB"
        return size + ("" if s.kv_tokens is None else f", {s.kv_tokens:,} token slots")

    rows = [("max_num_seqs", lambda s: f"{s.max_num_seqs:,} ({s.max_num_seqs_source})"),
            ("KV pool", pool),
            ("prefix caching", lambda s: s.prefix_caching or "-"),
            ("gpu_memory_utilization", lambda s: s.gpu_memory_utilization or "-")]
    lines = ["| read from the running server | " + " | ".join(s.label for s in settings) + " |",
             "|---" * (len(settings) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(show(s) for s in settings) + " |" for name, show in rows]
    return "\n".join(lines)


def differences(a: EngineSettings, b: EngineSettings) -> list[str]:
    """The settings two servers really ran with differently, in words (empty: none).

    >>> a = EngineSettings("defaults", 128, "", 2 * GIB, 93184, "True", "0.92")
    >>> differences(a, EngineSettings("module's command", 256, "", 2 * GIB, 93184, "True", "0.9"))
    ['max_num_seqs 128 -> 256', 'gpu_memory_utilization 0.92 -> 0.9']
    """
    found = []
    for name in ("max_num_seqs", "kv_pool_bytes", "kv_tokens", "prefix_caching", "gpu_memory_utilization"):
        before, after = getattr(a, name), getattr(b, name)
        if before != after:
            found.append(f"{name} {before} -> {after}")
    return found
