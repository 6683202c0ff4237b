"""Explanations whose sentences must not contradict the numbers they are built from: each test gives the
numbers of a case the old wording got wrong (the noise band applied one way, a start that compiled sooner, a
queue between polls, a step faster than its "bound") and checks the sentence; no server needed."""

from __future__ import annotations

from dataclasses import replace

from helpers.batching.explain import explain_live_engine
from helpers.load.client import RequestRecord
from helpers.load.prometheus import MetricsSample, summarize_samples
from helpers.traffic.plots import load_finding, plot_roofline
from helpers.traffic.rates import RatePoint
from helpers.tuning.comparison import NOISE, describe_change, describe_ratio
from helpers.tuning.ranking import LeverImpact, compare_prediction, impact_of, judge_order, ranking_table
from helpers.tuning.report import checklist
from helpers.tuning.roofline import DecodeRoofline
from helpers.tuning.startup import StartupComparison
from tests.test_tuning import measurement


# ----- helpers.tuning.comparison: one symmetric rule, and measured ranges before the CPU's constant ------------
def noise_called(ratio: float) -> bool:
    return "noise" in describe_ratio(ratio, "throughput")


def test_a_change_and_its_reverse_get_the_same_verdict():
    # 1.25x up and 0.8x (its reverse) are both at the threshold; 1.2x and 1/1.2 both under it
    assert not noise_called(1 + NOISE) and not noise_called(1 / (1 + NOISE))
    assert noise_called(1.2) and noise_called(1 / 1.2)
    assert describe_ratio(0.8, "throughput") == "throughput 0.80x (down 20%)"


def test_the_noise_sentence_says_once_what_the_threshold_is_and_that_it_is_chosen():
    assert describe_ratio(1.1, "throughput") == "throughput 1.10x (within the noise: under 1.25x either way)"
    text = describe_change(measurement("8", e2e=4.0, ttft=2.0), measurement("64", e2e=3.7, ttft=1.9))
    assert text.count("within the noise: under 1.25x either way") == 3  # throughput, p95 and median TTFT
    assert text.count("the course's chosen band for one run of each setting on its own server start") == 1
    far_apart = describe_change(measurement("8", e2e=4.0, ttft=2.0), measurement("64", e2e=2.0, ttft=0.5))
    assert "chosen band" not in far_apart


def spread_pair() -> tuple:
    """10,000 -> 12,000 output tok/s (1.20x, under the constant), each side's three runs 100 tok/s wide."""
    before = measurement("bf16", e2e=0.4, ttft=0.1, out=1000, lever="weights")
    after = measurement("fp8", e2e=4 * 1000 / 12_000, ttft=0.1, out=1000, lever="weights")
    return (replace(before, runs_tok_s=(9_950.0, 10_000.0, 10_050.0)),
            replace(after, runs_tok_s=(11_950.0, 12_000.0, 12_050.0)))


def test_ranges_that_do_not_overlap_make_a_change_under_the_constant_a_finding():
    before, after = spread_pair()
    text = describe_change(before, after)
    assert "runs 9,950-10,050 -> 11,950-12,050" in text
    assert "throughput 1.20x (up 20%: the runs' ranges do not overlap)" in text
    assert "noise" not in text.split("), p95")[0]  # the throughput clause: no noise claim
    assert "do not overlap" in checklist([(before, after)])  # the checklist's verdict agrees


def test_ranges_that_overlap_say_so_even_for_a_change_under_the_constant():
    before, after = spread_pair()
    after = replace(after, runs_tok_s=(10_040.0, 12_000.0, 12_050.0))
    assert "throughput 1.20x (within the run-to-run noise: the runs' ranges overlap)" in describe_change(before, after)


def test_the_ranking_tables_noise_mark_follows_the_checklists_verdict():
    for factor in (0.8, 1 / 1.2, 1.2, 1.25):  # 0.8 was a finding in the table and noise in the checklist
        row = ranking_table([LeverImpact("kv pool", factor, "a -> b")]).splitlines()[2]
        assert ("within the noise" in row) == noise_called(factor), factor


def test_the_ranking_table_reads_the_runs_ranges_as_the_checklist_does():
    before, after = spread_pair()
    impact = impact_of("quantization", before, after)
    assert "within the noise" not in ranking_table([impact]).splitlines()[2]


# ----- helpers.tuning.ranking: a predicted order is not scored on pairs too close to call -----------------------
def test_a_pair_within_the_noise_is_too_close_to_call_not_a_wrong_prediction():
    measured = [LeverImpact("kv pool", 1.05, ""), LeverImpact("max_num_seqs", 1.06, "")]
    assert [v.verdict for v in judge_order(measured)] == ["too close"]
    text = compare_prediction(["kv pool", "max_num_seqs"], measured)
    assert "0 of 1" not in text and "1 too close to call" in text and "max_num_seqs 1.06x ≈ kv pool 1.05x" in text
    # the pairs that are apart are still scored, by the same rule as judge_order
    text = compare_prediction(["prefix caching", "kv pool", "max_num_seqs"],
                              measured + [LeverImpact("prefix caching", 4.5, "")])
    assert "2 of 2 pairs in the measured order (1 too close to call: max_num_seqs and kv pool)" in text


