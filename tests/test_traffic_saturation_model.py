"""The saturation rate predicted from the step-time model: on paper, by simulation, and the term that explains a gap."""

import re
from dataclasses import replace

import pytest

from helpers.batching.step_time import StepTimeModel
from helpers.errors import InvalidArgumentError
from helpers.traffic.saturation_model import (
    TERMS,
    explain_saturation_gap,
    predict_saturation_rate,
    queue_growth,
    saturation_capacity,
)

EVEN = float("inf")  # burstiness: arrivals exactly 1 / rate apart
OVERHEAD_ONLY = StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.0)
SMALL = StepTimeModel(overhead_s=0.01, prefill_token_s=0.0001, decode_seq_s=0.002)


def test_with_only_overhead_the_rate_is_slots_over_output_tokens_times_a_step():
    cap = saturation_capacity(OVERHEAD_ONLY, 8, (16, 64), 10)
    assert cap.rate_per_s == pytest.approx(8 / (10 * OVERHEAD_ONLY.step_seconds(0, 8)))  # 80 requests/s
    assert (cap.overhead_share, cap.prefill_share, cap.decode_share) == (1.0, 0.0, 0.0)


def test_with_no_prefill_cost_each_request_decodes_one_token_fewer_than_it_outputs():
    # The first token comes out of the prefill step: N / (O x overhead + N (O - 1) x decode).
    model = StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.002)
    cap = saturation_capacity(model, 16, (16,), 32)
    assert cap.rate_per_s == pytest.approx(16 / (32 * 0.01 + 16 * 31 * 0.002))
    assert cap.bound == "max_num_seqs" and cap.prefill_steps == 1


def test_the_shares_are_of_the_mean_step_at_saturation_and_add_up_to_one():
    cap = saturation_capacity(StepTimeModel(), 8)  # the lab's mix: prompts 16/64/256/512, 64 tokens out
    r = cap.requests_per_step
    assert cap.step_s == pytest.approx(StepTimeModel().step_seconds(r * 212, r * 63))
    assert cap.rate_per_s == pytest.approx(r / cap.step_s)
    assert cap.overhead_share + cap.prefill_share + cap.decode_share == pytest.approx(1.0)
    assert "overhead" in cap.describe() and "requests/s" in cap.describe()


def test_a_prompt_longer_than_the_budget_left_by_the_decoders_takes_several_steps():
    # 4096 tokens, 2048 - 3 decoders = 2045 a step: 3 steps, then 15 decodes, in each of 4 slots.
    cap = saturation_capacity(SMALL, 4, (4096,), 16)
    assert cap.prefill_steps == 3 and cap.bound == "max_num_seqs"
    assert cap.requests_per_step == pytest.approx(4 / 18)


def test_many_slots_of_long_prompts_run_out_of_step_budget_first():
    cap = saturation_capacity(SMALL, 64, (4096,), 16)
    assert cap.bound == "max_num_batched_tokens"
    assert cap.requests_per_step == pytest.approx(2048 / (4096 + 15))


@pytest.mark.parametrize("slots, prompts, outputs", [
    (8, (16, 64), 10),  # slots bound, one prefill step each
    (4, (4096,), 16),  # slots bound, prompts in 3 chunks
    (32, (4096,), 16),  # the step budget binds
])
def test_with_evenly_spaced_arrivals_the_simulation_lands_just_above_the_paper_rate(slots, prompts, outputs):
    # The queue must grow by growth_threshold (2%) before it counts: 1 / 0.98 = 1.020, within the 1% bracket.
    s = predict_saturation_rate(SMALL, slots, prompts, outputs, burstiness=EVEN)
    assert 1.0 < s.vs_paper < 1.03
    assert s.low_per_s < s.rate_per_s < s.high_per_s and s.high_per_s / s.low_per_s <= 1.011


@pytest.mark.parametrize("seed", range(4))
def test_with_poisson_arrivals_one_seed_of_1000_requests_lands_within_8_percent(seed):
    s = predict_saturation_rate(SMALL, 4, (16, 64), 8, burstiness=1.0, seed=seed, num_requests=1000)
    assert abs(s.vs_paper - 1) < 0.08


def test_overloaded_by_a_factor_x_the_wait_grows_by_x_minus_1_seconds_per_second_of_arrivals():
    rate = 1.25 * saturation_capacity(SMALL, 8, (16, 64), 10).rate_per_s
    run = queue_growth(SMALL, 8, rate, (16, 64), 10, burstiness=EVEN)
    assert run.grows and run.growth == pytest.approx(0.25, abs=0.01)
    assert run.last_wait_s > run.middle_wait_s and run.num_requests == 300


def test_below_capacity_the_queue_does_not_grow_and_a_rerun_is_identical():
    rate = 0.9 * saturation_capacity(SMALL, 8, (16, 64), 10).rate_per_s
    first = queue_growth(SMALL, 8, rate, (16, 64), 10, seed=3)
    assert not queue_growth(SMALL, 8, rate, (16, 64), 10, burstiness=EVEN).grows
    assert queue_growth(SMALL, 8, rate, (16, 64), 10, seed=3) == first


