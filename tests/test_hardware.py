import os
import subprocess
import sys

import pytest

from helpers.hardware import (
    GPUInfo,
    _parse_gpu_line,
    describe_machine,
    detect_cpu,
    detect_device,
    fp8_kv_refusal,
    other_vllm_servers,
)
from helpers.serve.engine_env import avx2_emulation_env


def test_nvidia_smi_line_is_parsed():
    info = _parse_gpu_line("Tesla T4, 15360, 7.5")
    assert info == GPUInfo("Tesla T4", 15360, (7, 5))


def test_a_t4_has_no_bf16_and_an_h200_has():
    assert not GPUInfo("Tesla T4", 15360, (7, 5)).supports_bf16
    assert GPUInfo("NVIDIA H200", 143771, (9, 0)).supports_bf16


def test_forcing_cpu_hides_any_gpu(monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_FORCE_CPU", "1")
    assert detect_device() == "cpu"


ZEN4 = "model name\t: AMD EPYC 9R14\nflags\t\t: fpu sse avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni\n"
ZEN2 = "model name\t: AMD EPYC 7R32\nflags\t\t: fpu sse avx2 fma\n"
SAPPHIRE = "model name\t: Intel Xeon 8488C\nflags\t\t: avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile\n"


@pytest.mark.parametrize("text, isa, bf16, fp16", [
    (ZEN4, "AVX-512 with bf16", True, False),
    (ZEN2, "AVX2", False, False),
    (SAPPHIRE, "AVX-512 with AMX", True, True),
    (SAPPHIRE.replace(" amx_tile", ""), "AVX-512 with bf16", True, True),
    ("", "no AVX2", False, False),
])
def test_cpu_class_comes_from_the_flags(monkeypatch, text, isa, bf16, fp16):
    monkeypatch.delenv("VLLM_COURSE_CPU_ISA", raising=False)
    cpu = detect_cpu(text)
    assert (cpu.isa, cpu.native_bf16, cpu.native_fp16) == (isa, bf16, fp16)


def test_avx2_emulation_hides_every_avx512_and_amx_flag(monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_CPU_ISA", "avx2")
    cpu = detect_cpu(SAPPHIRE)
    assert cpu.isa == "AVX2" and not cpu.native_bf16 and not cpu.native_fp16
    assert not any(f.startswith(("avx512", "amx")) for f in cpu.flags)
    assert "VLLM_COURSE_CPU_ISA=avx2" in cpu.describe()


def test_an_unknown_emulated_isa_is_refused(monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_CPU_ISA", "sse2")
    with pytest.raises(ValueError, match="VLLM_COURSE_CPU_ISA must be one of avx2"):
        detect_cpu(ZEN4)


def test_machine_description_keeps_its_core_count_first(monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_FORCE_CPU", "1")
    assert describe_machine().startswith(f"CPU: {os.cpu_count()} cores, ")


def test_the_emulation_site_makes_torch_report_an_avx2_cpu(monkeypatch):
    # The real check: a child Python with the server's environment asks torch what vLLM asks.
    monkeypatch.setenv("VLLM_COURSE_CPU_ISA", "avx2")
    env = {**os.environ, **avx2_emulation_env()}
    code = ("import torch; print(torch.cpu._is_avx512_supported(), torch.cpu._is_avx512_bf16_supported(), "
            "torch.cpu._is_amx_tile_supported(), torch.cpu._is_avx2_supported(), "
            "torch.backends.cpu.get_cpu_capability())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False", "True", "AVX2"]


def test_other_vllm_servers_counts_processes_running_the_api_server_module():
    # A stand-in process whose command line names vLLM's server module: the count reads argv only.
    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                             "-m", "vllm.entrypoints.openai.api_server"])
    try:
        before = other_vllm_servers(exclude_pid=fake.pid)
        assert other_vllm_servers() == before + 1
    finally:
        fake.kill()
        fake.wait()


@pytest.mark.parametrize(("capability", "served"), [((7, 5), False), ((8, 0), False), ((8, 9), True), ((9, 0), True)],
                         ids=["t4", "a100", "l4", "h100"])
def test_an_fp8_kv_cache_is_offered_only_from_compute_capability_8_9(capability, served):
    """vLLM's Triton attention (pinned by notebook 05) refuses an FP8 KV cache below 8.9: notebook 05 skips it there
    (tests/test_tuning_pools.py::test_notebook_05s_fp8_kv_server_starts_only_where_fp8_kv_refusal_says_none)."""
    gpu = GPUInfo(f"GPU {capability}", 81920, capability)
    assert gpu.native_fp8 is served
    why = fp8_kv_refusal([gpu])
    if served:
        assert why is None
    else:
        assert f"compute capability {capability[0]}.{capability[1]}" in why and "8.9" in why


def test_every_visible_gpu_must_serve_fp8_kv():
    h100, a100 = GPUInfo("NVIDIA H100", 81559, (9, 0)), GPUInfo("NVIDIA A100", 81920, (8, 0))
    assert "NVIDIA A100 has compute capability 8.0" in fp8_kv_refusal([h100, a100])


def test_without_a_gpu_the_cpu_decides_the_fp8_kv_cache(monkeypatch):
    monkeypatch.delenv("VLLM_COURSE_CPU_ISA", raising=False)
    assert fp8_kv_refusal([], detect_cpu(ZEN4)) is None
    assert "neither AVX-512 nor AMX" in fp8_kv_refusal([], detect_cpu(ZEN2))
