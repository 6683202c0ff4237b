"""Notebook 05's small GPU pool is sized in the served model's tokens, so an 8B model starts with it too."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.paged.kv_math import kv_bytes_per_token
from helpers.tuning.arithmetic import GIB, LLAMA_31_8B, pool_holding
from helpers.tuning.measure import served_config

SMOLLM2 = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "torch_dtype": "bfloat16"}
MAX_MODEL_LEN, GPU_BLOCK = 1024, 16
SMALL_POOL_TOKENS = 2_330  # notebook 05's cell 8
NOTEBOOK_05 = Path(__file__).resolve().parent.parent / "notebooks" / "05_throughput_tuning.ipynb"


def notebook_cell(cell_id: str) -> ast.Module:
    """Notebook 05's cell ``cell_id``, parsed inside a function (a cell may await at its top level)."""
    cells = json.loads(NOTEBOOK_05.read_text())["cells"]
    source = "".join(next(c["source"] for c in cells if c.get("id") == cell_id))
    return ast.parse("async def _cell():\n" + "\n".join("    " + line for line in source.splitlines()))


def assigned(tree: ast.AST, name: str) -> ast.expr:
    """The value of the one assignment to ``name`` in ``tree``."""
    values = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]
    assert len(values) == 1, f"{name} is assigned {len(values)} times"
    return values[0]


def calls_of(tree: ast.AST, function: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id == function]


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
    # the fix: the same 2,330 tokens, given the 8B model's bytes a token, are a pool in its own GiB, not 0.05
    label, change = pool_holding(SMALL_POOL_TOKENS, per_token, 0.05)
    gib = change["kv_cache_space_gib"]
    assert gib != 0.05 and label == f"{gib:.3g} GiB"
    assert gib * GIB >= SMALL_POOL_TOKENS * per_token - GIB * 1e-6  # rounded to 6 places of a GiB
    assert usable_blocks(gib, per_token) >= 2 * MAX_MODEL_LEN // GPU_BLOCK


def test_notebook_05s_small_gpu_pool_is_sized_in_tokens_of_the_served_model():
    """Cell 8473b305's GPU pools end with pool_holding(SMALL_POOL_TOKENS, ...), not a fixed 0.05 GiB."""
    cell = notebook_cell("8473b305")
    tokens = assigned(cell, "SMALL_POOL_TOKENS")
    assert isinstance(tokens, ast.Constant) and tokens.value == SMALL_POOL_TOKENS
    pools = assigned(cell, "PLANNED_POOLS")
    assert isinstance(pools, ast.IfExp) and ast.unparse(pools.test) == "ON_GPU", "PLANNED_POOLS: GPU if ON_GPU else CPU"
    assert isinstance(pools.body, ast.List)
    small = pools.body.elts[-1]  # largest first: the small pool is the last
    assert isinstance(small, ast.Call) and ast.unparse(small.func) == "pool_holding", ast.unparse(small)
    assert ast.unparse(small.args[0]) == "SMALL_POOL_TOKENS"
    assert "kv_bytes_per_token(" in ast.unparse(small.args[1])
    assert calls_of(pools.body, "pool_holding") == [small]


def test_notebook_05s_fp8_kv_server_starts_only_where_fp8_kv_refusal_says_none():
    """Cell f457f37c: --kv-cache-dtype fp8 below compute capability 8.9 (or on a CPU without AVX-512/AMX) is skipped."""
    cell = notebook_cell("f457f37c")
    refusal = assigned(cell, "FP8_KV_REFUSAL")
    assert isinstance(refusal, ast.Call) and ast.unparse(refusal.func) == "fp8_kv_refusal"
    settings = assigned(cell, "fp8_settings")  # the FP8 server's settings, named: start_ahead takes them too
    assert settings is not None and "('--kv-cache-dtype', 'fp8')" in ast.unparse(settings)
    fp8_starts = [c for c in calls_of(cell, "start_server") if "fp8_settings" in ast.unparse(c)]
    assert len(fp8_starts) == 1, "one server with --kv-cache-dtype fp8"
    guards = [node for node in ast.walk(cell) if isinstance(node, ast.If)
              and ast.unparse(node.test) in ("FP8_KV_REFUSAL is None", "FP8_KV_REFUSAL is not None")]
    assert len(guards) == 1, "the cell decides on FP8_KV_REFUSAL is None"
    guard = guards[0]
    served, refused = (guard.body, guard.orelse) if isinstance(guard.test.ops[0], ast.Is) else (guard.orelse, guard.body)
    assert any(fp8_starts[0] in ast.walk(statement) for statement in served), "the fp8 server starts outside the guard"
    assert refused and not any(calls_of(statement, name) for statement in refused for name in ("start_server",
                                                                                                "start_ahead"))
    assert any("FP8_KV_REFUSAL" in ast.unparse(statement) for statement in refused), "the skip says why"


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
