"""helpers.lab.prediction_check: the lab's sentence on notebook 04's prediction, on the GPU runs of 2026-12-05.

The numbers are lab 1's pooled runs and notebook 04's predictions from results/gpu/ (SmolLM2: the H100 in the
afternoon, the H200 in the morning), so each verdict is the one those runs deserved.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from helpers.lab.prediction_check import against_prediction
from helpers.lab.table import ResultRow
from helpers.load.summary import summarize


def pooled(seqs: int, mean: float, low: float, high: float, runs: int = 5) -> ResultRow:
    summary = replace(summarize([]), output_tok_per_s=mean, num_runs=runs, spread={"output_tok_per_s": (low, high)})
    return ResultRow(seqs, f"{runs} runs", summary)


def prediction(at_8: float, at_64: float) -> dict:
    return {"max_num_seqs": [8, 64], "predicted_output_tok_s": [at_8, at_64]}


def test_a_miss_inside_the_runs_spread_is_called_one_the_runs_cannot_tell():
    said = against_prediction(prediction(3054, 13383), [pooled(8, 2456, 2302, 2569), pooled(64, 9429, 8718, 10221)])
    assert "4.38x; you measured 2,456 and 9,429, 3.84x (3.39-4.44x between your runs)" in said
    assert "14% high: outside 10%, but inside the spread of your runs" in said
    assert said.endswith("Each setting: +24% at 8, +42% at 64.")


def test_a_miss_outside_the_runs_spread_says_the_model_misses_something():
    said = against_prediction(prediction(4159, 14654), [pooled(8, 4198, 4083, 4267), pooled(64, 17233, 15816, 18939)])
    assert "3.52x; you measured 4,198 and 17,233, 4.11x (3.71-4.64x between your runs)" in said
    assert "14% low: outside 10% and outside the spread of your runs" in said
    assert said.endswith("Each setting: -1% at 8, -15% at 64.")


def test_a_ratio_within_ten_percent_accounts_for_the_gain():
    said = against_prediction(prediction(1080, 5736), [pooled(8, 1094, 1086, 1098), pooled(64, 5539, 5400, 5667)])
    assert "5% high: within 10%, so the step-time model accounts for the gain" in said


def test_a_setting_predicted_to_the_percent_reads_zero_not_minus_zero():
    """The AMX Xeon's lab of 2026-12-05 15:28 UTC: 178 predicted at 8 slots against 178.4 measured."""
    said = against_prediction(prediction(177.9, 432), [pooled(8, 178.4, 177, 180, 2), pooled(64, 444, 442, 445, 2)])
    assert said.endswith("Each setting: 0% at 8, -3% at 64.")


def test_single_runs_have_no_spread_so_only_the_ten_percent_verdict_is_given():
    said = against_prediction(prediction(78, 112), [pooled(8, 192, 192, 192, runs=1), pooled(64, 481, 481, 481, 1)])
    assert "2.51x (one run each, so no spread between runs to judge a miss against)" in said
    assert "between your runs" not in said and "spread of your runs" not in said
    assert "43% low: outside 10%, and with one run at a setting these runs cannot tell" in said


def test_a_single_run_within_ten_percent_is_still_called_close():
    said = against_prediction(prediction(100, 123), [pooled(8, 100, 100, 100, 1), pooled(64, 120, 118, 122, 3)])
    assert "1.20x (one run at 8, so no spread" in said and "within 10%" in said and "spread of your runs" not in said


@pytest.mark.parametrize("measured", [[], [pooled(8, 192, 190, 194)]])
def test_a_missing_setting_is_named_rather_than_compared(measured):
    said = against_prediction(prediction(78, 112), measured)
    assert said.startswith("Notebook 04 predicted 64 against 8 slots; these runs have no throughput at")
    assert ("8 and 64" if not measured else "at 64,") in said
