from helpers.hardware import GPUInfo, _parse_gpu_line, detect_device


def test_nvidia_smi_line_is_parsed():
    info = _parse_gpu_line("Tesla T4, 15360, 7.5")
    assert info == GPUInfo("Tesla T4", 15360, (7, 5))


def test_a_t4_has_no_bf16_and_an_h200_has():
    assert not GPUInfo("Tesla T4", 15360, (7, 5)).supports_bf16
    assert GPUInfo("NVIDIA H200", 143771, (9, 0)).supports_bf16


def test_forcing_cpu_hides_any_gpu(monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_FORCE_CPU", "1")
    assert detect_device() == "cpu"
