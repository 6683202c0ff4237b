"""What this machine offers the server: an NVIDIA GPU or only CPUs, and whether we are on Colab.

Detection asks ``nvidia-smi`` rather than importing torch, so it takes milliseconds and
works before vLLM is installed (the setup script uses it to pick the build).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

Device = Literal["cpu", "cuda"]


@dataclass(frozen=True)
class GPUInfo:
    name: str
    memory_mib: int
    compute_capability: tuple[int, int]

    @property
    def supports_bf16(self) -> bool:
        """bf16 needs compute capability 8.0 (Ampere) or newer: a Colab T4 (7.5) has none."""
        return self.compute_capability >= (8, 0)


def detect_gpus() -> list[GPUInfo]:
    """The NVIDIA GPUs ``nvidia-smi`` can see; empty where there is no working driver."""
    if os.environ.get("VLLM_COURSE_FORCE_CPU") == "1" or shutil.which("nvidia-smi") is None:
        return []
    query = "--query-gpu=name,memory.total,compute_cap"
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [_parse_gpu_line(line) for line in out.splitlines() if line.strip()]


def _parse_gpu_line(line: str) -> GPUInfo:
    name, memory, capability = (part.strip() for part in line.split(","))
    major, minor = capability.split(".")
    return GPUInfo(name, int(float(memory)), (int(major), int(minor)))


def detect_device() -> Device:
    """``"cuda"`` when an NVIDIA GPU is usable, else ``"cpu"``."""
    return "cuda" if detect_gpus() else "cpu"


def on_colab() -> bool:
    return "google.colab" in sys.modules


def describe_machine() -> str:
    """One line for result files and notebook headers, e.g. ``"CPU: 2 cores"``."""
    gpus = detect_gpus()
    if gpus:
        gpu = gpus[0]
        return f"{len(gpus)} x {gpu.name} ({gpu.memory_mib // 1024} GiB)"
    return f"CPU: {os.cpu_count()} cores"
