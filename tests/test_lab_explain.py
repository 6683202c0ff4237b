"""helpers.lab.explain and helpers.lab.checks: the explanation follows the numbers, and its conclusions
flip when they do; the learner's answers are graded against their own records."""

from dataclasses import replace

import pytest

from helpers.lab.checks import (
    check_e2e_percentile,
    check_kv_limited,
    grade_answer,
    grade_e2e_percentile,
    grade_kv_blocks,
    grade_kv_limited,
    grade_peak_generating,
    grade_prefill_ratio,
    grade_speedup,
    grade_step_growth,
    grade_throughput,
)
from helpers.lab.explain import explain, explain_runs
from helpers.lab.table import ResultRow
from helpers.load.summary import summarize
from tests.test_results import make_run

KV = {"num_tokens": 93184, "num_blocks": 728, "block_size": 128, "max_model_len": 2048, "max_concurrency": 45.5}
LAB_TOKENS = [16 + 30 + 64, 64 + 30 + 64, 256 + 30 + 64, 512 + 30 + 64] * 12 + [110, 158]  # 50 requests


def setting(seqs, tput, **overrides):
    """A pooled row like the CPU lab's on a 2-core machine (two runs of 50 requests each)."""
    low = seqs <= 8
    summary = replace(
        summarize([]), num_requests=50, num_ok=50, num_runs=2, num_errors=0,
        output_tok_per_s=tput, spread={"output_tok_per_s": (tput * 0.95, tput * 1.05)},
        e2e_p50_s=19.0 if low else 20.0, e2e_p95_s=29.0 if low else 20.5,
        ttft_p50_s=16.0 if low else 6.0, ttft_p95_s=26.0 if low else 11.0,
        tpot_mean_ms=60.0 if low else 220.0, itl_p50_ms=55.0 if low else 150.0,
        itl_p95_ms=90.0 if low else 600.0, itl_p99_ms=120.0 if low else 1200.0,
        peak_generating=min(seqs, 50), prompt_tokens_total=11756, output_tokens_total=3200,
    )
    return ResultRow(seqs, "2 runs", replace(summary, **overrides))


def lab(low_tput=100.0, high_tput=160.0, low=None, high=None, **kwargs):
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("kv_cache", KV)
    kwargs.setdefault("request_kv_tokens", LAB_TOKENS)
    kwargs.setdefault("max_model_len", 2048)
    return explain(setting(8, low_tput, **(low or {})), setting(64, high_tput, **(high or {})), **kwargs)


# ----- the headline's verdict ------------------------------------------------------------------
def test_a_speed_up_of_seven_or_more_is_called_near_linear():
    assert "near-linear" in lab(100, 720).headline


def test_a_speed_up_near_the_fifty_request_ceiling_names_the_ceiling():
    headline = lab(100, 600).headline
    assert "close to the 6.25x that 50 requests allow" in headline and "near-linear" not in headline


def test_the_cpu_labs_speed_up_is_sub_linear_with_its_share_of_linear():
    headline = lab(100, 160).headline
    assert "1.60x" in headline and "sub-linear, 20% of the 8x" in headline


def test_no_gain_and_a_loss_are_said_as_such():
    assert "no real gain" in lab(100, 101).headline
    assert "throughput fell" in lab(100, 70).headline


def test_overlapping_ranges_are_called_noise():
    noisy = lab(100, 104).effect("throughput").text
    assert "within run-to-run noise" in noisy
    assert "larger than the run-to-run noise" in lab(100, 160).effect("throughput").text


# ----- latency ---------------------------------------------------------------------------------
def test_a_falling_p95_is_explained_by_waiting_for_a_slot_at_8():
    text = lab().effect("latency").text
    assert "29.0 s at 8 to 20.5 s at 64 (-29%)" in text and "queued for a slot" in text


def test_a_rising_p95_is_explained_by_slower_shared_steps():
    text = lab(high={"e2e_p95_s": 40.0}).effect("latency").text
    assert "(+38%)" in text and "each step is slower for everyone" in text


