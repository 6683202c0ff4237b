"""N copies of the course's vLLM server on one machine, started and stopped together: a router's replicas.

:func:`start_replicas` starts ``n`` servers with the same settings through
:func:`helpers.serve.together.start_together`: at once on a CPU (a start there is mostly one
process importing vLLM on one core), one after the other on a GPU; each takes the next free port
from 8000 that none of this kernel's servers holds and that is not in ``avoid_ports`` (the router's,
chosen first: it binds only once the replicas are up), each on 127.0.0.1: the router is what clients
reach. Before the first start it checks that the machine can hold them all:

- memory: each CPU server needs its KV cache plus about 2.5 GiB for itself
  (:data:`helpers.serve.preflight.SERVER_RSS_GIB`); all of them must fit in the memory free now;
- cores (CPU): each replica's model worker binds cores of its own (:func:`replica_cores`); two
  replicas binding the same cores would each run at half speed and measure nothing useful.
  On a 2-core machine two replicas get one core each;
- GPU: each replica takes a share of the GPU's memory (``gpu_memory_utilization``).

A start that fails stops the replicas already started. Taught in ``notebooks/06_beyond_one_server.ipynb``.

Example::

    >>> with start_replicas(2, max_num_seqs=8, kv_cache_space_gib=0.5) as replicas:   # doctest: +SKIP
    ...     [server.url for server in replicas]
    ['http://127.0.0.1:8000', 'http://127.0.0.1:8001']
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from helpers.errors import ConfigError, NotEnoughMemoryError
from helpers.serve.config import DEFAULT_CPU_KV_CACHE_GIB, GPU_SHARE, LOOPBACK, ServerConfig
from helpers.serve.preflight import SERVER_RSS_GIB, check_gpu_kv_fits, choose_device, reserving
from helpers.serve.process import stop_each
from helpers.serve.server import VLLMServer, with_settings
from helpers.serve.together import start_together, starts_at_once


@dataclass
class ReplicaSet:
    """Running replicas: iterate, index, ``urls``; ``stop()`` (or ``with``) ends them all."""

    servers: list[VLLMServer] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def is_running(self) -> list[bool]:
        return [server.is_running() for server in self.servers]

    def stop(self) -> None:
        """Stop every replica (each bounded, as VLLMServer.stop is); safe to call twice. A Ctrl-C
        during one stop stops the others at once, then goes through (:func:`helpers.serve.process.stop_each`)."""
        stop_each(self.servers)

    def __iter__(self) -> Iterator[VLLMServer]:
        return iter(self.servers)

    def __len__(self) -> int:
        return len(self.servers)

    def __getitem__(self, index: int) -> VLLMServer:
        return self.servers[index]

    def __enter__(self) -> ReplicaSet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ReplicaSet of {len(self.servers)}: {', '.join(map(repr, self.servers))}>"


def replica_cores(n: int, cores: list[int]) -> list[str]:
    """The cores each of ``n`` replicas binds, as ``VLLM_CPU_OMP_THREADS_BIND`` takes them: an equal,
    contiguous share each (cores left over stay free for the API servers, the router and the client).

    >>> replica_cores(2, [0, 1]), replica_cores(2, [0, 1, 2, 3, 4])
    (['0', '1'], ['0-1', '2-3'])
    >>> replica_cores(3, [0, 1])
    Traceback (most recent call last):
    ...
    helpers.errors.ConfigError: 3 replicas need at least 3 cores (each model worker binds cores of its own), and this machine lets this process use 2. Start at most 2.
    """
    if n > len(cores):
        raise ConfigError(f"{n} replicas need at least {n} cores (each model worker binds cores of its own), "
                          f"and this machine lets this process use {len(cores)}. Start at most {len(cores)}.")
    each = len(cores) // n
    shares = [cores[i * each:(i + 1) * each] for i in range(n)]
    return [str(s[0]) if len(s) == 1 else f"{s[0]}-{s[-1]}" for s in shares]


def check_replica_memory(n: int, kv_gib: float, available_gib: float) -> None:
    """Refuse ``n`` CPU replicas whose KV caches and servers do not fit in ``available_gib``.

    >>> check_replica_memory(2, 2.0, 19.0)
    >>> check_replica_memory(4, 2.0, 12.0)
    Traceback (most recent call last):
    ...
    helpers.errors.NotEnoughMemoryError: 4 replicas need about 18.0 GiB (each a 2 GiB KV cache plus about 2.5 GiB for the server), but only 12.0 GiB of memory is free: at most 2 fit. Start fewer, or give each a smaller kv_cache_space_gib.
    """
    each = kv_gib + SERVER_RSS_GIB
    if n * each > available_gib:
        raise NotEnoughMemoryError(
            f"{n} replicas need about {n * each:.1f} GiB (each a {kv_gib:g} GiB KV cache plus about "
            f"{SERVER_RSS_GIB:g} GiB for the server), but only {available_gib:.1f} GiB of memory is free: at most "
            f"{int(available_gib // each)} fit. Start fewer, or give each a smaller kv_cache_space_gib.")


RENDER_FLAG = "--enable-scale-out"


def render_gated(vllm_dir: Path | None = None) -> bool:
    """Whether the installed vLLM answers ``/v1/chat/completions/render`` with 403 unless started with
    ``--enable-scale-out`` (0.32 does; 0.26 serves it always). vllm-router's cache-aware policy renders every
    prompt there to match its tokens: refused, it matches nothing and falls back to the least busy replica
    (``scripts/probe_router_affinity.py`` measured it). Read from vLLM's source, without importing vLLM (seconds)."""
    if vllm_dir is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or spec.origin is None:
            return False
        vllm_dir = Path(spec.origin).parent
    factories = vllm_dir / "entrypoints" / "scale_out" / "factories.py"
    return factories.exists() and "enable_scale_out" in factories.read_text(errors="replace")


