"""The GPU's code paths chosen from its compute capability, the T4 path forced on a bigger GPU,
eager starts, and the stack check that runs before any GPU server: what it says for each failure."""

import os
import stat
import sys

import pytest

from helpers.errors import ConfigError, NoGPUError
from helpers.hardware import GPUInfo, detect_device, detect_gpus
from helpers.serve import gpu, preflight
from helpers.serve.config import ServerConfig, build_launch

T4 = GPUInfo("Tesla T4", 15360, (7, 5))
H200 = GPUInfo("NVIDIA H200", 143771, (9, 0))


def test_a_t4_is_served_in_float16_on_tritons_attention_and_says_why():
    config, why = gpu.gpu_settings(ServerConfig(max_num_seqs=8), [T4])
    assert config.dtype == "half" and config.extra_args == ("--attention-backend", "TRITON_ATTN")
    assert "Tesla T4, compute capability 7.5" in why and "no bf16" in why and "FlashAttention" in why


def test_a_gpu_with_bf16_keeps_vllms_own_choices():
    config = ServerConfig(max_num_seqs=8)
    assert gpu.gpu_settings(config, [H200]) == (config, None)
    assert gpu.gpu_settings(config, []) == (config, None)


def test_the_weakest_gpu_decides():
    config, _ = gpu.gpu_settings(ServerConfig(), [H200, T4])
    assert config.dtype == "half"


def test_a_users_own_dtype_and_attention_backend_override_the_t4_path():
    config, why = gpu.gpu_settings(ServerConfig(dtype="float32", extra_args=("--attention-backend=FLEX_ATTENTION",)),
                                   [T4])
    assert config.dtype == "float32" and config.extra_args == ("--attention-backend=FLEX_ATTENTION",)
    assert why is None


