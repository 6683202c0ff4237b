"""helpers.load.summary: one pure function from raw records to numbers, checked by hand and against numpy."""

import json

import numpy as np
import pytest

from helpers.load.client import RequestRecord
from helpers.load.summary import RunSummary, peak_overlap, percentile, pool_summaries, summarize


def ok(index, send, ttft, e2e, tokens=5, prompt=20, itl=None):
    return RequestRecord(index, ok=True, prompt_tokens=prompt, output_tokens=tokens, send_s=send, ttft_s=ttft,
                         e2e_s=e2e, done_s=send + e2e, itl_s=itl if itl is not None else [])


def failed(index, send=0.0, done=1.0, error="APIConnectionError: Connection error."):
    return RequestRecord(index, ok=False, error=error, send_s=send, done_s=done)


@pytest.mark.parametrize("q", [0, 5, 25, 50, 90, 95, 99, 100])
@pytest.mark.parametrize("values", [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [3.5], [2, 2, 9],
                                    list(np.random.default_rng(0).exponential(3.0, 50))])
def test_percentiles_are_numpys_linear_interpolation(values, q):
    assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_percentiles_by_hand():
    assert percentile(list(range(1, 11)), 50) == 5.5
    assert percentile(list(range(1, 11)), 95) == pytest.approx(9.55)
    assert percentile([], 50) is None


def test_summary_percentiles_match_numpy_over_the_successful_requests_only():
    rng = np.random.default_rng(1)
    e2e = rng.uniform(5, 30, 50)
    records = [ok(i, 0.0, e / 3, e) for i, e in enumerate(e2e)] + [failed(50, done=100.0)]
    s = summarize(records)
    for q in (50, 95, 99):
        assert getattr(s, f"e2e_p{q}_s") == pytest.approx(np.percentile(e2e, q))
        assert getattr(s, f"ttft_p{q}_s") == pytest.approx(np.percentile(e2e / 3, q))


def test_a_small_run_by_hand():
    records = [
        ok(0, send=0.0, ttft=1.0, e2e=3.0, tokens=5, itl=[0.5, 0.5, 0.5, 0.5]),
        ok(1, send=0.0, ttft=2.0, e2e=4.0, tokens=3, itl=[1.0, 1.0]),
        failed(2, send=0.0, done=2.0),
    ]
    s = summarize(records)
    assert (s.num_requests, s.num_ok, s.num_errors) == (3, 2, 1)
    assert s.wall_s == 4.0  # first send -> last return
    assert s.output_tokens_total == 8 and s.prompt_tokens_total == 40
    assert s.output_tok_per_s == 2.0 and s.requests_per_s == 0.5
    assert s.e2e_p50_s == 3.5 and s.ttft_mean_s == 1.5
    assert s.tpot_mean_ms == pytest.approx((500 + 1000) / 2)  # (3-1)/4 s and (4-2)/2 s
    assert s.itl_mean_ms == pytest.approx(4000 / 6)
    assert s.peak_generating == 2 and s.peak_in_flight == 3


def test_errors_are_counted_and_never_shrink_the_sample_silently():
    s = summarize([failed(i) for i in range(50)])
    assert s.num_errors == 50 and s.num_ok == 0 and s.num_requests == 50
    assert s.output_tok_per_s == 0.0 and s.e2e_p50_s is None and s.tpot_mean_ms is None


def test_no_records_at_all_gives_zeros_and_nones_not_an_exception():
    s = summarize([])
    assert s.num_requests == 0 and s.wall_s == 0.0 and s.output_tok_per_s is None


def test_a_summary_round_trips_through_its_json_form():
    pooled = pool_summaries([summarize([ok(0, 0.0, 1.0, 2.0)]), summarize([ok(0, 0.0, 1.0, 4.0)])])
    assert RunSummary.from_dict(json.loads(json.dumps(pooled.to_dict()))) == pooled
    assert pooled.range_of("e2e_p95_s") == (2.0, 4.0) and summarize([]).range_of("e2e_p95_s") is None


def test_pooling_nothing_is_refused_in_words():
    with pytest.raises(ValueError, match="at least one summary"):
        pool_summaries([])


def test_field_names_carry_their_units():
    for key, value in summarize([ok(0, 0.0, 1.0, 2.0)]).to_dict().items():
        if isinstance(value, float):
            assert key.endswith(("_s", "_ms", "_per_s")), key