def with_render_endpoints(config: ServerConfig) -> ServerConfig:
    """``config`` with :data:`RENDER_FLAG` added where this vLLM needs it for the router to render prompts."""
    if RENDER_FLAG in config.extra_args or not render_gated():
        return config
    return replace(config, extra_args=(*config.extra_args, RENDER_FLAG))


def replica_configs(n: int, config: ServerConfig) -> list[ServerConfig]:
    """One config per replica, checked against this machine (cores, memory, GPU share) before any start; each
    serves the render endpoints the router's cache-aware policy calls (:func:`with_render_endpoints`)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n is the number of replicas, a positive integer; got {n!r}.")
    config = with_render_endpoints(config)
    if config.port is not None:
        raise ConfigError("Replicas take the next free ports themselves: leave port unset (the router has one port).")
    if config.host != LOOPBACK:
        raise ConfigError(f"Replicas listen on {LOOPBACK} only; clients reach them through the router "
                          "(start_router(replicas, host=...)). Leave host unset.")
    device = choose_device(config)
    if device == "cpu":
        check_replica_memory(n, config.kv_cache_space_gib or DEFAULT_CPU_KV_CACHE_GIB,
                             psutil.virtual_memory().available / 2**30)
        if config.cpu_cores is not None and n > 1:
            raise ConfigError("Replicas get their cores from start_replicas (a share each); leave cpu_cores unset.")
        usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        cores = replica_cores(n, usable) if n > 1 else [config.cpu_cores]
        return [replace(config, cpu_cores=share) for share in cores]
    if config.kv_cache_space_gib:
        check_gpu_kv_fits(config.kv_cache_space_gib, replicas=n)
    share = config.gpu_memory_utilization
    if share is None:
        share = round(GPU_SHARE / n, 2)
    elif n * share > 0.95:
        raise ConfigError(f"{n} replicas with gpu_memory_utilization={share} each would ask for {n * share:.2f} of "
                          f"the GPU's memory; give each at most {0.95 / n:.2f}.")
    return [replace(config, gpu_memory_utilization=share)] * n


def start_replicas(n: int, config: ServerConfig | None = None, *, quiet: bool = False, avoid_ports: Iterable[int] = (),
                   **settings: Any) -> ReplicaSet:
    """Start ``n`` servers with the same settings (those of ``start_server``): together on a CPU, one after the
    other on a GPU (:func:`helpers.serve.together.start_together`); a failed or interrupted start leaves none running.
    No replica takes a port of ``avoid_ports`` (pass the router's when it is to listen on one from 8000 up)."""
    configs = replica_configs(n, with_settings(config, settings))
    replicas = ReplicaSet([VLLMServer(each) for each in configs])
    if not quiet:
        how = ("together (15-60 s on a 2-core CPU)" if starts_at_once(replicas.servers)
               else "one after the other (vLLM checks a GPU's free memory as it starts)")
        print(f"starting {n} replicas {how}...", flush=True)
    with reserving(avoid_ports):
        start_together(replicas.servers, labels=[f"replica {i + 1}/{n}" for i in range(n)], quiet=True)
    if not quiet:
        for index, (server, each) in enumerate(zip(replicas, configs)):
            cores = f", cores {each.cpu_cores}" if each.cpu_cores else ""
            print(f"replica {index + 1}/{n} ready in {server.startup_seconds:.1f} s on {server.url}{cores}", flush=True)
    return replicas
