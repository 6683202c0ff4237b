"""The environment variables a vLLM server process gets, found by looking at this machine.

:func:`helpers.serve.config.build_launch` builds the command line from the settings alone;
what depends on the machine comes from here: whether tcmalloc is installed, how many cores the
model worker may bind, the AVX2 limits of ``VLLM_COURSE_CPU_ISA=avx2``, and on a GPU the sampler.
Each variable is kept for what it measured on a 2-core machine (see :func:`cpu_engine_env`).

Example::

    >>> env = device_env("cpu")
    >>> env["VLLM_ENABLE_V1_MULTIPROCESSING"], "VLLM_CPU_OMP_THREADS_BIND" in env
    ('0', True)
"""

from __future__ import annotations

import os
from pathlib import Path

from helpers.hardware import Device, emulated_isa
from helpers.paths import pythonpath_with

AVX2_SITE = Path(__file__).resolve().parent / "_avx2_site"  # sitecustomize for VLLM_COURSE_CPU_ISA=avx2


def device_env(device: Device) -> dict[str, str]:
    """The variables a server on ``device`` needs, on top of ``os.environ``."""
    if device == "cpu":
        env = cpu_engine_env()
        # vLLM reserves a core for the API process by default; on a 2-core machine giving the
        # model worker both cores measured 1.6-1.8x the throughput.
        env["VLLM_CPU_OMP_THREADS_BIND"] = os.environ.get(
            "VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}"
        )
        return env
    # vLLM's own top-k/top-p sampler, the one every GPU run of the course measured (results/gpu/). Left alone,
    # vLLM picks FlashInfer's on a GPU it supports, and vLLM's GPU wheel brings flashinfer (so Colab has it);
    # vLLM's source (0.32) also calls FlashInfer broken on SM75, a T4's. Where flashinfer is missing, the
    # sampler's import of it would stop the engine. A value the user set is kept.
    return {"VLLM_USE_FLASHINFER_SAMPLER": os.environ.get("VLLM_USE_FLASHINFER_SAMPLER", "0")}


def cpu_engine_env() -> dict[str, str]:
    """Environment for a CPU server, each part kept for what it measured on a 2-core machine.

    - ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` with ``--distributed-executor-backend uni`` (in
      :func:`helpers.serve.config.build_launch`): the model runs inside the engine process instead
      of a third process that imports vLLM again; ready in 19-21 s instead of 28-31 s, the same tokens/s.
    - tcmalloc in ``LD_PRELOAD``, where installed (Debian: ``libtcmalloc-minimal4``): 8 % more
      tokens/s (131 against 121 on the lab's prompts). Intel's OpenMP, the other library vLLM's
      log suggests, measured no difference and is left out.
    - the ISA limits of ``VLLM_COURSE_CPU_ISA=avx2``, if set.
    """
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if tcmalloc := find_tcmalloc():
        env["LD_PRELOAD"] = os.pathsep.join(p for p in (tcmalloc, os.environ.get("LD_PRELOAD", "")) if p)
    if emulated_isa() == "avx2":
        env.update(avx2_emulation_env())
    return env


def find_tcmalloc() -> str | None:
    """The tcmalloc library's name where the dynamic linker can find it, else None."""
    import ctypes.util

    return ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")


def avx2_emulation_env() -> dict[str, str]:
    """Limit every library the server computes with to AVX2, as on a CPU without AVX-512.

    oneDNN (vLLM's CPU linear layers), ATen (torch's own kernels) and MKL each read a variable;
    vLLM's kernel library and attention choose by asking ``torch.cpu``, which ``_avx2_site``
    answers. The server log then shows ``_C_AVX2`` in use and, in bfloat16, oneDNN's fallback.
    """
    path = pythonpath_with(AVX2_SITE, os.environ)
    return {"VLLM_COURSE_CPU_ISA": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2", "PYTHONPATH": path}
