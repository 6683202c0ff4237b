"""The notebook's exercise checks: right answers pass, wrong ones get a hint, nothing raises."""

import math

import pytest

from helpers.batching import exercises as ex
from helpers.batching.step_time import StepTimeModel


def test_the_tiny_trace_utilizations_match_a_hand_count():
    # Static: batch (r0: 2, r1: 8) lasts 8 steps, 10 busy slot-steps; batch (r2: 4, r3: 6) lasts 6, 10 busy.
    assert ex.grade_static_utilization(20 / 28).ok
    # Continuous: r2 takes r0's slot at step 3, r3 takes r2's at step 7, r3 ends at step 12.
    assert ex.grade_continuous_utilization(20 / 24).ok


def test_a_percentage_is_read_as_a_fraction():
    fb = ex.grade_static_utilization(71.4)
    assert fb.ok and "percentage" in fb.message


def test_a_wrong_utilization_gets_a_hint_about_counting_steps():
    fb = ex.grade_static_utilization(0.5)
    assert fb.ok is False and "longest member" in fb.message


@pytest.mark.parametrize("grade", [ex.grade_static_utilization, ex.grade_continuous_utilization,
                                   ex.grade_biggest_gain, ex.grade_batch_for_80_percent])
def test_an_unanswered_exercise_is_neither_right_nor_wrong(grade):
    assert grade(None).ok is None


def test_the_mixed_trace_gains_most_because_its_lengths_are_most_unequal():
    ratios = ex.throughput_ratios()
    assert max(ratios, key=ratios.get) == "mixed" and ratios["mixed"] > 1.5
    assert ratios["lab"] == pytest.approx(1.0, abs=0.02)  # equal lengths: nothing to gain
    assert ex.grade_biggest_gain("mixed", "b").ok
    assert ex.grade_biggest_gain(" Mixed ", "B").ok


def test_the_right_trace_with_a_wrong_or_missing_reason_is_not_yet_correct():
    assert ex.grade_biggest_gain("mixed").ok is None
    assert ex.grade_biggest_gain("mixed", "a").ok is False


def test_a_wrong_or_unknown_trace_kind_is_refused_with_the_choices():
    assert ex.grade_biggest_gain("lab", "b").ok is False
    fb = ex.grade_biggest_gain("poisson")
    assert fb.ok is False and "steady" in fb.message


def test_eighty_percent_of_the_decode_ceiling_needs_four_times_overhead_over_decode_cost():
    model = StepTimeModel(overhead_s=0.03, prefill_token_s=0.001, decode_seq_s=0.004)  # b = 4 x 30 / 4 = 30
    assert model.decode_tok_s(30) == pytest.approx(0.8 * ex.decode_ceiling_tok_s(model))
    assert ex.grade_batch_for_80_percent(30, model).ok
    assert ex.grade_batch_for_80_percent(30.02, model).ok  # the formula's value, printed to two decimals
    assert ex.grade_batch_for_80_percent(20, model).ok is False


@pytest.mark.parametrize("overhead_s, decode_seq_s", [(0.026425, 0.001), (0.0154325, 0.0001)])  # 105.7; a GPU's 617.3
def test_every_whole_number_short_of_eighty_percent_is_refused_however_close(overhead_s, decode_seq_s):
    model = StepTimeModel(overhead_s=overhead_s, decode_seq_s=decode_seq_s)
    exact = ex.batch_for_fraction_of_ceiling(model)
    needed = math.ceil(exact)
    assert ex.grade_batch_for_80_percent(needed, model).ok and ex.grade_batch_for_80_percent(exact, model).ok
    assert ex.grade_batch_for_80_percent(round(exact, 1), model).ok
    for short in range(needed - 20, needed):
        assert model.decode_tok_s(short) < 0.8 * ex.decode_ceiling_tok_s(model)
        fb = ex.grade_batch_for_80_percent(short, model)
        assert fb.ok is False and "short of 80%" in fb.message and "reaches only 80.00%" not in fb.message
    fb = ex.grade_batch_for_80_percent(needed + 1, model)
    assert fb.ok is False and "the smallest batch" in fb.message
    assert ex.grade_batch_for_80_percent(exact - 1.0, model).ok is False  # not the formula's value either


def test_the_eighty_percent_check_uses_the_model_it_is_given():
    fast_overhead = StepTimeModel(overhead_s=0.01, decode_seq_s=0.004)  # b = 10
    assert ex.grade_batch_for_80_percent(10, fast_overhead).ok
    assert not ex.grade_batch_for_80_percent(10, StepTimeModel()).ok


def test_a_fit_without_a_decode_slope_says_there_is_no_ceiling_instead_of_failing():
    flat = StepTimeModel(overhead_s=0.01, decode_seq_s=0.0)  # what the fit leaves when it pins a negative slope at 0
    for answer in (None, 1000):
        fb = ex.grade_batch_for_80_percent(answer, flat)
        assert fb.ok is None and "no decode ceiling" in fb.message and "StepTimeModel()" in fb.message


def test_giving_the_ceiling_instead_of_a_batch_size_is_explained():
    model = StepTimeModel(overhead_s=0.03, decode_seq_s=0.004)
    fb = ex.grade_batch_for_80_percent(250, model)
    assert fb.ok is False and "ceiling in tok/s, not a batch size" in fb.message


@pytest.mark.parametrize("check, args", [
    (ex.check_static_utilization, ("abc",)),
    (ex.check_static_utilization, (math.nan,)),
    (ex.check_continuous_utilization, ([1, 2],)),
    (ex.check_biggest_gain, (3, object())),
    (ex.check_batch_for_80_percent, ("lots",)),
    (ex.check_batch_for_80_percent, (None,)),
    (ex.check_batch_for_80_percent, (8, "not a model")),
])
def test_a_check_prints_feedback_and_never_raises(check, args, capsys):
    assert check(*args) is None
    out = capsys.readouterr().out
    assert out.startswith(("❌", "✏️"))