def test_peak_overlap_counts_intervals_that_share_an_instant():
    assert peak_overlap([]) == 0
    assert peak_overlap([(0, 1), (1, 2)]) == 1  # one ends as the other starts
    assert peak_overlap([(0, 10)] + [(i, i + 1) for i in range(5)]) == 2
    assert peak_overlap([(0, 5)] * 8) == 8


def test_waves_of_eight_show_a_peak_of_eight():
    records = [ok(i, 0.0, ttft=(i // 8) * 2.0 + 0.1, e2e=(i // 8) * 2.0 + 2.0) for i in range(50)]
    assert summarize(records).peak_generating == 8


def test_pooling_repetitions_gives_means_ranges_and_summed_errors():
    a = summarize([ok(0, 0.0, 1.0, 2.0, tokens=10)])
    b = summarize([ok(0, 0.0, 1.0, 4.0, tokens=10), failed(1, done=4.0)])
    pooled = pool_summaries([a, b])
    assert pooled.num_runs == 2
    assert pooled.output_tok_per_s == pytest.approx((5.0 + 2.5) / 2)
    assert pooled.range_of("output_tok_per_s") == (2.5, 5.0)
    assert pooled.num_errors == 1
    assert pooled.peak_generating == 1 and isinstance(pooled.peak_generating, int)


# ----- failed requests -----------------------------------------------------------------------------
def cut_short(index, send=0.0):
    """A request whose stream broke after its first tokens: times it reached, None for the rest."""
    return RequestRecord(index, ok=False, error="stream ended before the server finished the answer",
                         send_s=send, ttft_s=0.5, e2e_s=None, done_s=None, output_tokens=None, itl_s=[0.1])


def test_every_aggregate_skips_the_missing_times_of_failed_requests_and_counts_them():
    records = [ok(0, 0.0, 1.0, 3.0), ok(1, 0.5, 1.0, 2.0), cut_short(2), failed(3, done=None)]
    s = summarize(records)
    assert (s.num_ok, s.num_errors, s.num_requests) == (2, 2, 4)
    assert s.wall_s == 3.0  # a failed request without done_s ends where it was sent
    assert s.e2e_p50_s == 2.5 and s.ttft_p50_s == 1.0 and s.peak_generating == 2
    assert s.itl_mean_ms is None  # the cut-short request's gaps are not pooled with successful ones


def test_a_run_where_every_request_failed_has_no_latencies_but_a_wall_time_and_errors():
    s = summarize([cut_short(0), failed(1, done=2.0), failed(2, done=None)])
    assert s.num_errors == 3 and s.num_ok == 0 and s.output_tok_per_s == 0.0
    assert s.e2e_p95_s is None and s.ttft_p50_s is None and s.tpot_mean_ms is None
    assert s.peak_generating == 0 and s.wall_s == 2.0
    pooled = pool_summaries([s, summarize([ok(0, 0.0, 1.0, 2.0)])])
    assert pooled.e2e_p95_s is None and pooled.num_errors == 3  # not an average of one run's number


def test_failures_are_described_in_words_grouped_by_error_most_frequent_first():
    from helpers.load.summary import describe_failures

    records = [ok(0, 0.0, 1.0, 2.0)] * 17 + [failed(1)] * 2 + [failed(2, error="timeout: no complete answer")]
    assert describe_failures(records) == ("3 of 20 requests failed: APIConnectionError: Connection error. (2); "
                                          "timeout: no complete answer (1).")
    assert describe_failures(records[:17]) is None
    many = [failed(i, error=f"error {i}") for i in range(5)]
    assert describe_failures(many).endswith("; and 2 other errors.")
    assert describe_failures([failed(0, error=None)]) == "1 of 1 request failed: no error message (1)."


def test_a_bootstrap_interval_brackets_the_percentile_and_narrows_with_more_requests():
    from helpers.load.summary import percentile_interval

    rng = np.random.default_rng(3)
    few, many = rng.exponential(2.0, 50), rng.exponential(2.0, 5000)
    lo, hi = percentile_interval(few, 95)
    assert lo <= percentile(few, 95) <= hi
    lo_many, hi_many = percentile_interval(many, 95)
    assert (hi_many - lo_many) < (hi - lo) / 5  # sqrt(100) = 10x narrower in theory
    # 50 requests: the p95 of another run could land anywhere in a band wider than a third of its value
    assert (hi - lo) > percentile(few, 95) / 3
    assert percentile_interval(few, 95) == percentile_interval(few, 95)  # seeded
    assert percentile_interval([1.0], 95) is None
