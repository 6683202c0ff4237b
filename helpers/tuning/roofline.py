"""The hardware's limit on decoding: a step must read every weight once, and the batch's KV cache.

One decode step produces one token for each running request, and to do so it reads all the
model's weights (shared by the whole batch) and the keys and values of every token each request
has so far. Memory bandwidth bounds how fast those bytes can be read, so it bounds the step:

    step time >= (weight bytes + KV bytes of the batch) / bandwidth

and the batch's output tokens/s <= batch size / that time. :func:`decode_roofline` gives the
bound for one batch; :func:`measure_copy_bandwidth` measures the bandwidth a copy reaches on this
machine (numpy on a CPU, a device-to-device copy on a GPU), counting bytes read plus bytes
written, as the STREAM benchmark's "copy" does; :data:`GPU_SPEC_BANDWIDTH` holds the datasheet
figure for common GPUs. Real steps also compute, launch kernels and schedule, so the engine sits
below the line; how far below is the lesson.

    >>> bound = decode_roofline(weight_bytes=270e6, kv_bytes_per_token=23_040,
    ...                         context_tokens=[300] * 8, bandwidth_bytes_per_s=20e9)
    >>> round(bound.bytes_per_step / 1e6, 1), round(bound.step_s * 1000, 2), round(bound.tok_per_s)
    (325.3, 16.26, 492)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from helpers import validate

# Datasheet memory bandwidth, bytes/s (NVIDIA's product pages), matched against torch/nvidia-smi GPU names.
GPU_SPEC_BANDWIDTH = {
    "H200": 4.8e12, "H100 SXM": 3.35e12, "H100 PCIe": 2.0e12, "H100": 3.35e12,
    "A100-SXM4-80GB": 2.039e12, "A100 80GB PCIe": 1.935e12, "A100": 1.555e12,
    "L40S": 864e9, "L4": 300e9, "A10G": 600e9, "A10": 600e9, "T4": 320e9, "V100": 900e9,
}


@dataclass(frozen=True)
class DecodeRoofline:
    """The memory-bandwidth bound of one decode step over a batch."""

    batch: int
    bytes_per_step: float  # weights + the batch's KV cache
    bandwidth_bytes_per_s: float

    @property
    def step_s(self) -> float:
        """The shortest a step can take: its bytes at full bandwidth."""
        return self.bytes_per_step / self.bandwidth_bytes_per_s

    @property
    def tok_per_s(self) -> float:
        """The most output tokens/s this batch can make: one token per request per step."""
        return self.batch / self.step_s

    def efficiency(self, measured_step_s: float) -> float:
        """The fraction of the bound a measured step time reached (1.0: at the memory limit)."""
        return self.step_s / validate.positive_number(measured_step_s, "measured_step_s", unit="seconds")


def decode_roofline(weight_bytes: float, kv_bytes_per_token: float, context_tokens: Sequence[int],
                    bandwidth_bytes_per_s: float) -> DecodeRoofline:
    """The bound for one decode step whose requests hold ``context_tokens`` tokens each (prompt + output so far)."""
    validate.positive_number(weight_bytes, "weight_bytes", hint="It is parameters x bytes per parameter.")
    validate.positive_number(kv_bytes_per_token, "kv_bytes_per_token",
                             hint="helpers.paged.kv_math.kv_bytes_per_token(config) gives it.")
    validate.positive_number(bandwidth_bytes_per_s, "bandwidth_bytes_per_s",
                             hint="measure_copy_bandwidth() or GPU_SPEC_BANDWIDTH gives it.")
    if not context_tokens:
        raise validate.InvalidArgumentError("a decode step needs at least one request: give its context_tokens.")
    kv = kv_bytes_per_token * sum(validate.positive_int(n, "context_tokens") for n in context_tokens)
    return DecodeRoofline(len(context_tokens), weight_bytes + kv, bandwidth_bytes_per_s)


def spec_bandwidth(gpu_name: str) -> float | None:
    """The datasheet bandwidth of a GPU named like "NVIDIA H200" or "Tesla T4"; None when unknown."""
    for key in sorted(GPU_SPEC_BANDWIDTH, key=len, reverse=True):  # "H100 SXM" before "H100"
        if key.lower() in gpu_name.lower():
            return GPU_SPEC_BANDWIDTH[key]
    return None


def measure_copy_bandwidth(device: str = "cpu", size_mib: int = 256, repeats: int = 5) -> float:
    """Bytes/s a copy of ``size_mib`` MiB reaches (read + write), the best of ``repeats``.

    On a CPU it copies numpy arrays, with the threads numpy has (one core's worth, often less than
    all cores together reach); on "cuda" it copies a torch tensor on the GPU. A few seconds at most.
    """
    size = validate.positive_int(size_mib, "size_mib") * 2**20
    repeats = validate.positive_int(repeats, "repeats")
    if device == "cuda":
        import torch

        source = torch.empty(size, dtype=torch.uint8, device="cuda")
        target = torch.empty_like(source)
        target.copy_(source)  # the first copy pays for allocation and launch set-up
        best = float("inf")
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            target.copy_(source)
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end) / 1000)
        return 2 * size / best
    import numpy as np

    source = np.ones(size, dtype=np.uint8)
    target = np.empty_like(source)
    np.copyto(target, source)
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - began)
    return 2 * size / best
