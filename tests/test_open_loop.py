"""Open-loop traffic, SLOs and the TTFT split: helpers.load.arrivals, helpers.load.slo, helpers.load.ttft_split.

The arrival process and goodput are checked against their definitions and against vLLM's own benchmark code;
the whole chain (arrivals -> a real server -> goodput and vLLM's histograms) against a real CPU server.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from helpers.errors import InvalidArgumentError
from helpers.load.arrivals import arrival_times, offered_rate, with_arrivals
from helpers.load.client import RequestRecord
from helpers.load.slo import SLO, goodput, tpot_ms
from helpers.load.ttft_split import ttft_split
from tests.real_server import server_fixture

ROOT = Path(__file__).resolve().parents[1]


# ----- arrivals --------------------------------------------------------------------------------------------------
def test_the_same_seed_gives_the_same_times_and_another_seed_other_times():
    assert arrival_times(50, rate=4.0, seed=7) == arrival_times(50, rate=4.0, seed=7)
    assert arrival_times(50, rate=4.0, seed=7) != arrival_times(50, rate=4.0, seed=8)


@pytest.mark.parametrize("capture", ["vllm-0.26.0-gpu.json", "vllm-0.32.0-cpu.json"])
def test_the_same_seed_sends_at_the_moments_vllm_bench_serve_sent(capture):
    """Send times of real `vllm bench serve --seed 0` runs (scripts/bench_vs_vllm.py, an H200 and a 2-core CPU)."""
    run = json.loads((ROOT / "tests" / "data" / "bench_serve" / "arrivals" / capture).read_text())
    sent = np.array(run["start_times"]) - run["start_times"][0]
    ours = np.array(arrival_times(run["num_prompts"], run["request_rate"], run["burstiness"], seed=run["seed"]))
    # the tool's sends lag its schedule by its event loop's delay: 1.6 ms (H200) and 3.1 ms (CPU) at most here;
    # other draws would be off by about a gap (77 ms and 1.3 s on average in these runs)
    assert np.abs(sent - (ours - ours[0])).max() < 0.01


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gaps_are_gamma_with_the_rate_as_mean_and_burstiness_as_shape(burstiness):
    times = arrival_times(20_000, rate=5.0, burstiness=burstiness, seed=3)
    gaps = np.diff((0.0, *times))
    assert times[-1] == pytest.approx(20_000 / 5.0) and offered_rate(times) == pytest.approx(5.0)
    assert np.all(gaps >= 0)
    # a gamma of shape k has a coefficient of variation of 1 / sqrt(k): 1 for a Poisson process
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_infinite_burstiness_spaces_evenly_and_an_infinite_rate_sends_everything_at_once():
    assert arrival_times(3, rate=10.0, burstiness=math.inf) == pytest.approx((0.1, 0.2, 0.3))
    assert arrival_times(3, rate=math.inf) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("args, name", [((5, 0), "rate"), ((5, -2.0), "rate"), ((5, math.nan), "rate"),
                                        ((5, 1.0, 0), "burstiness"), ((5, 1.0, -1), "burstiness"),
                                        ((0, 1.0), "num_requests")])
def test_a_rate_or_burstiness_that_is_not_positive_is_refused_in_words(args, name):
    with pytest.raises(InvalidArgumentError, match=rf"^{name} must be"):
        arrival_times(*args)


def test_arrivals_go_onto_a_copy_of_the_workload_and_must_match_its_length():
    from helpers.load.client import RequestSpec
    from helpers.load.workload import Workload

    workload = Workload(tuple(RequestSpec(i, "hi", 1, 4) for i in range(3)), (1,), 4, 0, "t")
    timed = with_arrivals(workload, (0.5, 1.0, 2.0))
    assert [spec.arrival_s for spec in timed.requests] == [0.5, 1.0, 2.0]
    assert [spec.arrival_s for spec in workload.requests] == [0.0, 0.0, 0.0]
    with pytest.raises(InvalidArgumentError, match="2 arrival times for 3 requests"):
        with_arrivals(workload, (0.5, 1.0))


# ----- SLOs and goodput --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "ttft", "ttft:", "latency:500", "ttft:fast", "ttft:-5"])
def test_an_slo_that_cannot_be_read_is_refused_with_the_spelling_to_use(text):
    with pytest.raises(InvalidArgumentError, match="SLO|ttft|milliseconds"):
        SLO.parse(text)


def test_an_slo_reads_and_writes_vllms_spelling():
    slo = SLO.parse("ttft:500ms, e2el:2000")
    assert (slo.ttft_ms, slo.tpot_ms, slo.e2el_ms) == (500.0, None, 2000.0)
    assert slo.vllm_args() == ["--goodput", "ttft:500", "e2el:2000"]
    assert SLO.parse(" ".join(slo.vllm_args()[1:])) == slo


def record(i, ttft, e2e, tokens=16, ok=True):
    return RequestRecord(i, ok=ok, output_tokens=tokens if ok else None, ttft_s=ttft, e2e_s=e2e,
                         error=None if ok else "x")


def test_a_request_is_good_only_when_it_succeeded_within_every_limit():
    slo = SLO(ttft_ms=500, tpot_ms=100)
    assert slo.met_by(record(0, 0.4, 1.9))                 # tpot (1.9 - 0.4) / 15 = 100 ms: on the limit
    assert not slo.met_by(record(1, 0.6, 1.0))             # ttft over
    assert not slo.met_by(record(2, 0.1, 3.0))             # tpot 193 ms
    assert not slo.met_by(record(3, 0.1, 0.5, ok=False))   # failed
    assert tpot_ms(1.0, 0.5, 1) == 0.0                     # one token: no time per output token, as vLLM counts


def test_goodput_is_what_vllms_own_benchmark_computes_from_the_same_requests():
    pytest.importorskip("vllm")
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
    from vllm.benchmarks.serve import calculate_metrics

    rng = np.random.default_rng(5)
    records = [record(i, ttft, ttft + rng.uniform(0.2, 3.0), tokens=int(rng.integers(1, 64)), ok=rng.random() > 0.1)
               for i, ttft in enumerate(rng.uniform(0.05, 1.5, 200))]
    outputs = [RequestFuncOutput(success=r.ok, latency=r.e2e_s, ttft=r.ttft_s, output_tokens=r.output_tokens or 0,
                                 prompt_len=8) for r in records]
    for text in ("ttft:500", "tpot:40", "ttft:800 tpot:60 e2el:2500"):
        slo = SLO.parse(text)
        theirs, _ = calculate_metrics(input_requests=[None] * len(outputs), outputs=outputs, dur_s=20.0,
                                      tokenizer=None, selected_percentiles=[50],
                                      goodput_config_dict={pair.split(":")[0]: float(pair.split(":")[1])
                                                           for pair in slo.vllm_args()[1:]})
        ours = goodput(records, slo, duration_s=20.0)
        assert ours.per_s == pytest.approx(theirs.request_goodput), text
        assert 0 < ours.good < ours.completed < ours.total == 200


# ----- the TTFT split ---------------------------------------------------------------------------------------------
def test_a_split_needs_requests_that_finished_between_the_scrapes():
    same = {"request_queue_time_seconds_count": 3.0, "request_queue_time_seconds_sum": 1.0}
    with pytest.raises(ValueError, match="scrape before the run and after it"):
        ttft_split(same, same)


# ----- the warm-up burst -------------------------------------------------------------------------------------------
def test_a_warm_up_copy_has_the_workloads_shape_fresh_prompts_and_few_tokens():
    from helpers.load.client import RequestSpec
    from helpers.load.warmup import WARM_UP_OUTPUT_TOKENS, fresh_copy, needs_warm_up
    from helpers.load.workload import Workload

    specs = tuple(RequestSpec(i, f"(ab12/{i}) question", 5, 64, system="(ab12) rules", arrival_s=i) for i in range(3))
    copy = fresh_copy(Workload(specs, (5,), 64, 0, "ab12"))
    assert copy.run_tag != "ab12" and len(copy.run_tag) == 4 and len(copy.requests) == 3
    for old, new in zip(specs, copy.requests):
        assert new.prompt == old.prompt.replace("ab12", copy.run_tag) and new.system == f"({copy.run_tag}) rules"
        assert new.max_tokens == WARM_UP_OUTPUT_TOKENS and new.arrival_s == 0 and new.prompt_tokens == old.prompt_tokens

    class Target:
        device = "cuda"
    assert needs_warm_up(Target()) and not needs_warm_up(object())


# ----- the chain, on a real server ----------------------------------------------------------------------------------
server = server_fixture(max_num_seqs=2)


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_open_loop_traffic_on_a_real_server_arrives_on_time_and_its_ttft_splits_into_the_engines_phases(server):
    from helpers.load.poller import scrape
    from helpers.load.run import run_load_test
    from helpers.load.workload import build_workload

    workload = build_workload(server, num_requests=6, prompt_lens=(16, 64), output_tokens=8)
    times = arrival_times(6, rate=1.5, seed=0)
    before = scrape(server)
    run = asyncio.run(run_load_test(server, with_arrivals(workload, times), progress=False, timeout_s=300))
    after = scrape(server)
    assert run.summary.num_ok == 6
    for spec_time, rec in zip(times, run.records):
        assert spec_time - 0.01 <= rec.send_s <= spec_time + 0.5  # sent when it arrived, not in a burst
    split = ttft_split(before, after, [r.ttft_s for r in run.records])
    assert split.requests == 6
    assert 0 < split.prefill_s and 0 <= split.queue_s
    assert split.queue_s + split.prefill_s <= split.client_ttft_s + 0.05  # the engine's phases fit inside the client's TTFT
    assert split.server_ttft_s <= split.client_ttft_s + 0.05
    assert goodput(run.records, SLO(ttft_ms=600_000), run.wall_s).good == 6
    assert goodput(run.records, SLO(e2el_ms=0), run.wall_s).good == 0


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_a_warm_up_leaves_the_timed_run_nothing_in_the_prefix_cache(server):
    from helpers.load.poller import scrape
    from helpers.load.run import run_load_test
    from helpers.load.warmup import warm_up
    from helpers.load.workload import build_workload

    workload = build_workload(server, num_requests=3, prompt_lens=(300,), output_tokens=4)
    if server.device == "cpu":
        assert asyncio.run(warm_up(server, workload)) is None  # a CPU server is not warmed unless asked
        assert asyncio.run(warm_up(server, workload, force=True)) > 0
    else:
        assert asyncio.run(warm_up(server, workload)) > 0  # a GPU server is
    before = scrape(server)
    run = asyncio.run(run_load_test(server, workload, progress=False, timeout_s=300))
    after = scrape(server)
    assert run.summary.num_ok == 3
    block = int(server.kv_cache.block_size)
    hits = after.prefix_cache_hits - before.prefix_cache_hits
    # at most the chat template's opening block(s) before the run tag, never the 300-token prompts the warm-up sent
    assert hits <= 3 * block, f"{hits} prompt tokens of the timed run came from the warm-up's cache"
