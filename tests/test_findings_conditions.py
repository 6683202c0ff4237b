"""helpers.lab.findings and helpers.lab.step_cost: a cause or a direction is stated only where the numbers
printed beside it show it, on the CPU's and the GPUs' saved runs and on made-up rows at the branches' edges."""

from __future__ import annotations

from pathlib import Path

from helpers.lab.explain import explain, explain_runs
from helpers.lab.findings import kv_text
from helpers.lab.results import load_runs
from tests.test_lab_explain import KV, LAB_TOKENS, lab, setting

RESULTS = Path(__file__).resolve().parent.parent / "results"
CPU_SWEEP = RESULTS / "cpu" / "sweep"  # 2 cores, SmolLM2-135M, two runs of 50 requests at 1 to 64 slots
H200 = RESULTS / "gpu-checks" / "2026-12-05" / "lab1-smollm2"


def spread(low: float, high: float) -> dict:
    return {"spread": {"output_tok_per_s": (low, high)}}


# ----- 1: what bounds a step is said only where the step growth shows it ------------------------------
def test_the_cpu_sweeps_one_to_two_slots_is_not_called_compute_bound():
    """1 -> 2 slots on 2 cores: a step 1.21x as long for a 2x batch, so most of a step was shared."""
    explanation = explain_runs(load_runs(CPU_SWEEP), 1, 2)
    hardware, step = explanation.effect("the hardware").text, explanation.effect("per-step cost").text
    assert "multiplications are compute-bound" not in hardware and "memory-bound" not in step
    assert "1.21x for a 2.00x batch, less than in proportion: about 79% of a step at 1 was shared" in hardware
    assert "were not compute-bound" in hardware and "shared part at about 79% of a step at 1" in step


def test_the_cpu_sweeps_sixteen_to_thirty_two_is_called_compute_bound_from_its_growth():
    hardware = explain_runs(load_runs(CPU_SWEEP), 16, 32).effect("the hardware").text
    assert "grew 1.75x for a 2.00x batch, about in proportion" in hardware
    assert "at these settings the cores were compute-bound" in hardware


def test_a_gpu_step_with_a_small_per_request_part_is_not_put_down_to_reading_the_weights():
    """The H200 on 2026-12-05: 1.64 -> 2.38 ms for a 6.25x batch, where SmolLM2's weights take well under
    0.1 ms to read; the growth shows a shared part, not which one."""
    explanation = explain_runs(load_runs(H200), 8, 64)
    step = explanation.effect("per-step cost").text
    assert "memory-bound" not in step and "reading the weights" not in step
    assert "about 91% of a step at 8" in step
    assert "less than in proportion, as expected: about 91% of a step at 8 was shared" in (
        explanation.effect("the hardware").text)


def test_a_gpu_step_that_grew_with_the_batch_says_the_per_request_work_dominated():
    text = lab(100, 140, device="cuda", high={"tpot_mean_ms": 330.0}).effect("the hardware").text
    assert "about in proportion: the work per request dominated" in text and "as expected" not in text


# ----- 2, 3: the throughput ranges, and the headline deferring to them --------------------------------
def test_a_range_entirely_below_the_other_does_not_overlap_and_is_a_difference_not_a_gain():
    text = lab(105, 55, low=spread(100, 110), high=spread(50, 60)).effect("throughput").text
    assert "do not overlap: the difference is larger than the run-to-run noise" in text


def test_the_cpu_sweeps_sixteen_to_thirty_two_headline_agrees_with_its_ranges():
    """93-94 tok/s against 103-104: 1.11x, small, but the ranges do not overlap."""
    explanation = explain_runs(load_runs(CPU_SWEEP), 16, 32)
    assert "no real gain" not in explanation.headline
    assert "a small gain from 2x the slots (55% of the 2x" in explanation.headline
    assert "larger than the run-to-run noise" in explanation.effect("throughput").text


def test_a_sub_linear_gain_inside_overlapping_ranges_is_called_noise_in_the_headline():
    headline = lab(100, 130, low=spread(80, 120), high=spread(110, 150)).headline
    assert "sub-linear" in headline and "within run-to-run noise" in headline


def test_a_small_loss_inside_overlapping_ranges_is_no_real_difference():
    assert "no real difference from 8x the slots" in lab(100, 95).headline


# ----- 4: the words of the per-step finding follow the numbers -------------------------------------
def test_a_shorter_step_for_a_larger_batch_is_not_called_longer():
    text = lab(high={"tpot_mean_ms": 18.0}, low={"tpot_mean_ms": 20.0}).effect("per-step cost").text
    assert "0.90x as long for a 6.25x larger batch" in text and "0.90x longer" not in text
    assert "per running request rose from 50.0 to 55.6" in text and "did not grow although the batch did" in text


def test_a_batch_that_shrank_is_not_called_proportional():
    text = lab(high={"peak_generating": 5, "tpot_mean_ms": 900.0}).effect("per-step cost").text
    assert "15.00x longer for a batch 0.62x the size" in text and "The batch did not grow" in text
    assert "proportion" not in text


