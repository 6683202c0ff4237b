import os

import pytest

from helpers.errors import ConfigError
from helpers.server_config import ServerConfig, build_launch


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8", True])
def test_max_num_seqs_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match="max_num_seqs must be a positive integer"):
        ServerConfig(max_num_seqs=bad)


@pytest.mark.parametrize("bad", [0, -0.1, 1.01, 90])
def test_gpu_memory_utilization_must_be_a_fraction_in_zero_one(bad):
    with pytest.raises(ConfigError, match=r"fraction of memory in \(0, 1\]"):
        ServerConfig(gpu_memory_utilization=bad)


def test_gpu_memory_utilization_of_exactly_one_is_allowed():
    assert ServerConfig(gpu_memory_utilization=1.0).gpu_memory_utilization == 1.0


@pytest.mark.parametrize("bad", [0, -2, "2GiB"])
def test_kv_cache_space_must_be_a_positive_size(bad):
    with pytest.raises(ConfigError, match="kv_cache_space_gib must be a positive number"):
        ServerConfig(kv_cache_space_gib=bad)


def test_unknown_device_is_refused():
    with pytest.raises(ConfigError, match="device must be 'auto', 'cpu' or 'cuda'"):
        ServerConfig(device="tpu")


@pytest.mark.parametrize("bad", [0, 70000, "8000"])
def test_port_must_be_a_valid_number(bad):
    with pytest.raises(ConfigError, match="port must be an integer"):
        ServerConfig(port=bad)


def test_extra_args_given_as_one_string_is_refused():
    with pytest.raises(ConfigError, match="sequence of separate arguments"):
        ServerConfig(extra_args="--seed 0")


def test_binding_beyond_loopback_needs_an_api_key():
    with pytest.raises(ConfigError, match="needs an API key"):
        ServerConfig(host="0.0.0.0")
    assert ServerConfig(host="0.0.0.0", api_key="class-key").host == "0.0.0.0"


def test_default_host_is_loopback():
    assert ServerConfig().host == "127.0.0.1"


def _launch(device, **settings):
    config = ServerConfig(port=8123, **settings)
    return build_launch(config, device=device, model="/models/m", served_name="m")


def test_cpu_launch_uses_eager_mode_and_an_explicit_kv_cache():
    launch = _launch("cpu")
    assert "-O0" in launch.argv
    index = launch.argv.index("--kv-cache-memory-bytes")
    assert launch.argv[index + 1] == str(2 * 2**30)
    assert "VLLM_CPU_OMP_THREADS_BIND" in launch.env


def test_cpu_launch_accepts_fractional_kv_cache_sizes():
    launch = _launch("cpu", kv_cache_space_gib=0.5)
    assert launch.argv[launch.argv.index("--kv-cache-memory-bytes") + 1] == str(2**29)


def test_gpu_launch_keeps_compilation_and_sets_memory_utilization():
    launch = _launch("cuda", gpu_memory_utilization=0.8)
    assert "-O0" not in launch.argv
    assert "--kv-cache-memory-bytes" not in launch.argv
    assert launch.argv[launch.argv.index("--gpu-memory-utilization") + 1] == "0.8"


def test_launch_passes_every_course_setting_as_vllm_flags():
    launch = _launch("cpu", max_num_seqs=8, enable_prefix_caching=False, dtype="bfloat16",
                     max_model_len=1024, extra_args=("--seed", "0"))
    argv = launch.argv
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert argv[argv.index("--max-model-len") + 1] == "1024"
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    assert "--no-enable-prefix-caching" in argv
    assert argv[-2:] == ["--seed", "0"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"


def test_prefix_caching_left_to_vllm_default_adds_no_flag():
    argv = _launch("cpu").argv
    assert not any("prefix-caching" in arg for arg in argv)


def test_api_key_travels_in_the_environment_never_on_the_command_line():
    launch = _launch("cpu", api_key="s3cret-key")
    assert all("s3cret-key" not in arg for arg in launch.argv)
    assert launch.env["VLLM_API_KEY"] == "s3cret-key"
    assert "s3cret-key" not in repr(ServerConfig(api_key="s3cret-key"))


def test_display_command_starts_with_python_and_uses_the_api_server_module():
    shown = _launch("cpu").display_command()
    assert shown[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]


def test_shell_command_puts_each_flag_with_its_value_on_one_line():
    lines = _launch("cpu", max_num_seqs=8).shell_command().splitlines()
    assert lines[0] == "python -m vllm.entrypoints.openai.api_server \\"
    assert "    --max-num-seqs 8" in lines and "    -O0 \\" in lines


from helpers.hardware import CPUInfo
from helpers.server_config import AVX2_SITE, cpu_dtype

AVX2_CPU = CPUInfo("EPYC 7R32", 2, frozenset({"avx2", "fma"}))
BF16_CPU = CPUInfo("EPYC 9R14", 2, frozenset({"avx2", "avx512f", "avx512_bf16"}))
FP16_CPU = CPUInfo("Xeon 8488C", 2, frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16"}))


def test_cpu_dtype_is_bfloat16_only_where_the_cpu_computes_it():
    assert cpu_dtype(BF16_CPU)[0] == "bfloat16"
    dtype, why = cpu_dtype(AVX2_CPU)
    assert dtype == "float32" and "no bfloat16 arithmetic" in why and "4.6x" in why


@pytest.mark.parametrize("cpu, fix", [(AVX2_CPU, "float32"), (BF16_CPU, "bfloat16")])
@pytest.mark.parametrize("half", ["half", "float16"])
def test_float16_on_a_cpu_without_it_names_the_dtype_to_use(cpu, fix, half):
    with pytest.raises(ConfigError, match=f"no float16 arithmetic .* Use dtype='{fix}'"):
        cpu_dtype(cpu, half)


def test_float16_is_served_where_the_cpu_has_it():
    assert cpu_dtype(FP16_CPU, "half")[0] == "float16"


def test_bfloat16_asked_for_on_an_avx2_cpu_is_served_with_a_warning():
    dtype, why = cpu_dtype(AVX2_CPU, "bfloat16")
    assert dtype == "bfloat16" and "several times slower" in why


@pytest.mark.parametrize("bad", ["fp16", "int8", "bf16"])
def test_an_unknown_dtype_is_refused_before_launch(bad):
    with pytest.raises(ConfigError, match="dtype must be one of auto, bfloat16, float16, half, float32, float"):
        ServerConfig(dtype=bad)


def test_cpu_launch_runs_the_model_in_the_engine_process(monkeypatch):
    monkeypatch.delenv("VLLM_COURSE_CPU_ISA", raising=False)
    launch = _launch("cpu")
    assert launch.argv[launch.argv.index("--distributed-executor-backend") + 1] == "uni"
    assert launch.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "ONEDNN_MAX_CPU_ISA" not in launch.env
    assert "--distributed-executor-backend" not in _launch("cuda").argv


def test_emulated_avx2_limits_every_library_of_the_server(monkeypatch):
    monkeypatch.setenv("VLLM_COURSE_CPU_ISA", "avx2")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = _launch("cpu").env
    assert (env["ONEDNN_MAX_CPU_ISA"], env["ATEN_CPU_CAPABILITY"], env["MKL_ENABLE_INSTRUCTIONS"]) == ("AVX2", "avx2", "AVX2")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(AVX2_SITE), "/elsewhere"]