def test_bfloat16_asked_for_on_a_gpu_without_it_is_refused_naming_the_dtype_to_use():
    with pytest.raises(ConfigError, match=r"dtype='half' \(float16\), or dtype=None"):
        gpu.gpu_settings(ServerConfig(dtype="bfloat16"), [T4])


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """An nvidia-smi on PATH that answers like an H200's (its CSV line as the real one prints it)."""
    tool = tmp_path / "nvidia-smi"
    # the query detect_gpus asks: index, uuid, name, memory.total, compute_cap (nvidia-smi lists every GPU, whatever
    # CUDA_VISIBLE_DEVICES says)
    tool.write_text("#!/bin/sh\necho '0, GPU-5f3a9c1e-0000-4000-8000-000000000001, NVIDIA H200, 143771, 9.0'\n"
                    "echo '1, GPU-7b2d4e6f-0000-4000-8000-000000000002, Tesla T4, 15360, 7.5'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("VLLM_COURSE_FORCE_CPU", raising=False)
    monkeypatch.delenv("VLLM_COURSE_GPU_AS", raising=False)  # the H200 as itself, even in a run with the T4's flags
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")


def test_vllm_course_gpu_as_t4_makes_a_big_gpu_take_the_t4_path(fake_nvidia_smi, monkeypatch):
    assert detect_gpus() == [H200]
    monkeypatch.setenv("VLLM_COURSE_GPU_AS", "t4")
    (forced,) = detect_gpus()
    assert forced.compute_capability == (7, 5) and not forced.supports_bf16
    assert forced.name == "NVIDIA H200 (as a T4: VLLM_COURSE_GPU_AS=t4)"
    config, why = preflight.with_serving_dtype(ServerConfig(), "cuda")
    assert config.dtype == "half" and "TRITON_ATTN" in config.extra_args and "as a T4" in why


def test_vllm_course_gpu_as_t4_takes_the_fp8_kv_cache_away_from_a_gpu_that_has_it(fake_nvidia_smi, monkeypatch):
    from helpers.hardware import fp8_kv_refusal

    assert fp8_kv_refusal() is None  # the H200 itself: compute capability 9.0
    monkeypatch.setenv("VLLM_COURSE_GPU_AS", "t4")
    assert "compute capability 7.5" in fp8_kv_refusal()


@pytest.mark.parametrize(("visible", "names"), [
    ("0", ["NVIDIA H200"]), ("1", ["Tesla T4"]), ("1,0", ["Tesla T4", "NVIDIA H200"]),
    ("GPU-7b2d4e6f", ["Tesla T4"]), ("", []), ("-1", []), ("0,7,1", ["NVIDIA H200"]), (None, ["NVIDIA H200", "Tesla T4"]),
], ids=["index-0", "index-1", "reordered", "uuid-prefix", "empty", "minus-one", "stops-at-unknown", "unset"])
def test_only_the_gpus_cuda_visible_devices_names_are_detected(fake_nvidia_smi, monkeypatch, visible, names):
    """nvidia-smi lists every GPU of the machine; CUDA, and so vLLM, only those CUDA_VISIBLE_DEVICES names."""
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert [gpu.name for gpu in detect_gpus()] == names


def test_an_unknown_gpu_to_pass_for_is_refused(fake_nvidia_smi, monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_GPU_AS", "a100")
    with pytest.raises(ValueError, match="must be one of t4"):
        detect_gpus()


def test_eager_adds_enforce_eager_on_a_gpu_only():
    config = ServerConfig(port=8000, eager=True)
    assert "--enforce-eager" in build_launch(config, device="cuda", model="/m", served_name="m", machine_env={}).argv
    cpu = build_launch(config, device="cpu", model="/m", served_name="m", machine_env={}).argv
    assert "--enforce-eager" not in cpu and "-O0" in cpu  # a CPU server never compiles anyway


def test_a_cuda_13_vllm_on_a_cuda_12_torch_is_explained_with_the_fix():
    stack = gpu.Stack("2.11.0+cu128", "12.8", 1, "ImportError: libcudart.so.13: cannot open shared object file: "
                                                 "No such file or directory")
    text = gpu.what_to_do(stack)
    assert "CUDA 13 runtime (libcudart.so.13)" in text and "built for CUDA 12.8" in text
    assert "requirements/colab.txt" in text and "restart the runtime" in text


def test_a_gpu_torch_that_sees_no_gpu_says_how_to_get_one():
    text = gpu.what_to_do(gpu.Stack("2.11.0", "13.0", 0))
    assert "sees no GPU" in text and "Change runtime type" in text and "CUDA_VISIBLE_DEVICES" in text


def test_a_working_stack_needs_no_explanation():
    assert gpu.what_to_do(gpu.Stack("2.11.0", "13.0", 1)) is None


ON_GPU = detect_device() == "cuda"


def test_the_probe_runs_in_a_real_subprocess_and_reports_this_machines_torch():
    stack = gpu.probe_stack()
    assert stack.torch and stack.error is None
    if ON_GPU:  # a GPU machine: torch sees it and vLLM's kernels loaded
        assert stack.ok and stack.torch_cuda and stack.gpus >= 1 and gpu.what_to_do(stack) is None
    else:
        assert stack.torch_cuda is None and stack.gpus == 0 and "is a CPU build" in gpu.what_to_do(stack)


def test_an_interpreter_that_dies_importing_is_reported_not_raised():
    stack = gpu.probe_stack(python="/bin/false")
    assert not stack.ok and "died importing" in stack.error and "torch and vLLM cannot" in gpu.what_to_do(stack)


def test_the_command_line_check_says_what_this_machine_can_do():
    import subprocess

    done = subprocess.run([sys.executable, "-m", "helpers.serve.gpu"], capture_output=True, text=True, timeout=300)
    if ON_GPU:
        assert done.returncode == 0 and "vLLM's kernels load" in done.stdout
    else:
        assert done.returncode == 1 and "is a CPU build" in done.stdout


def test_vllms_gpu_build_without_a_visible_gpu_is_refused_before_starting(monkeypatch):
    monkeypatch.setattr(preflight, "detect_device", lambda: "cpu")
    monkeypatch.setattr(preflight, "gpu_build_installed", lambda: True)
    with pytest.raises(NoGPUError, match="vLLM's GPU build, but no NVIDIA GPU is visible"):
        preflight.choose_device(ServerConfig())
    assert preflight.choose_device(ServerConfig(device="cpu")) == "cpu"  # asked for: it is the user's call


def test_this_machines_vllm_build_matches_its_device():
    assert preflight.gpu_build_installed() is ON_GPU


def test_a_stack_that_passed_is_remembered_for_this_install_and_probed_again_for_another(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_BUILD", str(tmp_path))
    probes = []
    monkeypatch.setattr(gpu, "probe_stack", lambda: probes.append(1) or gpu.Stack("2.11.0", "13.0", 1))
    for _ in range(2):
        gpu.checked_stack.cache_clear()  # a new kernel
        assert gpu.checked_stack().ok
    assert len(probes) == 1 and (tmp_path / "gpu-stack-ok.json").exists()
    monkeypatch.setattr(gpu, "stack_key", lambda: "another python|2.12.0|0.27.0|*")  # torch or vLLM reinstalled
    gpu.checked_stack.cache_clear()
    gpu.checked_stack()
    assert len(probes) == 2
    gpu.checked_stack.cache_clear()


def test_a_failing_stack_is_never_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_BUILD", str(tmp_path))
    monkeypatch.setattr(gpu, "probe_stack", lambda: gpu.Stack("2.11.0+cu128", "12.8", 1, "ImportError: libcudart.so.13"))
    gpu.checked_stack.cache_clear()
    with pytest.raises(NoGPUError, match="libcudart.so.13"):
        gpu.checked_stack()
    assert not (tmp_path / "gpu-stack-ok.json").exists()
    gpu.checked_stack.cache_clear()