def test_the_bisection_stops_at_max_simulations_and_says_so_when_it_cannot_bracket():
    s = predict_saturation_rate(SMALL, 8, (16, 64), 10, burstiness=EVEN, max_simulations=3)
    assert s.num_simulations == 3 and s.low_per_s <= s.capacity.rate_per_s < s.high_per_s
    with pytest.raises(InvalidArgumentError, match="pass a larger max_simulations"):
        predict_saturation_rate(SMALL, 8, (16, 64), 10, burstiness=EVEN, max_simulations=1)


@pytest.mark.parametrize("measured_vs_paper", [0.7, 0.9, 1.1])
def test_each_factor_alone_turns_the_paper_rate_into_the_measured_one(measured_vs_paper):
    model = StepTimeModel()
    measured = measured_vs_paper * saturation_capacity(model, 8).rate_per_s
    gap = explain_saturation_gap(measured, model, 8)
    assert gap.factors  # every term has an entry
    for term, factor in gap.factors.items():
        if factor is not None:
            changed = replace(model, **{term: getattr(model, term) * factor})
            assert saturation_capacity(changed, 8).rate_per_s == pytest.approx(measured)
    assert ("below" if measured_vs_paper < 1 else "above") in gap.sentence


def test_a_term_that_is_zero_or_would_turn_negative_cannot_explain_the_gap():
    model = StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.001)
    # Paper: 47.6/s, a request 0.011 s overhead + 0.010 s decode; 95/s asks for 0.0105 s in all.
    gap = explain_saturation_gap(95.0, model, 10, (16,), 11)
    assert gap.factors["prefill_token_s"] is None and "prefill_token_s cannot (it is 0 in the model)" in gap.sentence
    assert gap.factors["decode_seq_s"] is None and "decode_seq_s cannot (it would have to be negative)" in gap.sentence
    assert gap.factors["overhead_s"] == pytest.approx((0.011 + 1 / 95 - 0.021) / 0.011)
    assert set(gap.factors) == set(TERMS)


def test_the_term_needing_the_smallest_change_is_named_first():
    gap = explain_saturation_gap(40.0, StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.001),
                                 10, (16,), 11)
    assert gap.sentence.index("overhead_s would have to be 1.4x") < gap.sentence.index("decode_seq_s 1.4x")


def test_the_diagnosis_writes_each_factor_to_two_digits_not_as_a_measured_ratio():
    # Lab 2 prints this above questions that ask for a measured ratio; at three digits a factor of "1.63x" equalled
    # the TPOT ratio question 2 asks for (1.627) and the answer audit failed a CI run on 2026-12-06.
    gap = explain_saturation_gap(40.0, StepTimeModel(overhead_s=0.01, prefill_token_s=0.0, decode_seq_s=0.001),
                                 10, (16,), 11)
    written = re.findall(r"(\d+(?:\.\d+)?)x \(", gap.sentence)
    assert written == ["1.4", "1.4"], gap.sentence  # 1.364 and 1.4
    assert all(len(number.replace(".", "").lstrip("0")) <= 2 for number in written)


@pytest.mark.parametrize("call, says", [
    (lambda: saturation_capacity(SMALL, 0), "max_num_seqs must be a positive integer"),
    (lambda: saturation_capacity(SMALL, 8, ()), "prompt_lens must be a non-empty sequence"),
    (lambda: saturation_capacity(SMALL, 8, (16,), 0), "output_lens[0] must be a positive integer"),
    (lambda: saturation_capacity("fast", 8), "pass helpers.batching.step_time.StepTimeModel()"),
    (lambda: saturation_capacity(StepTimeModel(0.0, 0.0, 0.0), 8), "pass a fitted StepTimeModel"),
    (lambda: queue_growth(SMALL, 8, 0.0), "rate_per_s must be a positive, finite number"),
    (lambda: queue_growth(SMALL, 8, -2.0), "It is requests per second"),
    (lambda: queue_growth(SMALL, 8, 1.0, num_requests=5), "300 or more give a steady answer"),
    (lambda: queue_growth(SMALL, 8, 1.0, seed=-1), "seed must be an integer of 0 or more"),
    (lambda: queue_growth(SMALL, 8, 1.0, burstiness=0.0), "burstiness must be a positive"),
    (lambda: predict_saturation_rate(SMALL, 8, (16,), max_simulations=0), "max_simulations must be"),
    (lambda: explain_saturation_gap(0.0, SMALL, 8), "the measured saturation rate in requests per second"),
    (lambda: explain_saturation_gap(1.0, SMALL, 8, []), "prompt_lens must be a non-empty sequence"),
])
def test_bad_input_is_refused_with_what_to_pass_instead(call, says):
    with pytest.raises(InvalidArgumentError) as error:
        call()
    assert says in str(error.value)
