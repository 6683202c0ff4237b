from pathlib import Path

from helpers.paged.kv_math import PoolCheck, check_pool, kv_bytes_per_token, tokens_that_fit
from helpers.serve.log import parse_kv_cache_report

LOGS = Path(__file__).parent / "data" / "server_logs"

SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "hidden_size": 576, "torch_dtype": "bfloat16"}
LLAMA_31_8B = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
               "hidden_size": 4096, "torch_dtype": "bfloat16"}


def test_smollm2_needs_23040_bytes_per_token():
    assert kv_bytes_per_token(SMOLLM2) == 23_040


def test_llama_31_8b_needs_128_kib_per_token():
    assert kv_bytes_per_token(LLAMA_31_8B) == 131_072


def test_fp8_kv_cache_halves_the_bytes():
    assert kv_bytes_per_token(SMOLLM2, dtype_bytes=1) == 11_520


def test_two_gib_pool_of_smollm2_holds_what_vllm_cpu_reported():
    # vLLM 0.32 CPU: "CPU KV cache size: 93,184 tokens" for --kv-cache-memory-bytes 2 GiB, blocks of 128
    assert tokens_that_fit(2 * 2**30, 23_040, 128) == 93_184


def test_a_multimodal_config_is_read_through_its_text_config():
    assert kv_bytes_per_token({"text_config": SMOLLM2, "vision_config": {}}) == 23_040


# The hand check of notebooks 01 and 03, against what real servers reported (tests/data/server_logs).


def test_the_hand_check_lands_exactly_where_the_cpu_build_gives_the_pools_bytes():
    labels = {"num_gpu_blocks": "728", "block_size": "128", "kv_cache_memory_bytes": "2147483648"}
    report = parse_kv_cache_report((LOGS / "ready_cpu.log").read_text(), labels)
    check = check_pool(report, kv_bytes_per_token(SMOLLM2, dtype_bytes=report.bytes_per_value))
    assert report.memory_rounding_bytes == 0 and check.blocks == (728, 728) and check.lands
    assert "exactly the engine's 728 blocks (93,184 tokens)" in check.describe()


def test_on_a_gpu_the_hand_check_lands_within_the_logs_rounding_and_says_so_in_blocks_and_tokens():
    # vLLM 0.26 on the H200: "Available KV cache memory: 127.95 GiB", "GPU KV cache size: 5,962,912 tokens"
    report = parse_kv_cache_report((LOGS / "ready_gpu.log").read_text(), {"num_gpu_blocks": "372682", "block_size": "16"})
    assert report.memory_rounding_bytes == round(0.005 * 2**30)
    check = check_pool(report, kv_bytes_per_token(SMOLLM2))
    low, high = check.blocks
    assert low < 372_682 < high and high - low < 40 and check.lands
    text = check.describe()
    assert "127.95 GiB" in text and "1 block (16 tokens) short of the engine's 372,682 blocks (5,962,912 tokens)" in text
    assert "rounding allows" in text


def test_the_8b_shapes_gpu_pool_lands_too_and_a_wrong_dtype_does_not():
    report = parse_kv_cache_report((LOGS / "ready_gpu_dummy_8b.log").read_text(), {"block_size": "16"})
    assert check_pool(report, kv_bytes_per_token(LLAMA_31_8B)).lands
    wrong = check_pool(report, kv_bytes_per_token(LLAMA_31_8B, dtype_bytes=4))
    assert not wrong.lands and "differently from this formula" in wrong.describe()


def test_no_pool_bytes_means_no_hand_check():
    report = parse_kv_cache_report("CPU KV cache size: 100 tokens, Maximum concurrency for 10 tokens per request: 10.0x")
    assert check_pool(report, 23_040) is None
    assert not PoolCheck(2 * 2**30, 0, 46_080, 128, engine_blocks=728).lands  # float32 bytes, bf16 pool
