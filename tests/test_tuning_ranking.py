"""helpers.tuning.ranking: the module's "order of impact" judged with hand-checkable factors; no server needed."""

from __future__ import annotations

import pytest

from helpers.tuning.ranking import (
    MODULE_ORDER,
    LeverImpact,
    compare_prediction,
    impact_of,
    judge_order,
    rank,
    ranking_table,
    score,
)
from tests.test_tuning import measurement


def impacts(**factors: float | None) -> list[LeverImpact]:
    return [LeverImpact(lever.replace("_", " ") if lever != "max_num_seqs" else lever, factor, "a -> b")
            for lever, factor in factors.items()]


def test_the_module_lists_the_four_levers_pool_first_and_prefix_caching_last():
    assert MODULE_ORDER == ("kv pool", "max_num_seqs", "quantization", "prefix caching")


def test_a_lever_that_halves_throughput_is_as_large_as_one_that_doubles_it():
    assert LeverImpact("kv pool", 0.5, "").size == LeverImpact("kv pool", 2.0, "").size == 2.0


def test_the_previous_cpu_run_gets_one_pair_of_three_right():
    # prefix caching 4.5x, the pool 2.0x, max_num_seqs within the noise: only "pool above max_num_seqs" holds
    verdicts = judge_order(impacts(kv_pool=2.0, max_num_seqs=1.1, prefix_caching=4.5))
    assert [(v.first, v.second, v.verdict) for v in verdicts] == [
        ("kv pool", "max_num_seqs", "right"), ("kv pool", "prefix caching", "wrong"),
        ("max_num_seqs", "prefix caching", "wrong")]
    assert score(verdicts).startswith("the module's order gets 1 of 3 pairs right")


def test_measurements_in_the_modules_order_get_every_pair_right():
    verdicts = judge_order(impacts(kv_pool=8.0, max_num_seqs=4.0, quantization=2.0, prefix_caching=1.0))
    assert len(verdicts) == 6 and all(v.verdict == "right" for v in verdicts)


def test_sizes_within_the_noise_of_each_other_are_too_close_to_call():
    # 1.24 / 1.0 is under 1 + 0.25: no finding; 1.25 / 1.0 is exactly at it: the module is right
    assert judge_order(impacts(kv_pool=1.24, max_num_seqs=1.0))[0].verdict == "too close"
    assert judge_order(impacts(kv_pool=1.25, max_num_seqs=1.0))[0].verdict == "right"
    assert judge_order(impacts(kv_pool=1.0, max_num_seqs=1.25))[0].verdict == "wrong"
    assert judge_order(impacts(kv_pool=1.24, max_num_seqs=1.0), noise=0.1)[0].verdict == "right"


def test_a_lever_not_measured_is_ranked_nowhere_and_judged_in_no_pair():
    given = impacts(kv_pool=2.0, max_num_seqs=1.1, quantization=None, prefix_caching=4.5)
    assert [i.lever for i in rank(given)] == ["prefix caching", "kv pool", "max_num_seqs"]
    assert all("quantization" not in (v.first, v.second) for v in judge_order(given))
    assert "| - | quantization | a -> b | not measured | - | 3 |" in ranking_table(given)


def test_the_table_ranks_by_size_and_gives_the_modules_place():
    table = ranking_table(impacts(kv_pool=2.0, max_num_seqs=1.1, prefix_caching=4.5)).splitlines()
    assert table[2] == "| 1 | prefix caching | a -> b | 4.50x | 4.50x | 4 |"
    assert table[4] == "| 3 | max_num_seqs | a -> b | 1.10x | 1.10x (within the noise) | 2 |"


def test_a_lever_outside_the_claimed_order_is_refused():
    with pytest.raises(ValueError, match="not in the claimed order"):
        judge_order([LeverImpact("speculative decoding", 2.0, "")])
    with pytest.raises(ValueError, match="lever must be one of"):
        impact_of("speculative decoding", None, None)


def test_the_impact_of_two_measurements_is_their_output_throughput_ratio():
    slow, fast = measurement("8", e2e=4.0, ttft=1.0), measurement("64", e2e=2.0, ttft=0.5)
    impact = impact_of("max_num_seqs", slow, fast)
    assert impact.factor == pytest.approx(2.0) and impact.settings == "8 -> 64"


def test_a_side_that_was_not_measured_gives_no_factor():
    from helpers.tuning.measurement import Measurement
    gone = Measurement.not_run("KV pool", "0.025 GiB", "server did not start")
    assert impact_of("kv pool", gone, measurement("2 GiB", e2e=2.0, ttft=0.5)).factor is None


def test_the_learners_prediction_is_scored_pair_by_pair_against_the_measured_order():
    measured = impacts(kv_pool=2.0, max_num_seqs=1.1, prefix_caching=4.5)
    assert "3 of 3 pairs" in compare_prediction(["prefix caching", "kv pool", "max_num_seqs"], measured)
    assert "1 of 3 pairs" in compare_prediction(["KV pool", "max_num_seqs", "quantization", "prefix caching"],
                                                measured)
    assert "not in your list: max_num_seqs" in compare_prediction(["prefix caching", "kv pool"], measured)
    assert "should be a list" in compare_prediction("prefix caching", measured)
