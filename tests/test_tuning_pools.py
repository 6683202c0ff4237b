"""Notebook 05's small GPU pool is sized in the served model's tokens, so an 8B model starts with it too."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from helpers.paged.kv_math import kv_bytes_per_token
from helpers.tuning.arithmetic import GIB, LLAMA_31_8B, pool_holding
from helpers.tuning.measure import served_config

SMOLLM2 = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "torch_dtype": "bfloat16"}
MAX_MODEL_LEN, GPU_BLOCK = 1024, 16
SMALL_POOL_TOKENS = 2_330  # notebook 05's cell 8


def usable_blocks(gib: float, bytes_per_token: int) -> int:
    """Blocks vLLM 0.32 plans with: whole blocks of the pool, less the null block it keeps back."""
    return int(gib * GIB) // (bytes_per_token * GPU_BLOCK) - 1


@pytest.mark.parametrize("config", [SMOLLM2, {**LLAMA_31_8B, "torch_dtype": "bfloat16"}], ids=["smollm2", "llama-8b"])
def test_the_small_pool_holds_two_requests_of_max_model_len_whatever_the_model(config):
    per_token = kv_bytes_per_token(config)
    _, change = pool_holding(SMALL_POOL_TOKENS, per_token, 0.05)
    assert usable_blocks(change["kv_cache_space_gib"], per_token) >= 2 * MAX_MODEL_LEN // GPU_BLOCK


def test_a_fixed_0_05_gib_pool_is_too_small_for_one_8b_request():
    """The defect the token sizing fixes: 0.05 GiB is about 400 tokens of an 8B model, and vLLM refuses to start."""
    per_token = kv_bytes_per_token({**LLAMA_31_8B, "torch_dtype": "bfloat16"})
    assert per_token == 128 * 1024
    assert usable_blocks(0.05, per_token) < MAX_MODEL_LEN // GPU_BLOCK


def test_smollm2_keeps_the_blocks_of_the_recorded_gpu_run():
    """results/gpu/executed/05: 0.05 GiB held 2,320 tokens (145 blocks of 16): the GPU copy stays comparable."""
    label, change = pool_holding(SMALL_POOL_TOKENS, kv_bytes_per_token(SMOLLM2), 0.05)
    assert label == "0.05 GiB"
    assert int(change["kv_cache_space_gib"] * GIB) // (kv_bytes_per_token(SMOLLM2) * GPU_BLOCK) == 145


def test_an_unknown_model_keeps_the_fallback_size():
    assert pool_holding(SMALL_POOL_TOKENS, None, 0.05) == ("0.05 GiB", {"kv_cache_space_gib": 0.05})


def test_served_config_reads_a_folder_or_the_hub_cache_and_never_downloads(tmp_path, monkeypatch):
    import huggingface_hub

    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    assert served_config(SimpleNamespace(model=str(tmp_path), source="local")) == SMOLLM2
    assert served_config(SimpleNamespace(model=str(tmp_path / "absent"), source="dummy")) is None
    asked = []
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo, name: asked.append((repo, name)) or str(tmp_path / "config.json"))
    assert served_config(SimpleNamespace(model="meta-llama/Meta-Llama-3.1-8B-Instruct", source="hub")) == SMOLLM2
    assert asked == [("meta-llama/Meta-Llama-3.1-8B-Instruct", "config.json")]
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: None)  # not in the cache
    assert served_config(SimpleNamespace(model="meta-llama/Meta-Llama-3.1-8B-Instruct", source="hub")) is None
