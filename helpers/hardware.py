"""What this machine offers the server: an NVIDIA GPU or only CPUs, which CPU, and whether we are on Colab.

Detection asks ``nvidia-smi`` and reads ``/proc/cpuinfo`` rather than importing torch, so it
takes milliseconds and works before vLLM is installed (the setup script uses it to pick the build).

CPUs differ in what vLLM's CPU build can use: bfloat16 arithmetic needs ``avx512_bf16`` or
AMX. Without them (AVX2-only laptops and many cloud machines), oneDNN cannot build a bf16
matmul and falls back to a slow path: on a 2-core AVX2 EPYC the lab's workload ran at
7.8 tok/s in bfloat16 and 35.9 tok/s in float32. :func:`detect_cpu` reports the class;
``helpers.serve.config.cpu_dtype`` turns it into the dtype to serve.

``VLLM_COURSE_CPU_ISA=avx2`` makes a machine with AVX-512 behave as an AVX2-only one, for the
course's own benchmarks and tests: the CPU is reported without its AVX-512 and AMX flags, and
the server is launched with every library limited to AVX2 (``helpers.serve.engine_env.avx2_emulation_env``).
``VLLM_COURSE_GPU_AS=t4`` does the same for a GPU, for the course's own choices only: every GPU is
reported with a T4's compute capability (7.5), so the server helper passes the T4's flags (float16,
Triton attention) and the notebooks take their T4 branches (no FP8 KV cache, :func:`fp8_kv_refusal`).
vLLM itself still sees the real GPU and picks its kernels and defaults from it: on a real T4 (15 GiB)
vLLM 0.32 defaults to a step token budget of 2,048 and 256 sequences where an H100 or H200 gets 8,192
and 1,024, and its FP8 paths differ; the speed and memory are the bigger GPU's own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Device = Literal["cpu", "cuda"]
EMULATED_ISAS = ("avx2",)  # what VLLM_COURSE_CPU_ISA may ask for
EMULATED_GPUS = {"t4": (7, 5)}  # what VLLM_COURSE_GPU_AS may ask for: its compute capability
# vLLM's Triton attention backend (the one notebook 05 pins) keeps an FP8 KV cache only with native FP8 (fp8e4nv):
# from 8.9 (Ada: L4, L40S; Hopper: H100, H200). Below it (a T4's 7.5, an A100's 8.0) the server stops at start-up.
FP8_KV_MIN_CAPABILITY = (8, 9)


@dataclass(frozen=True)
class GPUInfo:
    name: str
    memory_mib: int
    compute_capability: tuple[int, int]

    @property
    def supports_bf16(self) -> bool:
        """bf16 needs compute capability 8.0 (Ampere) or newer: a Colab T4 (7.5) has none."""
        return self.compute_capability >= (8, 0)

    @property
    def native_fp8(self) -> bool:
        """FP8 (e4m3) in hardware, which vLLM's Triton attention needs for an FP8 KV cache: 8.9 or newer."""
        return self.compute_capability >= FP8_KV_MIN_CAPABILITY


