import math
import os
import re
from dataclasses import replace

import pytest

from helpers.errors import ConfigError
from helpers.hardware import CPUInfo
from helpers.serve.config import ServerConfig, build_launch, cpu_dtype
from helpers.serve.engine_env import AVX2_SITE


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


@pytest.mark.parametrize("bad", [0, -2, "2GiB", math.inf, True])
def test_kv_cache_space_must_be_a_positive_size(bad):
    with pytest.raises(ConfigError, match="kv_cache_space_gib must be a positive, finite number of GiB"):
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
    assert ServerConfig(host="0.0.0.0", api_key="class-key-2024").host == "0.0.0.0"


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
    assert launch.env["COURSE_SERVER_KEY"] == "s3cret-key"
    assert "s3cret-key" not in repr(ServerConfig(api_key="s3cret-key"))


def test_display_command_starts_with_python_and_uses_the_api_server_module():
    shown = _launch("cpu").display_command()
    assert shown[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]


def test_shell_command_puts_each_flag_with_its_value_on_one_line():
    lines = _launch("cpu", max_num_seqs=8).shell_command().splitlines()
    assert lines[0] == "python -m vllm.entrypoints.openai.api_server \\"
    assert "    --max-num-seqs 8" in lines and "    -O0 \\" in lines


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
    with pytest.raises(ConfigError, match="dtype must be one of 'auto', 'bfloat16', 'float16', 'half', 'float32', "
                                          "'float', got .*Or None to let the course choose"):
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


# ----- extra_args cannot pass around the flags the helper sets (helpers.serve.flags) -----------
from helpers.serve import flags as server_flags
from helpers.serve.server import VLLMServer

# (flag, a value, the ServerConfig field the error names)
OWNED_FLAGS = [
    ("--host", "0.0.0.0", "host"),
    ("--port", "9999", "port"),
    ("--model", "/models/other", "model"),
    ("--served-model-name", "other", "model"),
    ("--kv-cache-memory-bytes", "1024", "kv_cache_space_gib"),
    ("--gpu-memory-utilization", "0.5", "gpu_memory_utilization"),
    ("--max-model-len", "4096", "max_model_len"),
    ("--max-num-seqs", "4", "max_num_seqs"),
    ("--dtype", "float16", "dtype"),
    ("--quantization", "fp8", "quantization"),
    ("--enable-prefix-caching", None, "enable_prefix_caching"),
    ("--no-enable-prefix-caching", None, "enable_prefix_caching"),
    ("--distributed-executor-backend", "mp", "device"),
]


def _spellings(flag, value):
    """Every way vLLM's parser reads the same flag: apart, joined by '=', with underscores."""
    underscored = "--" + flag[2:].replace("-", "_")
    if value is None:
        return [(flag,), (underscored,)]
    return [(flag, value), (f"{flag}={value}",), (underscored, value), (f"{underscored}={value}",)]


@pytest.mark.parametrize(("flag", "value", "field"), OWNED_FLAGS)
def test_extra_args_cannot_set_a_flag_the_helper_owns_in_any_spelling(flag, value, field):
    for args in _spellings(flag, value):
        with pytest.raises(ConfigError, match=rf"sets {flag}\b.*ServerConfig\.{field}: pass {field}="):
            ServerConfig(extra_args=("--seed", "0", *args))


@pytest.mark.parametrize("args", [("--port.x", "1"), ("-q", "fp8"), ("-qfp8",), ("-q=fp8",),
                                  ("--device-memory-utilization", "0.5")])
def test_aliases_short_flags_and_dotted_keys_of_owned_flags_are_refused(args):
    with pytest.raises(ConfigError, match="which the helper sets itself"):
        ServerConfig(extra_args=args)


@pytest.mark.parametrize(("args", "why"), [(("--uds", "/tmp/vllm.sock"), "Unix socket"), (("--grpc",), "gRPC"),
                                           (("--headless",), "no HTTP"), (("--config=serve.yaml",), "cannot check")])
def test_flags_that_would_take_the_server_out_of_the_helpers_hands_are_refused(args, why):
    with pytest.raises(ConfigError, match=why):
        ServerConfig(extra_args=args)


@pytest.mark.parametrize("args", [("--api-key", "k-123"), ("--api-key=k-123",), ("--api_key", "k-123"),
                                  ("--api_key=k-123",), ("--hf-token", "t-123")])
def test_a_key_on_the_command_line_is_refused_without_showing_it(args):
    with pytest.raises(ConfigError, match="never argv") as caught:
        ServerConfig(extra_args=args)
    assert "api_key=" in str(caught.value) or "HF_TOKEN" in str(caught.value)
    assert "123" not in str(caught.value)


def test_a_value_that_looks_like_a_key_is_refused_without_showing_it():
    token = "hf_" + "a1B2c3D4" * 5
    with pytest.raises(ConfigError, match="looks like a key") as caught:
        ServerConfig(extra_args=("--seed", token))
    assert token not in str(caught.value)
    with pytest.raises(ConfigError, match="never argv"):
        ServerConfig(host="0.0.0.0", api_key="class-key-2024", extra_args=("--seed", "class-key-2024"))