# ----- helpers.tuning.startup: every case of start-up cost and speed-up, and missing numbers ---------------------
def startup(compiled_start_s: float, eager_start_s: float, compiled_tok_s: float, eager_tok_s: float) -> str:
    return StartupComparison("GPU", "0.26.0", "m", "load", compiled_start_s, eager_start_s, compiled_tok_s,
                             eager_tok_s, "2026-12-01").describe()


def test_a_compiled_server_that_started_sooner_has_nothing_to_pay_back():
    text = startup(40.0, 55.0, 9_000.0, 3_000.0)
    assert "-15" not in text and "pays for itself" not in text
    assert "ready 15.0 s sooner" in text and "3.00x as fast" in text
    # the case the sentence was written for still quotes its break-even
    assert "pays for itself after about 225,000 output tokens" in startup(100.0, 50.0, 9_000.0, 3_000.0)


def test_a_speed_up_within_the_noise_claims_no_break_even():
    text = startup(100.0, 50.0, 3_001.0, 3_000.0)
    assert "pays for itself" not in text and "within the noise" in text and "50.0 s of start-up" in text


def test_a_load_that_made_no_tokens_is_named_instead_of_dividing_by_zero():
    text = startup(100.0, 50.0, 3_000.0, 0.0)
    assert "Not measured: the eager server's output tok/s" in text and "pays for itself" not in text
    assert "compiled server's output tok/s" in startup(100.0, 50.0, 0.0, 3_000.0)


# ----- helpers.batching.explain: a queue between polls is not "never filled", and no invented cause -------------
def polled(rows: list[tuple[float, int, int]], cap: int):
    samples = [MetricsSample(t, running, waiting, 0.3, 0, 0, 0, 0, 0) for t, running, waiting in rows]
    return summarize_samples(samples, cap)


BURST = [RequestRecord(i, ok=True, ttft_s=0.1, e2e_s=0.5 + 0.01 * i) for i in range(104)]


def test_a_full_batch_whose_queue_only_the_last_poll_saw_is_not_called_unfilled():
    live = polled([(0.0, 0, 0), (0.2, 64, 0), (0.4, 64, 40)], cap=64)
    assert live.seconds_with_queue == 0 and live.peak_waiting == 40  # the reviewer's numbers
    text = explain_live_engine(live, BURST, 64, 2.0)
    assert "never filled" not in text and "busy machine" not in text
    assert "reach the cap of 64" in text and "40 requests waiting in the last poll only" in text


def test_a_full_batch_with_no_queue_in_any_poll_says_the_queue_fell_between_polls():
    text = explain_live_engine(polled([(0.0, 0, 0), (0.05, 64, 0), (0.1, 12, 0)], cap=64), BURST, 64, 2.0)
    assert "never filled" not in text and "between polls" in text and "one every 50.0 ms" in text


def test_a_batch_the_polls_never_saw_full_names_no_cause_it_did_not_measure():
    text = explain_live_engine(polled([(0.0, 0, 0), (0.2, 5, 12), (0.4, 3, 0)], cap=8), BURST, 8, 0.25)
    assert "busy machine" not in text and "peak at 5 of the cap of 8, while up to 12 requests waited" in text
    small = explain_live_engine(polled([(0.0, 0, 0), (0.2, 3, 0), (0.4, 0, 0)], cap=8), BURST[:3], 8, 0.25)
    assert "busy machine" not in small and "fewer than the cap of 8" in small


# ----- helpers.traffic.plots: a step faster than its bound, and ratios as precise as their values ---------------
def test_a_step_faster_than_the_bandwidth_bound_says_the_figure_understates_the_bandwidth():
    bound = DecodeRoofline(8, bytes_per_step=0.0744 * 20e9, bandwidth_bytes_per_s=20e9)  # 74.4 ms at 20 GB/s
    title = plot_roofline([(8, 0.055)], [bound], "20 GB/s (measured copy)").axes[0].get_title()
    assert "at least" not in title and "135%" not in title and "%" not in title
    assert "74.4 ms" in title and "understates this machine's read bandwidth" in title and "numpy" in title
    slower = plot_roofline([(8, 0.100)], [bound], "20 GB/s (measured copy)").axes[0].get_title()
    assert "takes at least 74.4 ms: the bound is 74% of the step" in slower


def rate_points(ttft_light: float, ttft_heavy: float) -> list[RatePoint]:
    return [RatePoint("max_num_seqs=8", rate, 1.0, 20, num_ok=20, ttft_p95_s=ttft)
            for rate, ttft in ((1.0, ttft_light), (3.0, ttft_heavy))]


def test_the_load_finding_ratio_has_the_digits_of_its_values_and_says_fell_below_1():
    assert load_finding(rate_points(0.11, 0.07)).endswith("0.11 s at 1 req/s, 0.07 s at 3 req/s (fell to 0.64x)")
    assert load_finding(rate_points(0.02, 0.031)).endswith("(1.6x)")
    assert load_finding(rate_points(1.0, 150.0)).endswith("1 s at 1 req/s, 150 s at 3 req/s (150x)")  # no 1.5e+02