def test_an_unchanged_p95_says_about_the_same():
    assert "about the same" in lab(high={"e2e_p95_s": 30.0}).effect("latency").text


# ----- the effects -------------------------------------------------------------------------------
def test_fifty_requests_make_sixty_four_slots_act_like_fifty():
    text = lab().effect("requests, not slots").text
    assert "64 acts like 50" in text and "50/8 = 6.25x" in text and "at most 50 requests" in text


def test_fewer_requests_than_either_setting_caps_the_gain_at_one():
    # 5 requests: both settings run all 5 at once, so 64 slots can add nothing over 8 (a ceiling of 5/5 = 1x).
    # A measured 1.30x is not put down to the slots: with every request already running at 8, it is not batching.
    five = lab(100, 130, low={"num_requests": 5, "peak_generating": 5}, high={"num_requests": 5, "peak_generating": 5})
    text = five.effect("requests, not slots").text
    assert "64 acts like 5, and the best possible gain is 5/5 = 1.00x, not 8x." in text
    assert "so the batch grew 1.00x" in text
    assert "1.30x the output tokens/s" in five.headline and "no real gain" not in five.headline
    assert "requests allow" not in five.headline  # no "close to the 1.00x that 5 requests allow"
    assert "not from batching: all 5 requests fit in 8 slots, so 64 could run no more of them at once" in five.headline
    assert "sub-linear" not in five.headline


def test_more_requests_than_slots_uses_every_slot():
    text = lab(low={"num_requests": 200}, high={"num_requests": 200, "peak_generating": 64}).effect(
        "requests, not slots").text
    assert "every slot could be used" in text


def test_a_low_peak_says_not_all_requests_overlapped():
    assert "Not all 50 overlapped" in lab(high={"peak_generating": 30}).effect("requests, not slots").text


def test_step_time_growing_with_the_batch_is_called_proportional():
    text = lab(high={"tpot_mean_ms": 360.0}).effect("per-step cost").text
    assert "about in proportion" in text and "per running request fell from 16.7 to 2.8" in text


def test_flat_step_time_is_where_batching_pays():
    text = lab(100, 700, high={"tpot_mean_ms": 70.0}).effect("per-step cost").text
    assert "grew much less than the batch" in text and "where batching pays" in text and "97% of a step at 8" in text


def test_step_growth_between_the_two_is_partly_shared():
    assert "less than the batch" in lab().effect("per-step cost").text


def test_the_prediction_from_batch_and_step_growth_is_compared_with_the_measurement():
    assert "consistent" in lab(100, 170).effect("per-step cost").text  # 6.25 / 3.67 = 1.70x
    assert "other effects" in lab(100, 120).effect("per-step cost").text


def test_prefill_heavier_than_decode_is_said_with_the_stall():
    text = lab().effect("prefill interleaves with decode").text
    assert "prefill is 3.7x the decode tokens" in text and "stalled" in text and "1.20 s or more, 8x" in text


def test_no_stall_when_the_gaps_stay_even():
    text = lab(high={"itl_p99_ms": 300.0}).effect("prefill interleaves with decode").text
    assert "not visibly stalled" in text


def test_kv_cache_that_fits_is_not_the_limit_and_naive_reservation_would_not_fit():
    text = lab().effect("KV-cache capacity").text
    assert "93,184 tokens (728 blocks of 128)" in text and "never limited" in text
    assert "would need 102,400" in text and "only 45 requests" in text


def test_a_kv_cache_too_small_is_named_as_the_limit():
    small = {**KV, "num_tokens": 5120, "num_blocks": 40}
    text = lab(kv_cache=small).effect("KV-cache capacity").text
    assert "do not all fit" in text and "KV capacity limited the batch" in text


def test_a_large_pool_makes_naive_reservation_fit_too():
    big = {**KV, "num_tokens": 200_000, "num_blocks": 1562}
    assert "would also fit" in lab(kv_cache=big).effect("KV-cache capacity").text