def test_a_step_that_grew_more_than_the_batch_says_so():
    text = lab(low={"peak_generating": 8}, high={"peak_generating": 16, "tpot_mean_ms": 240.0}).effect(
        "per-step cost").text
    assert "4.00x longer for a 2.00x larger batch" in text and "grew more than the batch" in text
    assert "proportion" not in text


def test_proportional_means_within_a_quarter_of_the_batch_growth():
    """Batch 6.25x from 60 ms: 0.75 and 1.25 of it are step growths of 4.69x (281.25 ms) and 7.81x (468.75 ms)."""
    said = {tpot: "in proportion" in lab(high={"tpot_mean_ms": tpot}).effect("per-step cost").text
            for tpot in (281.0, 282.0, 468.0, 469.0)}
    assert said == {281.0: False, 282.0: True, 468.0: True, 469.0: False}


# ----- 5: failed requests are not explained as a slot effect ----------------------------------------
def test_a_setting_where_most_requests_failed_says_so_instead_of_blaming_the_slots():
    explanation = lab(100, 10, high={"num_errors": 90, "peak_generating": 5})
    assert "90 of 100 requests failed at max_num_seqs=64" in explanation.headline
    assert "throughput fell with more slots" not in explanation.headline
    for effect in ("requests, not slots", "per-step cost", "the hardware"):
        assert explanation.effect(effect) is None
    assert "are left out" in explanation.effect("failed requests").text


def test_a_few_failures_keep_the_findings_and_are_named_in_the_headline():
    explanation = lab(100, 160, high={"num_errors": 2})
    assert explanation.headline.endswith("(2 of 100 requests failed at max_num_seqs=64.)")
    assert explanation.effect("per-step cost") is not None and explanation.effect("the hardware") is not None


def test_a_low_peak_names_prefill_admission_only_where_the_timing_shows_it():
    unexplained = lab(high={"peak_generating": 30}).effect("requests, not slots").text  # p95 TTFT 11 s < p50 20 s
    assert "which vLLM admits" not in unexplained and "do not show which" in unexplained
    late = lab(high={"peak_generating": 30, "ttft_p95_s": 25.0}).effect("requests, not slots").text
    assert "finished before the last ones started generating (p95 time to first token 25.0 s" in late
    failed = lab(high={"peak_generating": 30, "num_errors": 4}).effect("requests, not slots").text
    assert "4 requests failed at 64, and a failed request never generates" in failed


# ----- 8, 9: the naive reservation against the setting, and numbers that can be tiny --------------
def test_a_naive_reservation_that_holds_more_than_the_setting_runs_is_not_called_fewer():
    text = kv_text(KV, LAB_TOKENS, 2048, 2)
    assert "fewer than 2" not in text and "could still hold 45 requests at once, no fewer than the 2" in text
    assert "only 45 requests at once (fewer than 50)" in kv_text(KV, LAB_TOKENS, 2048, 64)


def test_gpu_sized_numbers_keep_their_digits():
    huge = {"num_tokens": 5_965_600, "num_blocks": 372_850, "block_size": 16}
    text = lab(kv_cache=huge, request_kv_tokens=[491] * 50).effect("KV-cache capacity").text  # 31 blocks each
    assert "1,550 blocks (0.42% of the pool" in text
    prefill = lab(high={"ttft_p50_s": 0.106, "ttft_p95_s": 0.108, "e2e_p95_s": 0.736, "itl_p50_ms": 2.18,
                        "itl_p99_ms": 5.54}).effect("prefill interleaves with decode").text
    assert "106 ms (p50) and 108 ms (p95), 15% of the p95 latency" in prefill
    assert "(5.54 ms) stayed within 3x the median gap (2.18 ms)" in prefill


# ----- 15a: the latency finding's causes, each checked against its number ---------------------------
def test_requests_that_spent_little_time_before_their_first_token_are_not_called_waiting():
    text = lab(low={"ttft_p95_s": 2.9}).effect("latency").text  # 10% of the p95 of 29 s
    assert "mostly waiting" not in text and "2.90 s, 10% of the p95 latency" in text
    assert "spent more of it generating than waiting" in text


def test_a_rising_p95_with_flat_steps_is_not_put_down_to_slower_steps():
    text = lab(high={"e2e_p95_s": 43.5, "tpot_mean_ms": 60.0}).effect("latency").text
    assert "(+50%)" in text and "slower for everyone" not in text and "did not get slower (mean time per output token +0%)" in text


def test_an_unchanged_p95_needs_a_wait_to_remove_and_slower_steps_to_pay_for_it():
    nobody_waited = explain(setting(8, 100.0, num_requests=8, peak_generating=8, e2e_p95_s=20.0),
                            setting(64, 101.0, num_requests=8, peak_generating=8))
    text = nobody_waited.effect("latency").text
    assert "Removing the wait" not in text and "No request waited for a slot at either setting (8 requests, 8 slots)" in text
    flat = lab(high={"e2e_p95_s": 30.0, "tpot_mean_ms": 62.0}).effect("latency").text
    assert "about the same" in flat and "slower shared steps" not in flat
