"""The log reader against real logs captured from failed starts: vLLM 0.32 on this CPU, and vLLM
0.26 on the lent H200 (tests/data/server_logs/gpu-0.26, made by scripts/capture_failure_logs.py)."""

import re
from pathlib import Path

import pytest

from helpers.serve.log import _CAUSES, diagnose, milestone, parse_kv_cache_report, tail

LOGS = Path(__file__).parent / "data" / "server_logs"


@pytest.mark.parametrize(
    ("log_name", "cause"),
    [
        ("port_in_use", "port in use"),
        ("missing_model", "model not found"),
        ("hub_unreachable", "hub unreachable"),
        ("kv_unset", "KV cache size not set"),
        ("kv_huge", "out of memory"),
        ("mml_exceeds_kv", "max model length exceeds KV cache"),
        ("fp8_on_cpu", "missing GPU kernel"),
        ("bad_flag", "invalid flag"),
    ],
)
def test_captured_failure_log_is_diagnosed(log_name, cause):
    text = (LOGS / f"{log_name}.log").read_text()
    assert diagnose(text, returncode=1).cause == cause


def test_a_gpu_already_in_use_is_told_apart_from_running_out_of_memory():
    # The message as vLLM's GPU worker raises it (vllm/v1/worker/utils.py, 0.26-0.32); the H200 runs never hit it.
    line = ("ValueError: Free memory on device cuda:0 (61.2/139.8 GiB) on startup is less than desired GPU memory "
            "utilization (0.9, 125.8 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    found = diagnose(f"INFO loading weights\n{line}\n", returncode=1)
    assert found.cause == "GPU memory taken" and "nvidia-smi" in found.advice and "gpu_memory_utilization" in found.advice


def test_invalid_flag_advice_quotes_vllm_words():
    advice = diagnose((LOGS / "bad_flag.log").read_text(), returncode=2).advice
    assert "--max-num-seqs: invalid int value: 'zero'" in advice


def test_a_killed_process_is_named_by_its_signal():
    found = diagnose("INFO loading weights\n", returncode=-9)
    assert found.cause == "process killed"
    assert "SIGKILL" in found.advice


def test_an_unknown_exit_keeps_the_exit_code():
    found = diagnose("nothing recognisable\n", returncode=3)
    assert found.cause == "process died" and "code 3" in found.advice


def test_kv_cache_report_combines_log_line_and_metric_labels():
    text = (LOGS / "ready_cpu.log").read_text()
    labels = {"num_gpu_blocks": "728", "block_size": "128", "kv_cache_memory_bytes": "2147483648"}
    report = parse_kv_cache_report(text, labels)
    assert report is not None
    assert (report.num_tokens, report.max_model_len, report.max_concurrency) == (93184, 2048, 45.5)
    assert report.num_blocks * report.block_size == report.num_tokens
    assert report.memory_bytes == 2 * 2**30


def test_kv_cache_report_of_a_gpu_server_takes_the_pool_bytes_from_the_workers_line():
    # Logs of vLLM 0.26.0 on an H200 (SmolLM2, and the 8B dummy architecture), start-up only.
    labels = {"num_gpu_blocks": "372682", "block_size": "16"}
    report = parse_kv_cache_report((LOGS / "ready_gpu.log").read_text(), labels)
    assert report is not None and report.num_tokens == 5_962_912 == report.num_blocks * report.block_size
    dummy = parse_kv_cache_report((LOGS / "ready_gpu_dummy_8b.log").read_text())
    assert dummy is not None and (dummy.num_tokens, dummy.max_concurrency) == (931_104, 454.64)
    assert dummy.memory_bytes == round(113.66 * 2**30)
    # 128 KiB per token for 32 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes
    assert round(dummy.memory_bytes / dummy.num_tokens / 1024) == 128


def test_gpu_start_up_milestones_include_compilation_and_cuda_graphs():
    labels = _milestones("ready_gpu_dummy_8b.log")
    assert "compiling the model (torch.compile)" in labels and "CUDA graphs captured" in labels


def test_kv_cache_report_is_none_before_the_engine_profiled_memory():
    assert parse_kv_cache_report("INFO Starting to load model\n") is None


def test_start_up_milestones_are_recognised_in_order():
    labels = _milestones("ready_cpu.log")
    assert labels[0] == "configuration read"
    assert "KV cache: 93,184 tokens" in labels
    assert labels[-1] == "HTTP server starting on http://127.0.0.1:8123"
    assert labels.index("loading weights") < labels.index("KV cache: 93,184 tokens")


def test_a_gpu_start_up_has_its_worker_start_apart_from_its_weights():
    # vLLM 0.26's GPU runner says "Loading model from scratch", not the CPU runner's "Starting to load model": without
    # it the worker's start was counted as loading weights (notebook 01 on an H100 printed "weights 2.5 s" beside
    # "weights loaded in 0.06 s")
    labels = _milestones("ready_gpu.log")
    assert labels.index("engine process started") < labels.index("loading weights") < next(
        index for index, label in enumerate(labels) if label.startswith("weights loaded"))


def _milestones(log_name: str) -> list[str]:
    """The start-up milestones a captured log shows, in order."""
    return [label for line in (LOGS / log_name).read_text().splitlines() if (label := milestone(line))]


def test_tail_keeps_the_last_lines():
    assert tail("a\nb\nc\n", 2) == "b\nc"


def test_kv_cache_report_reads_the_served_dtype_from_the_engine_config_line():
    report = parse_kv_cache_report((LOGS / "ready_cpu.log").read_text())
    assert (report.dtype, report.cache_dtype, report.bytes_per_value) == ("bfloat16", "auto", 2)
    fp8 = parse_kv_cache_report((LOGS / "ready_cpu.log").read_text(), {"cache_dtype": "fp8_e4m3"})
    assert fp8.bytes_per_value == 1


@pytest.mark.parametrize(
    ("log_name", "cause"),
    [
        ("mml_over_model_limit", "max model length above the model's limit"),
        ("kv_pool_too_small", "max model length exceeds KV cache"),  # 0.26 on a GPU says it this way
        ("mml_exceeds_kv", "max model length exceeds KV cache"),
        ("bad_flag", "invalid flag"),
    ],
)
def test_captured_gpu_failure_log_is_diagnosed(log_name, cause):
    text = (LOGS / "gpu-0.26" / f"{log_name}.log").read_text()
    assert "version 0.26.0" in text or log_name == "bad_flag"  # argparse fails before the banner
    assert diagnose(text, returncode=1).cause == cause


def test_a_gpu_pool_too_small_names_what_one_request_needs_and_what_the_pool_has():
    # start_server(kv_cache_space_gib=1e-6) on the H200, vLLM 0.26: the pool (1,073 bytes) is 0.0 GiB
    found = diagnose((LOGS / "gpu-0.26" / "kv_pool_too_small.log").read_text(), returncode=1)
    assert "max_model_len=2048 tokens needs 0.04 GiB" in found.advice and "the pool has 0.0 GiB" in found.advice
    assert "more than 0.04 GiB" in found.advice and "Lower" not in found.advice.split(".")[0]
    # 0.0225 GiB on the CPU build reads "0.02 GiB is needed ... (0.02 GiB)": the advice says why equal figures fail
    assert "rounds both figures to 0.01 GiB and keeps one block of the pool back" in found.advice


def test_bfloat16_on_a_gpu_without_it_says_to_use_half():
    # No GPU here lacks bf16 (the H200 has it), so the line is vLLM 0.26's message as its
    # platforms/cuda.py builds it for a Colab T4, inside the engine's error line.
    line = ("(EngineCore pid=77) ValueError: Bfloat16 is only supported on GPUs with compute capability of at "
            "least 8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 instead by explicitly "
            "setting the `dtype` flag in CLI, for example: --dtype=half.")
    found = diagnose(line, returncode=1)
    assert found.cause == "dtype the GPU cannot run" and "(Tesla T4)" in found.advice and "dtype='half'" in found.advice


def test_max_model_len_above_the_models_limit_names_both_lengths():
    # start_server(max_model_len=100000) with SmolLM2 (max_position_embeddings 8192), vLLM 0.32 CPU
    found = diagnose((LOGS / "mml_over_model_limit.log").read_text(), returncode=1)
    assert found.cause == "max model length above the model's limit"
    assert "max_model_len=100000" in found.advice and "allows 8192 tokens" in found.advice
    assert "max_model_len=8192 or less" in found.advice


def test_a_kv_pool_too_small_for_one_block_says_to_raise_it_not_lower_it():
    # start_server(kv_cache_space_gib=1e-6): 1,073 bytes; vLLM: "No available memory for the cache blocks"
    found = diagnose((LOGS / "kv_pool_too_small.log").read_text(), returncode=1)
    assert found.cause == "KV cache too small"
    assert "raise kv_cache_space_gib" in found.advice and "Lower" not in found.advice


def test_every_named_group_of_a_pattern_reaches_the_advice():
    # Both ways: a placeholder without its group would raise KeyError in diagnose(), a group without its
    # placeholder would capture words the advice never shows.
    for cause, pattern, advice in _CAUSES:
        assert set(re.findall(r"\{(\w+)\}", advice)) == set(re.compile(pattern).groupindex), cause


@pytest.mark.parametrize(("logged", "low", "high"), [("128.0", 127.995, 128.005), ("0.5", 0.495, 0.505),
                                                     ("127.96", 127.955, 127.965)])
def test_the_workers_pool_line_is_rounded_to_hundredths_however_many_decimals_it_shows(logged, low, high):
    # vLLM's format_gib is f"{round(b / GiB_bytes, 2)}": "128.0" is 128.00 with its trailing zero dropped
    log = (f"INFO [gpu_worker.py:560] Available KV cache memory: {logged} GiB\n"
           "INFO GPU KV cache size: 1,000 tokens\nINFO Maximum concurrency for 100 tokens per request: 10.00x\n")
    report = parse_kv_cache_report(log)
    assert report.memory_rounding_bytes == round(0.005 * 2**30)
    span = ((report.memory_bytes - report.memory_rounding_bytes) / 2**30,
            (report.memory_bytes + report.memory_rounding_bytes) / 2**30)
    assert span == pytest.approx((low, high), abs=1e-9)


def test_the_hand_check_of_a_pool_logged_as_128_0_gib_names_the_hundredths_it_stands_for():
    from helpers.paged.kv_math import check_pool

    log = ("INFO Available KV cache memory: 128.0 GiB\nINFO GPU KV cache size: 5,965,296 tokens\n"
           "INFO Maximum concurrency for 2,048 tokens per request: 2912.74x\n")
    report = parse_kv_cache_report(log, {"num_gpu_blocks": "372831", "block_size": "16"})
    text = check_pool(report, 23_040).describe()  # SmolLM2 in bfloat16
    assert "anything from 127.995 to 128.005 GiB prints as 128.0 GiB" in text
    assert "The log gives the pool as 128.0 GiB" in text