def test_notebook_flags_stay_allowed_without_importing_vllm(monkeypatch):
    def no_vllm():
        raise AssertionError("vLLM's parser was built for flags known to be free")

    monkeypatch.setattr(server_flags, "_vllm_parser", no_vllm)
    for args in [("--attention-backend", "TRITON_ATTN"), ("--kv-cache-dtype", "fp8"), ("--seed", "0"),
                 ("--seed=-1",), ("--seed", "-1"), ("--enforce-eager",), ("-O0",), ("-O", "3")]:
        assert ServerConfig(extra_args=args).extra_args == args


def test_extra_args_must_be_strings():
    with pytest.raises(ConfigError, match="holds strings"):
        ServerConfig(extra_args=("--seed", 0))


def _vllm_parser_or_skip():
    parser = server_flags._vllm_parser()
    if parser is None:
        pytest.skip("vLLM cannot be imported here")
    assert parser.allow_abbrev  # why prefixes must be checked at all
    return parser


@pytest.mark.parametrize(("abbreviation", "flag"), [
    ("--ho", "--host"), ("--api-k", "--api-key"), ("--max-model", "--max-model-len"), ("--max_model=64", "--max-model-len"),
    ("--served", "--served-model-name"), ("--kv-cache-mem", "--kv-cache-memory-bytes"), ("--gpu-mem", "--gpu-memory-utilization"),
    ("--no-enable-prefix", "--no-enable-prefix-caching"), ("--dty", "--dtype"), ("--hf-t", "--hf-token"),
])
def test_a_prefix_vllm_would_expand_to_an_owned_flag_is_refused(abbreviation, flag):
    _vllm_parser_or_skip()
    with pytest.raises(ConfigError, match=rf"\({re.escape(flag)}\)|sets {re.escape(flag)} "):
        ServerConfig(extra_args=(abbreviation, "1"))


def test_a_prefix_of_a_free_flag_stays_allowed():
    _vllm_parser_or_skip()
    assert ServerConfig(extra_args=("--max-num-b", "4096")).extra_args == ("--max-num-b", "4096")


def test_without_vllm_a_prefix_of_an_owned_flag_is_refused(monkeypatch):
    monkeypatch.setattr(server_flags, "_vllm_parser", lambda: None)
    with pytest.raises(ConfigError, match="sets --max-model-len"):
        ServerConfig(extra_args=("--max-model", "64"))
    with pytest.raises(ConfigError, match="never argv"):
        ServerConfig(extra_args=("--api-k", "x"))
    assert ServerConfig(extra_args=("--max-num-batched-tokens", "64")).extra_args


def test_the_flag_tables_match_vllms_parser():
    parser = _vllm_parser_or_skip()
    actions = parser._option_string_actions
    for dest, flags in server_flags._GUARDED.items():
        # a later alias may be missing from an older vLLM (0.32's --device-memory-utilization is not in 0.26,
        # the GPU pin); the first spelling is the one every supported version has
        known = [flag for flag in flags if flag in actions]
        assert known[:1] == [flags[0]], (dest, flags[0])
        assert all(actions[flag].dest == dest for flag in known), dest
    for flag in server_flags.KNOWN_FREE:
        assert flag in actions and actions[flag].dest not in server_flags.OWNED, flag


# ----- the key never shows ---------------------------------------------------------------------
KEY = "s3cret-class-key"


def test_a_keyed_launch_hides_its_key_from_repr_and_shown_env():
    launch = _launch("cpu", host="0.0.0.0", api_key=KEY)
    assert launch.env["COURSE_SERVER_KEY"] == KEY  # the server's key guard still gets it
    assert KEY not in repr(launch) and KEY not in str(launch)
    shown = launch.shown_env()
    assert shown["COURSE_SERVER_KEY"] == "<hidden>" and KEY not in repr(shown)
    assert shown["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the rest stays readable


@pytest.mark.parametrize("name", ["HF_TOKEN", "OPENAI_API_KEY", "MY_SECRET", "db_password"])
def test_every_secret_looking_variable_is_hidden(name):
    from helpers.serve.config import Launch

    assert Launch(["python"], {name: KEY}).shown_env() == {name: "<hidden>"}


def test_config_and_server_never_show_the_key():
    config = ServerConfig(host="0.0.0.0", api_key=KEY)
    assert KEY not in str(config) and KEY not in repr(config)
    server = VLLMServer(config)
    server.port = 8123
    server.launch = build_launch(replace(config, port=8123), device="cpu", model="/models/m", served_name="m")
    assert KEY not in repr(server)


def test_an_owned_flag_with_a_bad_value_is_refused_before_launch():
    # tests/data/server_logs/bad_flag.log: vLLM once had to say this, 20 s into a start
    with pytest.raises(ConfigError, match="pass max_num_seqs="):
        ServerConfig(extra_args=("--max-num-seqs", "zero"))


def test_a_misspelled_server_setting_is_refused_with_the_settings_listed():
    with pytest.raises(ConfigError, match="max_num_seq is not a server setting; the settings are model, port"):
        VLLMServer(max_num_seq=4)


def test_build_launch_takes_the_machine_environment_it_is_given():
    launch = build_launch(ServerConfig(port=8000), device="cpu", model="/m", served_name="m",
                          machine_env={"LD_PRELOAD": "libx.so"})
    assert launch.env == {"LD_PRELOAD": "libx.so"}
