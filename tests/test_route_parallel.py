"""Tensor and data parallelism as arithmetic (helpers.route.parallel), checked by hand against public shapes."""

from __future__ import annotations

import pytest

from helpers.route.parallel import (
    LLAMA_31_8B,
    LLAMA_31_70B,
    data_parallel_plan,
    describe_plan,
    tensor_parallel_plan,
)
from helpers.tuning.arithmetic import GIB, count_parameters
from tests.test_tuning import SMOLLM2  # SmolLM2-135M's config, the one copy the tests keep


def test_one_gpu_holds_every_weight_and_needs_no_all_reduce():
    plan = tensor_parallel_plan(LLAMA_31_8B, 1)
    assert plan.weight_bytes_per_gpu == count_parameters(LLAMA_31_8B) * 2
    assert plan.allreduces_per_step == 0 and plan.allreduce_bytes_per_token == 0
    assert plan.kv_bytes_per_token_per_gpu == 2 * 32 * 8 * 128 * 2  # 131,072: notebook 01's hand check


def test_tensor_parallel_halves_weights_and_kv_heads_per_gpu():
    one, two = tensor_parallel_plan(LLAMA_31_8B, 1), tensor_parallel_plan(LLAMA_31_8B, 2)
    assert two.weight_bytes_per_gpu == one.weight_bytes_per_gpu // 2
    assert (two.kv_heads_per_gpu, two.kv_bytes_per_token_per_gpu) == (4, 65_536)


def test_every_layer_all_reduces_twice_a_hidden_vector_per_token_and_the_embedding_once():
    plan = tensor_parallel_plan(LLAMA_31_8B, 2)
    assert plan.allreduces_per_step == 65  # 32 layers x (attention, MLP), then the vocabulary-parallel embedding
    assert plan.allreduce_bytes_per_token == 65 * 4096 * 2
    assert plan.allreduce_bytes_per_step(64) == 64 * 65 * 4096 * 2


def test_fewer_kv_heads_than_gpus_are_copied_not_cut():
    assert tensor_parallel_plan(LLAMA_31_8B, 16 // 2).kv_heads_per_gpu == 1
    assert tensor_parallel_plan({**LLAMA_31_8B, "num_attention_heads": 32}, 16).kv_heads_per_gpu == 1


def test_smollm2s_nine_heads_do_not_split_over_two_gpus_but_do_over_three():
    assert "9 attention heads" in tensor_parallel_plan(SMOLLM2, 2).problem
    three = tensor_parallel_plan(SMOLLM2, 3)
    assert three.problem is None and three.kv_heads_per_gpu == 1
    assert "cannot run" in describe_plan(tensor_parallel_plan(SMOLLM2, 2), "SmolLM2")


def test_a_70b_model_fits_no_single_h200_in_bf16_and_fits_two():
    one = tensor_parallel_plan(LLAMA_31_70B, 1, gpu_gib=141 * 10**9 / GIB, utilization=0.9)
    two = tensor_parallel_plan(LLAMA_31_70B, 2, gpu_gib=141 * 10**9 / GIB, utilization=0.9)
    assert not one.fits and one.kv_tokens_per_engine == 0 and "does not fit" in describe_plan(one, "70B")
    assert two.fits and two.kv_tokens_per_engine > 100_000


def test_tensor_parallel_gives_one_engine_more_kv_room_than_twice_one_gpu():
    one = tensor_parallel_plan(LLAMA_31_8B, 1, gpu_gib=24, utilization=0.92)
    two = tensor_parallel_plan(LLAMA_31_8B, 2, gpu_gib=24, utilization=0.92)
    assert two.kv_tokens_per_engine > 2 * one.kv_tokens_per_engine  # the weights no longer take half of each GPU


def test_data_parallel_copies_the_whole_model_and_adds_engines_not_room():
    one = tensor_parallel_plan(LLAMA_31_8B, 1, gpu_gib=24, utilization=0.92)
    four = data_parallel_plan(LLAMA_31_8B, 4, gpu_gib=24, utilization=0.92)
    assert four.weight_bytes_per_gpu == one.weight_bytes_per_gpu and four.num_engines == 4
    assert four.kv_tokens_per_engine == one.kv_tokens_per_engine and four.allreduces_per_step == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_a_parallel_size_that_is_not_a_positive_integer_is_refused(bad):
    with pytest.raises(ValueError):
        tensor_parallel_plan(LLAMA_31_8B, bad)
    with pytest.raises(ValueError):
        data_parallel_plan(LLAMA_31_8B, bad)


def test_a_plans_row_rounds_gib_for_a_table():
    row = tensor_parallel_plan(LLAMA_31_8B, 2, gpu_gib=24, utilization=0.92).row()
    assert row["weights GiB/GPU"] == 7.48 and row["scheme"] == "TP=2" and row["problem"] == ""


def test_a_plan_that_cannot_run_shows_no_figures_it_would_not_have():
    cut = tensor_parallel_plan({"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                                "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152}, 2).row()
    assert cut["problem"].startswith("9 attention heads do not divide")
    assert {cut[key] for key in ("weights GiB/GPU", "KV bytes/token/GPU", "KV room GiB/GPU", "tokens per engine",
                                 "all-reduces/step")} == {"-"}
    too_big = data_parallel_plan(LLAMA_31_70B, 2, gpu_gib=80).row()
    assert too_big["problem"].startswith("does not fit") and too_big["tokens per engine"] == "-"
    assert too_big["weights GiB/GPU"] > 80  # the weights stay: they are why it does not fit
