"""A request-rate sweep (helpers.traffic.sweep) against one real CPU server: every request accounted for, the file
it saves reloads, the time bound marks a rate not run, `vllm bench serve` at one rate reads into the same figures
(helpers.traffic.vllm_bench), and a server killed mid-sweep keeps the rates measured before it and marks the rest
not run.

One server start (20-60 s on a 2-core CPU) and about twenty short requests (16- and 64-token prompts, 8 tokens
out). The kill is the last test: it ends the module's server.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import threading
import time

import pytest

from helpers.load.arrivals import arrival_times
from helpers.traffic.rates import load_rate_sweep
from helpers.traffic.sweep import sweep_rates
from tests.conftest import finished_requests, tokens_to_catch_mid_run, warm_up_requests
from tests.real_server import server_fixture


def in_engine(server) -> int:
    """Requests running or waiting in the engine now (0 when /metrics does not answer)."""
    from helpers.load.poller import scrape

    try:
        sample = scrape(server, timeout=2)
    except OSError:
        return 0
    return sample.num_requests_running + sample.num_requests_waiting

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]
SMALL = {"prompt_lens": (16, 64), "output_tokens": 8, "quiet": True}

server = server_fixture(max_num_seqs=4)


def test_a_sweep_accounts_for_every_request_and_saves_a_file_that_reloads(server, tmp_path):
    path = tmp_path / "sweep.json"
    points = asyncio.run(sweep_rates(server, [3.0, 1.0], num_requests=4, slo="ttft:60000", time_limit_s=120,
                                     out_path=path, **SMALL))
    assert [(p.offered_rate, p.status) for p in points] == [(1.0, "ok"), (3.0, "ok")]
    for p in points:
        assert p.setting == "max_num_seqs=4" and p.num_requests == 4 == p.num_ok == len(p.latencies)
        assert p.slo_fraction == 1.0 and p.goodput_per_s == pytest.approx(4 / p.wall_s)
        assert p.achieved_rate > 0 and p.arrival_rate > 0 and p.keeps_up is not None
        assert p.ttft_p50_s <= p.ttft_p95_s <= p.e2e_p95_s and p.tpot_p50_ms > 0 and p.itl_p95_ms > 0
        assert p.total_tok_per_s > p.output_tok_per_s > 0
        assert p.prefill_mean_s > 0 and p.queue_mean_s >= 0     # the engine's histograms moved by this point
        assert p.queue_mean_s + p.prefill_mean_s <= p.e2e_p95_s
    loaded, about = load_rate_sweep(path)
    assert loaded == points
    assert about["setting"] == "max_num_seqs=4" and about["slo"] == "ttft:60000"
    assert about["server"]["max_num_seqs"] == 4


def test_a_rate_that_would_pass_the_time_limit_is_not_started(server):
    # 3 s of arrivals need 3 + 5 s (MIN_DRAIN_S): the first rate fits in 11 s, the second no longer can
    began = time.monotonic()
    points = asyncio.run(sweep_rates(server, [2.0, 4.0], duration_s=3, time_limit_s=11, **SMALL))
    assert [p.status for p in points] == ["ok", "not run: time bound"]
    assert points[0].num_requests == 6 == points[0].num_ok and points[1].num_requests == 12
    assert time.monotonic() - began < 11 + 5  # the limit, and a scrape or two


def test_a_bracketing_sweep_whose_rates_all_kept_up_runs_one_more_at_twice_the_highest(server, tmp_path):
    # 4 requests 2 s apart (evenly: Poisson gaps can put two within milliseconds, and a slope over 4 TTFTs is then
    # anyone's) on 4 slots, 8 tokens each: nothing waits, so the sweep adds 1.0 req/s (BRACKET_STEP)
    path = tmp_path / "sweep.json"
    even = {**SMALL, "num_requests": 4, "burstiness": math.inf, "time_limit_s": 60}
    points = asyncio.run(sweep_rates(server, [0.5], out_path=path, bracket=True, **even))
    assert points[0].keeps_up is True, (points[0].ttft_growth, points[0].latencies)
    assert [(p.offered_rate, p.status, p.num_ok) for p in points] == [(0.5, "ok", 4), (1.0, "ok", 4)]
    assert load_rate_sweep(path)[0] == points  # the extra rate is saved with the planned one, in rate order
    alone = asyncio.run(sweep_rates(server, [0.5], **even))
    assert [p.offered_rate for p in alone] == [0.5]  # without bracket, the plan is all


def test_vllm_bench_serve_at_one_rate_reads_into_the_course_figures_beside_its_own(server, tmp_path):
    from helpers.traffic.vllm_bench import bench_at_rate, beside_vllm_bench

    bench = asyncio.run(bench_at_rate(server, 2.0, num_requests=4, slo="ttft:60000", prompt_lens=(16, 64),
                                      output_tokens=8, folder=tmp_path, timeout_s=240, seed=3))
    point = bench.point
    sent = json.loads(bench.result_path.read_text())["start_times"]  # the tool sent when the course would have
    times = arrival_times(4, 2.0, seed=3)
    lag = max(abs((s - sent[0]) - (t - times[0])) for s, t in zip(sent, times))
    # 0.1 s leaves room for a busy runner and still tells seed 3 from every other of seeds 0-49 (0.14 s or more apart)
    assert lag < 0.1, f"vllm bench serve sent up to {lag:.3f} s away from the course's schedule"
    assert point.num_requests == 4 == point.num_ok and point.offered_rate == 2.0
    assert point.output_tok_per_s == pytest.approx(32 / point.wall_s)  # 4 x 8 tokens, the course's definition
    assert bench.reported["completed"] == 4 and bench.reported["total_output_tokens"] == 32
    assert point.queue_mean_s is not None and point.prefill_mean_s is not None  # from the server's /metrics
    assert point.goodput_per_s == pytest.approx(4 / point.wall_s)  # a one-minute TTFT limit: every request good
    table = beside_vllm_bench(point, bench)  # the course's column here is vLLM's run again: both columns agree
    assert "| output tokens/s |" in table and "Median TTFT (ms)" in table and "n/a | n/a | n/a" not in table
    row = next(line for line in table.splitlines() if line.startswith("| TTFT p50"))
    assert row.split("|")[2] == row.split("|")[3]


@pytest.mark.parametrize("bad, says", [({"rate": 0}, "each rate"), ({"burstiness": -1}, "burstiness"),
                                       ({"slo": 500}, "which latency"), ({"num_requests": 0}, "num_requests"),
                                       ({"seed": -1}, "seed")])
def test_vllm_bench_refuses_bad_input_before_it_starts(tmp_path, bad, says):
    from helpers.traffic.vllm_bench import bench_at_rate

    args = {"rate": 1.0, "num_requests": 4, **bad}
    with pytest.raises(ValueError, match=says):
        asyncio.run(bench_at_rate(object(), args.pop("rate"), folder=tmp_path, **args))
    assert not any(tmp_path.iterdir())  # nothing written, nothing sent


def test_a_server_killed_mid_sweep_keeps_the_rates_measured_and_marks_the_rest_not_run(server, tmp_path):
    # the first rate's requests, after the warm-up burst of as many a GPU server gets first
    target = finished_requests(server) + 4 + warm_up_requests(server, 4)
    small = {**SMALL, "output_tokens": tokens_to_catch_mid_run(server.device, 8)}

    def kill() -> None:  # once the first rate finished and the second's requests are in the engine
        deadline = time.monotonic() + 120
        while finished_requests(server) < target and time.monotonic() < deadline:
            time.sleep(0.05)
        while in_engine(server) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(server.process.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    path = tmp_path / "killed.json"
    began = time.monotonic()
    points = asyncio.run(sweep_rates(server, [2.0, 4.0, 8.0], num_requests=4, time_limit_s=120,
                                     request_timeout_s=60, out_path=path, **small))
    killer.join(timeout=5)
    assert time.monotonic() - began < 60
    first, second, third = points
    assert first.status == "ok" and first.num_ok == 4
    assert second.status.startswith("failed: server died: exit code -9") and second.num_requests == 4
    assert second.num_ok < 4  # kept what finished before the kill; the rest count as errors
    assert third.status.startswith("not run: server died: exit code -9") and third.num_requests == 4
    assert load_rate_sweep(path)[0] == points