def detect_gpus() -> list[GPUInfo]:
    """The NVIDIA GPUs this process may use: ``nvidia-smi``'s, limited to ``CUDA_VISIBLE_DEVICES`` (which
    nvidia-smi itself ignores; :func:`visible_gpus`); empty where there is no working driver."""
    if os.environ.get("VLLM_COURSE_FORCE_CPU") == "1" or shutil.which("nvidia-smi") is None:
        return []
    query = "--query-gpu=index,uuid,name,memory.total,compute_cap"
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = visible_gpus(out, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if (emulated := emulated_gpu()) is not None:
        note = f" (as a {emulated.upper()}: VLLM_COURSE_GPU_AS={emulated})"
        gpus = [GPUInfo(gpu.name + note, gpu.memory_mib, EMULATED_GPUS[emulated]) for gpu in gpus]
    return gpus


def emulated_gpu() -> str | None:
    """The GPU ``VLLM_COURSE_GPU_AS`` makes every GPU pass for ("t4"), or None."""
    return _asked_to_emulate("VLLM_COURSE_GPU_AS", tuple(EMULATED_GPUS))


def _asked_to_emulate(variable: str, choices: tuple[str, ...]) -> str | None:
    """The value of an emulation variable, checked against what the course can emulate; None when unset."""
    wanted = os.environ.get(variable, "").strip().lower()
    if not wanted:
        return None
    if wanted not in choices:
        raise ValueError(f"{variable} must be one of {', '.join(choices)} (or unset), got {wanted!r}.")
    return wanted


def visible_gpus(nvidia_smi_csv: str, cuda_visible_devices: str | None) -> list[GPUInfo]:
    """The rows of ``nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_cap`` that CUDA shows a process
    with this ``CUDA_VISIBLE_DEVICES`` (None: unset, all of them), in its order. Entries are indices or
    (prefixes of) ``GPU-`` UUIDs; like CUDA, the list ends at the first entry that names no GPU (so "" or "-1"
    hide every GPU). MIG devices are not in nvidia-smi's list: with one named, every GPU is kept.

    >>> rows = "0, GPU-aa11, NVIDIA H100, 81559, 9.0\\n1, GPU-bb22, Tesla T4, 15360, 7.5\\n"
    >>> [gpu.name for gpu in visible_gpus(rows, "1")], [gpu.name for gpu in visible_gpus(rows, "GPU-bb,0")]
    (['Tesla T4'], ['Tesla T4', 'NVIDIA H100'])
    >>> visible_gpus(rows, "")
    []
    """
    rows = [[part.strip() for part in line.split(",")] for line in nvidia_smi_csv.splitlines() if line.strip()]
    if cuda_visible_devices is None or "MIG-" in cuda_visible_devices:
        return [_parse_gpu_line(", ".join(row[-3:])) for row in rows]
    chosen: list[list[str]] = []
    for entry in (part.strip() for part in cuda_visible_devices.split(",")):
        found = [row for row in rows
                 if entry and (entry == row[0] or (entry.startswith("GPU-") and row[1].startswith(entry)))]
        if not found or found[0] in chosen:
            break
        chosen.append(found[0])
    return [_parse_gpu_line(", ".join(row[-3:])) for row in chosen]


def _parse_gpu_line(line: str) -> GPUInfo:
    name, memory, capability = (part.strip() for part in line.split(","))
    major, minor = capability.split(".")
    return GPUInfo(name, int(float(memory)), (int(major), int(minor)))


def detect_device() -> Device:
    """``"cuda"`` when an NVIDIA GPU is usable, else ``"cpu"``."""
    return "cuda" if detect_gpus() else "cpu"


@dataclass(frozen=True)
class CPUInfo:
    """The CPU's name, cores and instruction-set flags (as ``/proc/cpuinfo`` spells them)."""

    model_name: str
    cores: int
    flags: frozenset[str]
    emulated: str | None = None  # "avx2" when VLLM_COURSE_CPU_ISA hides the AVX-512 flags

    @property
    def native_bf16(self) -> bool:
        """bfloat16 matmuls in hardware: AVX-512 BF16 (Zen 4, Cooper Lake and later) or AMX."""
        return bool({"avx512_bf16", "amx_bf16"} & self.flags)

    @property
    def native_fp16(self) -> bool:
        """float16 arithmetic in hardware (AVX-512 FP16 or AMX-FP16: Sapphire Rapids and later)."""
        return bool({"avx512_fp16", "amx_fp16"} & self.flags)

    @property
    def amx(self) -> bool:
        """AMX tiles with bf16 (Sapphire Rapids and later): vLLM's CPU build then runs bfloat16 attention ("amx") and
        matmuls on them, a class of its own for speed."""
        return {"amx_tile", "amx_bf16"} <= self.flags

    @property
    def isa(self) -> str:
        """The widest vector or matrix instructions: "AVX-512 with AMX", "AVX-512 with bf16", "AVX-512", "AVX2" or
        "no AVX2".

        >>> CPUInfo("x", 2, frozenset({"avx2", "avx512f", "avx512_bf16"})).isa
        'AVX-512 with bf16'
        >>> CPUInfo("x", 2, frozenset({"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"})).isa
        'AVX-512 with AMX'
        >>> CPUInfo("x", 2, frozenset({"avx2", "fma"})).isa
        'AVX2'
        """
        if "avx512f" in self.flags:
            if self.amx:
                return "AVX-512 with AMX"
            return "AVX-512 with bf16" if self.native_bf16 else "AVX-512"
        return "AVX2" if "avx2" in self.flags else "no AVX2"

    def describe(self) -> str:
        """e.g. ``"AMD EPYC, AVX-512 with bf16"`` or ``"AMD EPYC, AVX2 (AVX-512 hidden: VLLM_COURSE_CPU_ISA=avx2)"``."""
        note = f" (AVX-512 hidden: VLLM_COURSE_CPU_ISA={self.emulated})" if self.emulated else ""
        return f"{self.model_name}, {self.isa}{note}"


def detect_cpu(cpuinfo_text: str | None = None) -> CPUInfo:
    """This machine's CPU; on systems without ``/proc/cpuinfo`` the flags are empty."""
    if cpuinfo_text is None:
        try:
            cpuinfo_text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo_text = ""
    name = re.search(r"^model name\s*:\s*(.+)$", cpuinfo_text, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo_text, re.MULTILINE)
    found = frozenset(flags.group(1).split()) if flags else frozenset()
    emulated = emulated_isa()
    if emulated == "avx2":
        found = frozenset(f for f in found if not f.startswith(("avx512", "amx")))
    return CPUInfo(name.group(1).strip() if name else "unknown CPU", os.cpu_count() or 1, found, emulated)


def emulated_isa() -> str | None:
    """The instruction set ``VLLM_COURSE_CPU_ISA`` limits the CPU to, or None."""
    return _asked_to_emulate("VLLM_COURSE_CPU_ISA", EMULATED_ISAS)


def cpu_supports_fp8_kv(cpu: CPUInfo | None = None) -> bool:
    """Whether vLLM's CPU build can keep the KV cache in FP8 here: its CPU attention kernels
    for FP8 need x86 with AVX-512 or AMX. Follows ``VLLM_COURSE_CPU_ISA=avx2`` too."""
    flags = (detect_cpu() if cpu is None else cpu).flags
    return "avx512f" in flags or "amx_tile" in flags


def fp8_kv_refusal(gpus: list[GPUInfo] | None = None, cpu: CPUInfo | None = None) -> str | None:
    """Why this machine cannot serve an FP8 KV cache (``--kv-cache-dtype fp8``) with the course's flags; None if it can.

    With GPUs (``detect_gpus()`` unless given) every one needs :attr:`GPUInfo.native_fp8`, so
    ``VLLM_COURSE_GPU_AS=t4`` says no; without, the CPU needs AVX-512 or AMX (:func:`cpu_supports_fp8_kv`).

    >>> fp8_kv_refusal([GPUInfo("NVIDIA H100", 81559, (9, 0))]) is None
    True
    >>> print(fp8_kv_refusal([GPUInfo("NVIDIA A100", 81920, (8, 0))]))  # doctest: +ELLIPSIS
    NVIDIA A100 has compute capability 8.0; vLLM's Triton attention backend keeps an FP8 KV cache only from 8.9...
    """
    gpus = detect_gpus() if gpus is None else gpus
    if gpus:
        lacking = [gpu for gpu in gpus if not gpu.native_fp8]
        if not lacking:
            return None
        name, (major, minor) = lacking[0].name, lacking[0].compute_capability
        return (f"{name} has compute capability {major}.{minor}; vLLM's Triton attention backend keeps an FP8 KV "
                "cache only from 8.9 (L4, L40S, H100, H200), and refuses to start below it. Serve the KV cache in "
                "the model's dtype here.")
    if cpu_supports_fp8_kv(cpu):
        return None
    return "this CPU has neither AVX-512 nor AMX, which vLLM's CPU build needs for an FP8 KV cache."


def describe_machine() -> str:
    """One line for result files and notebook headers, e.g. ``"CPU: 2 cores, AMD EPYC, AVX2"``.

    It starts with "CPU: N cores" on a CPU, which older result files share.
    """
    gpus = detect_gpus()
    if gpus:
        gpu = gpus[0]
        return f"{len(gpus)} x {gpu.name} ({gpu.memory_mib // 1024} GiB)"
    cpu = detect_cpu()
    return f"CPU: {cpu.cores} cores, {cpu.describe()}"


VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def other_vllm_servers(exclude_pid: int | None = None, exclude_pids: Collection[int] = ()) -> int:
    """vLLM API servers running on this machine, except the one with ``exclude_pid`` and those in ``exclude_pids``.

    On a shared machine each one competes for the same cores and distorts any timing, so
    the timing notebooks, the sweep and the benchmarks count them and say so.
    """
    import psutil

    count = 0
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] != exclude_pid and proc.info["pid"] not in exclude_pids \
                and VLLM_SERVER_MODULE in (proc.info["cmdline"] or []):
            count += 1
    return count