def test_no_kv_report_means_no_claim():
    assert "cannot be checked" in lab(kv_cache=None).effect("KV-cache capacity").text


def test_cpu_and_gpu_get_different_hardware_explanations():
    assert "compute-bound" in lab(cpu_count=2).effect("the hardware").text
    assert "2 CPU cores" in lab(cpu_count=2).effect("the hardware").text
    gpu = lab(100, 300, device="cuda", high={"tpot_mean_ms": 70.0}).effect("the hardware").text
    assert "reading every weight once" in gpu and "as expected" in gpu


def test_missing_numbers_drop_findings_instead_of_inventing_them():
    explanation = lab(high={"tpot_mean_ms": None}, device=None)
    assert explanation.effect("per-step cost") is None and explanation.effect("the hardware") is None


def test_the_explanation_reads_as_markdown():
    markdown = lab().markdown()
    assert markdown.startswith("**max_num_seqs=64 gave 1.60x") and "- **KV-cache capacity.**" in markdown


def test_explain_runs_pools_saved_runs():
    # make_run's fifth request fails; without it the batch is the setting's, so every finding is there.
    runs = [replace(run, records=run.records[:4]) for run in (make_run(8, "a"), make_run(8, "b"),
                                                               make_run(64, "c", scale=0.5))]
    explanation = explain_runs(runs)
    assert "max_num_seqs=64 gave 2.00x" in explanation.headline
    assert "near-linear" not in explanation.headline and "no real gain" not in explanation.headline
    assert "728 blocks" in explanation.effect("KV-cache capacity").text
    assert "On 2 CPU cores" in explanation.effect("the hardware").text  # the run's cpu_cores


def test_explain_refuses_settings_it_cannot_compare():
    with pytest.raises(ValueError, match="a low and a higher max_num_seqs, got 64 and 8"):
        explain(setting(64, 100.0), setting(8, 100.0))
    with pytest.raises(ValueError, match=r"runs at two max_num_seqs settings, got \[8\]"):
        explain_runs([make_run(8, "a"), make_run(8, "b")])
    with pytest.raises(ValueError, match=r"no runs at max_num_seqs=16; the runs have \[8, 64\]"):
        explain_runs([make_run(8, "a"), make_run(64, "b")], high_seqs=16)


# ----- learner checks ----------------------------------------------------------------------------
def test_grades_give_feedback_and_never_raise(capsys):
    assert grade_answer(None, 5.0, "p50").ok is None
    assert "not answered yet" in grade_answer(None, 5.0, "p50").message
    assert grade_answer(5.05, 5.0, "p50").ok is True  # within 2%
    assert "correct" in grade_answer(5.05, 5.0, "p50").message
    assert grade_answer(7.0, 5.0, "p50").ok is False and "too high" in grade_answer(7.0, 5.0, "p50").message
    assert "expected a finite number" in grade_answer("five", 5.0, "p50").message
    nothing = grade_answer(1.0, None, "p50")
    assert nothing.ok is False and "nothing to check" in nothing.message
    assert check_e2e_percentile("five", make_run().records, 50) is None
    assert "❌" in capsys.readouterr().out
    assert check_kv_limited("no", make_run().records, {"block_size": 16}) is None  # a KeyError inside
    assert "Could not check this answer (KeyError" in capsys.readouterr().out


def test_grades_recompute_from_the_raw_records():
    records = make_run().records
    e2e = sorted(r.e2e_s for r in records if r.ok)
    assert e2e == [5.0, 6.0, 7.0, 8.0]
    assert grade_e2e_percentile(6.5, records, 50)
    assert grade_e2e_percentile(7.85, records, 95)
    assert grade_throughput(4 * 64 / 10.0, records)
    assert not grade_throughput(5 * 64 / 10.0, records)
    assert grade_speedup(1.0, records, records)


