from helpers.paged.kv_math import kv_bytes_per_token, tokens_that_fit

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
