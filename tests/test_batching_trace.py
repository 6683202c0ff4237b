"""Seeded request traces for the batching notebook."""

import pytest

from helpers.batching.trace import (
    BatchRequest,
    bursty_trace,
    lab_trace,
    make_batching_trace,
    mixed_length_trace,
    steady_trace,
)


def test_lab_trace_is_fifty_requests_at_time_zero_with_cycling_prompts_and_64_output_tokens():
    trace = lab_trace()
    assert len(trace) == 50
    assert {r.arrival_s for r in trace} == {0.0} and {r.output_len for r in trace} == {64}
    assert [r.prompt_len for r in trace[:6]] == [16, 64, 256, 512, 16, 64]
    assert sum(r.prompt_len for r in trace) == 13 * 16 + 13 * 64 + 12 * 256 + 12 * 512


def test_the_same_seed_gives_the_same_trace_and_another_seed_a_different_one():
    assert steady_trace(20, seed=3) == steady_trace(20, seed=3)
    assert steady_trace(20, seed=3) != steady_trace(20, seed=4)


def test_steady_arrivals_start_at_zero_are_sorted_and_average_the_rate():
    trace = steady_trace(2000, rate_per_s=4.0)
    times = [r.arrival_s for r in trace]
    assert times[0] == 0.0 and times == sorted(times)
    assert times[-1] / (len(times) - 1) == pytest.approx(0.25, rel=0.1)  # mean gap 1/4 s


def test_bursty_requests_arrive_in_groups_at_the_same_instant():
    trace = bursty_trace(10, burst_size=4, burst_interval_s=2.0)
    assert [r.arrival_s for r in trace] == [0.0] * 4 + [2.0] * 4 + [4.0] * 2
    assert {r.arrival_s for r in bursty_trace(10)} == {0.0}  # one burst by default


def test_mixed_trace_has_a_few_long_outputs_among_many_short_ones():
    trace = mixed_length_trace(32, long_fraction=0.125, short_output_len=16, long_output_len=256)
    lens = [r.output_len for r in trace]
    assert lens.count(256) == 4 and lens.count(16) == 28


def test_zero_spread_gives_equal_output_lengths():
    assert {r.output_len for r in steady_trace(30, mean_output_len=64, output_spread=0.0)} == {64}
    spread = {r.output_len for r in steady_trace(30, mean_output_len=64, output_spread=0.5)}
    assert min(spread) >= 32 and max(spread) <= 96 and len(spread) > 1


def test_request_ids_are_unique_and_sort_in_creation_order():
    trace = make_batching_trace("steady", 120)
    ids = [r.request_id for r in trace]
    assert len(set(ids)) == 120 and sorted(ids)[0] == "r000"


def test_make_trace_knows_every_kind_and_refuses_others():
    for kind in ("steady", "bursty", "mixed", "lab"):
        assert len(make_batching_trace(kind, 12)) == 12
    with pytest.raises(ValueError, match="unknown trace kind"):
        make_batching_trace("random", 12)


def test_a_request_needs_at_least_one_prompt_and_one_output_token():
    with pytest.raises(ValueError, match="output_len must be a positive integer"):
        BatchRequest("r0", 0.0, prompt_len=16, output_len=0)