@pytest.mark.parametrize(("shown_above", "leaks"), [
    ("| your client | 8 | 103 | 1.46 | 1.48 | 2.46 |", False),  # a TPOT p95 in s, equal by chance (CI, 2026-12-04)
    ("64 slots gave 1.48x the throughput", True), ("speed-up 1.478", True),
])
def test_a_ratio_question_counts_as_shown_only_when_the_ratio_is(monkeypatch, shown_above, leaks):
    from helpers import answer_audit

    monkeypatch.setattr(answer_audit, "_cells", [5])  # the audit on, in cell 5, with cell 2 showing the text
    monkeypatch.setattr(answer_audit, "_shown", [(2, shown_above)])
    records, slower = make_run().records, make_run(scale=1.478).records  # a speed-up of 1.478
    if leaks:
        with pytest.raises(answer_audit.AnswerShownAbove, match="speed-up"):
            grade_speedup(1.478, slower, records)
    else:
        assert grade_speedup(1.478, slower, records)


def test_the_guided_questions_are_graded_against_hand_computed_values():
    # make_run: 4 successful requests sent at 0, generating over [1, 5), [2, 6), [3, 7), [4, 8);
    # 46 prompt and 64 output tokens each; a scale of 2 doubles every time.
    records, slower = make_run().records, make_run(scale=2.0).records
    assert grade_peak_generating(4, records) and not grade_peak_generating(3, records)
    assert grade_step_growth(2.0, records, slower) and not grade_step_growth(1.0, records, slower)
    assert grade_prefill_ratio(46 / 64, records) and not grade_prefill_ratio(64 / 46, records)
    assert grade_kv_blocks(4, records, 128)  # 110 tokens: one block of 128 each
    assert grade_kv_blocks(28, records, 16) and not grade_kv_blocks(27, records, 16)  # 7 blocks of 16 each
    fits = grade_kv_limited("no", records, {"num_tokens": 93184, "num_blocks": 728, "block_size": 128})
    assert fits and "4 blocks needed at once, 728 in the pool" in fits.message
    assert grade_kv_limited("yes", records, {"num_tokens": 320, "num_blocks": 20, "block_size": 16})
    assert not grade_kv_limited("no", records, {"num_tokens": 320, "block_size": 16})  # blocks from tokens
    unknown = grade_kv_limited("yes", records, {"num_tokens": 320})
    assert not unknown and "cannot be checked" in unknown.message
    assert grade_peak_generating(4, records).message.endswith("correct (4).")  # a whole number, not 4.0
    assert grade_kv_blocks(28, records, 16).message.endswith("correct (28).")
    assert grade_kv_limited(" No", records, {"num_tokens": 93184, "num_blocks": 728, "block_size": 128})


# ----- failed requests ---------------------------------------------------------------------------
def test_failed_requests_get_a_finding_of_their_own_with_their_errors():
    explanation = explain_runs([make_run(8, "a"), make_run(8, "b"), make_run(64, "c", scale=0.5)])
    failed = explanation.effect("failed requests")
    assert failed is not None and explanation.findings[0] is failed
    assert failed.text.startswith("2 of 10 requests failed at max_num_seqs=8 and 1 of 5 requests failed at "
                                  "max_num_seqs=64.")
    assert "At 8: 2 of 10 requests failed: timeout: no complete answer within 10 s (2)." in failed.text


def test_no_failed_requests_means_no_such_finding():
    assert lab().effect("failed requests") is None


def test_a_setting_where_every_request_failed_is_explained_without_a_speed_up():
    from helpers.load.client import RequestRecord

    broken = make_run(8, "a")
    broken = replace(broken, records=[RequestRecord(i, ok=False, error="APIConnectionError: Connection error.",
                                                    send_s=0.0, done_s=1.0) for i in range(5)])
    explanation = explain_runs([broken, make_run(64, "c", scale=0.5)])
    assert explanation.headline.startswith("No throughput to compare")
    assert "5 of 5 requests failed at max_num_seqs=8" in explanation.effect("failed requests").text
