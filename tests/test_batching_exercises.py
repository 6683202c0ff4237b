"""The notebook's exercise checks: right answers pass, wrong ones get a hint, nothing raises."""

import math
import re

import pytest

from helpers.batching import exercises as ex
from helpers.batching.measure_stats import model_table
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


def printed_costs(model):
    """Overhead and decode cost as model_table prints them, in ms: what a learner reads off the page."""
    rows = dict(line.rsplit(None, 1) for line in model_table({"fitted": model}).splitlines()[1:])
    return float(rows["overhead (ms/step)"]), float(rows["decode (ms/sequence)"])


# an H100's fit from notebook 04 (64 slots), a GPU fit with a sub-millisecond overhead, the defaults (a CPU)
@pytest.mark.parametrize("overhead_s, decode_seq_s", [(0.0024, 11.8e-6), (0.00240037, 11.7834e-6),
                                                      (0.0010004, 10.0049e-6), (0.00095, 0.0000331), (0.0317, 0.00332)])
def test_the_printed_costs_are_enough_to_solve_the_eighty_percent_exercise(overhead_s, decode_seq_s):
    model = StepTimeModel(overhead_s=overhead_s, decode_seq_s=decode_seq_s)
    exact = ex.batch_for_fraction_of_ceiling(model)
    overhead_ms, decode_ms = printed_costs(model)
    from_page = 4 * overhead_ms / decode_ms
    assert from_page == pytest.approx(exact, rel=0.0002)  # well inside the grader's 0.1%
    assert ex.grade_batch_for_80_percent(round(from_page, 1), model).ok
    if overhead_s == 0.0024:  # the finding: 4 x 2.400 / 0.012 = 800, refused; the table now reads 0.011800
        assert math.ceil(from_page) == 814 and ex.grade_batch_for_80_percent(math.ceil(from_page), model).ok


@pytest.mark.parametrize("overhead_s, decode_seq_s", [(0.0024, 11.8e-6), (0.0317, 0.00332), (0.03, 0.004)])
def test_the_right_answers_message_shows_arithmetic_that_adds_up(overhead_s, decode_seq_s):
    model = StepTimeModel(overhead_s=overhead_s, decode_seq_s=decode_seq_s)
    needed = math.ceil(ex.batch_for_fraction_of_ceiling(model) - 1e-9)
    message = ex.grade_batch_for_80_percent(needed, model).message
    o, d, b = re.search(r"= 4 x ([\d.]+) ms / ([\d.]+) ms = ([\d.]+), so (\d+) requests", message).groups()[:3]
    assert (float(o), float(d)) == printed_costs(model)
    assert 4 * float(o) / float(d) == pytest.approx(float(b), abs=0.05 + 0.001 * float(b))
    assert f"so {needed} requests" in message


def test_a_whole_number_just_short_through_rounding_is_told_to_use_the_models_own_costs():
    model = StepTimeModel(overhead_s=0.0024, decode_seq_s=11.8e-6)  # 813.6
    fb = ex.grade_batch_for_80_percent(813, model)
    assert fb.ok is False and "model's own overhead_s and decode_seq_s" in fb.message
    assert "model's own" not in ex.grade_batch_for_80_percent(800, model).message  # far off: no such excuse


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
