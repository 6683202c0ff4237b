"""Measuring the server for the step-time model: trace replays, rates, tables, the saved prediction.

Most tests replace the load tester (`helpers.load.run.run_load_test`, which `helpers.batching.measure`
sends every request through) with a fake that answers on a known schedule; the last ones
measure the real server (marked `server`).
"""

import asyncio
import json
import statistics
from types import SimpleNamespace

import pytest

from helpers.batching import measure
from helpers.batching.front_end import measure_front_end
from helpers.batching.measure import measure_step_times, send_trace
from helpers.batching.measure_plots import plot_request_timeline
from helpers.batching.measure_stats import (
    burst_seconds,
    decode_tok_s,
    finish_moments,
    median_ttft_s,
    model_table,
    server_mean_seconds,
)
from helpers.batching.predict import predict_throughput
from helpers.batching.prediction import load_prediction, prediction_record, save_prediction
from helpers.batching.step_time import StepMeasurement, StepTimeModel
from helpers.batching.trace import BatchRequest
from helpers.load.client import RequestRecord
from tests.real_server import QUICK_START


class FakeLoadTester:
    """Stands in for run_load_test: each request gets its first token `step_s` after it is sent
    (at its arrival_s), or `prefill_s(prompt tokens)` after when given, and one more every
    `step_s`; or it fails with `fail`. `server_totals`, when given, grows like vLLM's histograms."""

    def __init__(self, step_s=0.01, fail=None, prefill_s=None, server_totals=None, group_prefill_s=None):
        self.step_s, self.fail, self.prefill_s, self.totals = step_s, fail, prefill_s, server_totals
        self.group_prefill_s = group_prefill_s  # prompts sent together: first tokens after f(their tokens together)
        self.specs = []  # every RequestSpec sent, in order

    async def __call__(self, target, workload, **options):
        records = []
        together = sum(spec.prompt_tokens for spec in workload.requests)
        for spec in workload.requests:
            self.specs.append(spec)
            if self.fail:
                records.append(RequestRecord(spec.index, error=self.fail, prompt_len=spec.prompt_tokens,
                                             send_s=spec.arrival_s))
                continue
            ttft = (self.group_prefill_s(together) if self.group_prefill_s and spec.max_tokens == 1 else
                    self.prefill_s(spec.prompt_tokens) if self.prefill_s else self.step_s)
            records.append(RequestRecord(spec.index, ok=True, prompt_len=spec.prompt_tokens,
                                         output_tokens=spec.max_tokens, send_s=spec.arrival_s,
                                         ttft_s=ttft, e2e_s=ttft + self.step_s * (spec.max_tokens - 1)))
            if self.totals is not None:
                self.totals.add(spec.prompt_tokens, self.step_s * (spec.max_tokens - 1))
        return SimpleNamespace(records=records)


@pytest.fixture
def fake_load(monkeypatch):
    def install(**options):
        fake = FakeLoadTester(**options)
        monkeypatch.setattr(measure, "run_load_test", fake)
        return fake
    return install


def server(max_num_seqs=8):
    return SimpleNamespace(model_name="fake", config=SimpleNamespace(max_num_seqs=max_num_seqs))


def record(index, send_s, first, last, tokens, ok=True, error=None):
    """A RequestRecord with its times given since the run began (None: never reached)."""
    return RequestRecord(index, ok=ok, error=error, output_tokens=tokens, send_s=send_s,
                         ttft_s=None if first is None else first - send_s,
                         e2e_s=None if last is None else last - send_s)


def test_decode_rate_is_batch_size_times_the_median_requests_steps_per_second():
    fast = record(0, 0.0, 0.0, 1.0, 11)  # 10 steps/s
    slow = record(1, 0.0, 0.0, 2.0, 11)  # 5 steps/s
    assert decode_tok_s([fast, fast, slow]) == pytest.approx(30.0)


def test_decode_rate_refuses_a_batch_with_a_failed_request():
    failed = record(0, 0.0, None, None, 0, ok=False, error="boom")
    with pytest.raises(RuntimeError, match="boom"):
        decode_tok_s([failed])


def test_send_trace_sends_each_request_at_its_arrival_time_with_its_lengths(fake_load):
    fake = fake_load(step_s=0.001)
    trace = [BatchRequest("r0", 0.0, 16, 3), BatchRequest("r1", 0.2, 64, 2)]
    records = asyncio.run(send_trace(server(), trace))
    assert [r.index for r in records] == [0, 1]
    assert [(s.prompt_tokens, len(s.prompt), s.max_tokens, s.arrival_s) for s in fake.specs] == [
        (16, 16, 3, 0.0), (64, 64, 2, 0.2)]
    assert all(s.is_tokens and min(s.prompt) >= 1000 for s in fake.specs)  # random ids, clear of special tokens


def test_measure_step_times_gives_one_measurement_per_batch_size_and_a_prefill(fake_load):
    fake = fake_load(step_s=0.002)
    data = asyncio.run(measure_step_times(server(), batch_sizes=(1, 2), output_len=6, prefill_len=64, repeats=2,
                                          more_repeats_within_s=0))
    assert [m.label for m in data.measurements] == ["decode x1", "decode x2", "prefill 64-4 tokens"]
    assert data.measurements[2].num_prefill_tokens == 60  # 64 tokens against a sixteenth of them
    assert data.measurements[1].seconds == pytest.approx(0.002)  # one step: 2 tokens at 1000 tok/s
    assert len(data.records["decode x2"]) == 4  # 2 requests x 2 repeats
    sizes = sorted(spec.max_tokens for spec in fake.specs)
    assert sizes.count(6) == 6 and sizes.count(4) == 1  # plus one warm-up of 4 tokens
    # a third prefill pair after the two rounds: a median of three leaves out one stretched timing
    assert sorted(s.prompt_tokens for s in fake.specs if s.max_tokens == 1) == [4, 4, 4, 64, 64, 64]
    assert data.timings["prefill 64 tokens"] == (0.002, 0.002, 0.002) and len(data.timings["decode x1"]) == 2
    assert "decode x2" in data.table()
    assert data.clock == "client"  # a server without /metrics: timed on the client


def test_the_prefill_cost_per_token_is_a_slope_not_a_prompts_time_over_its_length(fake_load):
    # What every prefill pays whatever its length (here 20 ms: HTTP, the API server, a step's overhead) must not
    # be charged to every prompt token: one 512-token prompt's time / 512 would make it 0.041 ms, 10x the 4 us.
    fake_load(step_s=0.002, prefill_s=lambda tokens: 0.020 + 4e-6 * tokens)
    data = asyncio.run(measure_step_times(server(), batch_sizes=(1, 4, 8), output_len=6, prefill_len=512,
                                          short_prefill_len=32, repeats=1, max_num_batched_tokens=8192))
    fit = data.fit()
    assert fit.prefill_token_s == pytest.approx(4e-6)
    assert data.measurements[-1].seconds == pytest.approx(480 * 4e-6)


def test_a_prefill_too_cheap_to_resolve_costs_next_to_nothing_a_token(fake_load):
    fake_load(step_s=0.002)  # every first token after 2 ms, whatever the prompt's length
    data = asyncio.run(measure_step_times(server(), batch_sizes=(1, 2), output_len=6, prefill_len=512, repeats=1))
    assert data.fit().prefill_token_s < 1e-8


class ServerTotals:
    """vLLM's per-request decode and prefill histograms (sum and count), as `/metrics` would give them."""

    def __init__(self, prefill_s):
        self.prefill_s = prefill_s
        self.values = dict.fromkeys((f"{t}_{p}" for t in measure._SERVER_TIMERS for p in ("sum", "count")), 0.0)

    def add(self, prompt_tokens, decode_s):
        for timer, seconds in (("request_prefill_time_seconds", self.prefill_s(prompt_tokens)),
                               ("request_decode_time_seconds", decode_s)):
            self.values[f"{timer}_sum"] += seconds
            self.values[f"{timer}_count"] += 1


def test_the_prefill_is_timed_from_scheduled_to_first_token_on_the_servers_clock(fake_load, monkeypatch):
    # The client's TTFT holds 50 ms of HTTP and queueing here, and grows by 10 us a token; the engine's prefill
    # time grows by 3 us a token: the fit takes the engine's.
    totals = ServerTotals(prefill_s=lambda tokens: 0.002 + 3e-6 * tokens)
    fake_load(step_s=0.002, prefill_s=lambda tokens: 0.050 + 1e-5 * tokens, server_totals=totals)

    async def server_totals(target):
        return dict(totals.values)

    monkeypatch.setattr(measure, "_server_timer_totals", server_totals)
    data = asyncio.run(measure_step_times(server(), batch_sizes=(1, 2), output_len=6, prefill_len=512, repeats=1))
    assert data.clock == "server"
    assert data.fit().prefill_token_s == pytest.approx(3e-6)


def test_a_group_of_long_prompts_is_timed_on_the_clients_clock_and_charged_its_tokens_together(fake_load, monkeypatch):
    # A GPU-like prefill: a fixed 30 ms floor plus 20 us a token of everything sent together; the engine's own
    # per-request clock (here 1 ms whatever the length) is not used for the pair when the long side is a group.
    totals = ServerTotals(prefill_s=lambda tokens: 0.001)
    fake = fake_load(step_s=0.002, group_prefill_s=lambda tokens: 0.030 + 2e-5 * tokens, server_totals=totals)

    async def server_totals(target):
        return dict(totals.values)

    monkeypatch.setattr(measure, "_server_timer_totals", server_totals)
    data = asyncio.run(measure_step_times(server(), batch_sizes=(1, 2), output_len=6, prefill_len=512,
                                          short_prefill_len=32, long_group=4, repeats=1, more_repeats_within_s=0))
    assert (data.clock, data.prefill_clock) == ("server", "client")
    prefill = data.measurements[-1]
    assert (prefill.label, prefill.num_prefill_tokens) == ("prefill 2048-32 tokens", 2016)
    assert prefill.seconds == pytest.approx(2e-5 * 2016)
    assert len(data.records["prefill 4 x 512 tokens"]) == 4 * measure.PREFILL_PAIRS  # four at once, three times
    assert sum(s.prompt_tokens == 512 for s in fake.specs) == 4 * measure.PREFILL_PAIRS
    assert data.fit().prefill_token_s == pytest.approx(2e-5, rel=0.05)


def test_a_group_larger_than_the_servers_cap_is_refused_before_anything_is_sent(fake_load):
    fake = fake_load()
    with pytest.raises(ValueError, match="long_group=16 exceeds the server's max_num_seqs=8"):
        asyncio.run(measure_step_times(server(8), batch_sizes=(1, 2), prefill_len=512, long_group=16))
    assert fake.specs == []


def test_a_fast_machine_gets_more_rounds_within_the_time_given_and_a_slow_one_exactly_the_repeats(fake_load):
    fake = fake_load(step_s=0.002)  # answers at once: as fast as a machine gets
    data = asyncio.run(measure_step_times(server(), batch_sizes=(1, 2), output_len=6, prefill_len=64, repeats=2))
    assert data.planned == 3 * 2 * 4 and len(data.records["decode x2"]) == 2 * 3 * 2  # three times the repeats
    fake.specs.clear()
    data = asyncio.run(measure_step_times(server(), batch_sizes=(1, 2), output_len=6, prefill_len=64, repeats=2,
                                          more_repeats_within_s=0))
    assert data.planned == 2 * 4 + 2 and len(fake.specs) == 1 + 2 * (1 + 2 + 2) + 2  # and a third prefill pair


def test_the_prefill_and_the_fit_use_the_step_budget_the_servers_log_gives(fake_load):
    fake_load(step_s=0.002)
    gpu = SimpleNamespace(model_name="fake", config=SimpleNamespace(max_num_seqs=8),
                          log_text=lambda: "INFO Chunked prefill is enabled with max_num_batched_tokens=8192.\n")
    data = asyncio.run(measure_step_times(gpu, batch_sizes=(1, 2), output_len=6, prefill_len=4096, repeats=1))
    assert data.max_num_batched_tokens == 8192 and data.measurements[-1].num_steps == 0  # 4,096 and 256: one step each
    assert data.fit().max_num_batched_tokens == 8192
    cpu = asyncio.run(measure_step_times(server(), batch_sizes=(1, 2), output_len=6, prefill_len=4096, repeats=1))
    # no log: vLLM's CPU default; 4,096 tokens take 2 steps, the short prompt's 256 one: one more
    assert cpu.max_num_batched_tokens == 2048 and cpu.measurements[-1].num_steps == 1
    given = asyncio.run(measure_step_times(gpu, batch_sizes=(1, 2), output_len=6, prefill_len=64, repeats=1,
                                           max_num_batched_tokens=512))
    assert given.fit().max_num_batched_tokens == 512


def test_server_timing_is_used_only_when_exactly_the_measured_requests_were_observed():
    before = {"time_to_first_token_seconds_sum": 3.0, "time_to_first_token_seconds_count": 5}
    after = {"time_to_first_token_seconds_sum": 3.4, "time_to_first_token_seconds_count": 6}
    assert server_mean_seconds(before, after, "time_to_first_token_seconds", 1) == pytest.approx(0.4)
    assert server_mean_seconds(before, after, "time_to_first_token_seconds", 2) is None  # someone else's traffic
    assert server_mean_seconds(None, after, "time_to_first_token_seconds", 1) is None  # no /metrics


def test_measure_step_times_refuses_batches_larger_than_the_servers_cap(fake_load):
    fake = fake_load()
    with pytest.raises(ValueError, match="exceeds the server's max_num_seqs=4"):
        asyncio.run(measure_step_times(server(max_num_seqs=4), batch_sizes=(1, 8)))
    assert fake.specs == []  # refused before anything was sent


def test_finish_moments_merge_finishes_within_50_ms():
    rs = [record(i, 0.0, t, t, 1) for i, t in enumerate((1.0, 1.04, 1.2, 3.0))]
    assert finish_moments(rs) == [1.0, 1.2, 3.0]


def test_timeline_plot_has_one_lane_per_request_and_counts_finishes_in_its_title():
    rs = [record(0, 0.0, 0.5, 1.0, 3), record(1, 0.0, 0.5, 2.0, 5)]
    ax = plot_request_timeline(rs).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1"]
    assert ax.get_title().startswith("2 requests finished at 2 distinct moments")
    trace = [BatchRequest("a", 0.0, 16, 3), BatchRequest("b", 0.0, 16, 5)]
    labels = plot_request_timeline(rs, trace=trace).axes[0].get_yticklabels()
    assert [t.get_text() for t in labels] == ["a", "b"]  # the trace's request ids


# ----- a burst with failed requests (notebook 04's live burst cell) -----------------------------------
BURST = [record(0, 0.0, 0.5, 2.0, 3),
         record(1, 0.1, 1.5, 3.5, 3),
         record(2, 0.2, None, None, None, ok=False, error="APIConnectionError: Connection error."),
         record(3, 0.3, 1.0, 2.5, 3, ok=False, error="asked for 5 tokens, got 3")]


def test_the_burst_duration_skips_requests_that_never_got_a_token():
    # notebook 04 computed max(r.last_token_s for r in records) inline: TypeError with one failed request
    assert burst_seconds(BURST) == pytest.approx(3.5)  # first send 0.0 -> last token 3.5
    assert burst_seconds(BURST[2:3]) is None  # nothing arrived: no duration, not a crash
    assert burst_seconds([]) is None


def test_the_measured_median_ttft_leaves_out_requests_without_a_first_token():
    # notebook 04's sorted(r.ttft_s for r in records) raised TypeError on a None
    assert median_ttft_s(BURST) == pytest.approx(0.7)  # ttfts 0.5, 0.7, 1.4: the middle one
    assert median_ttft_s(BURST[2:3]) is None


def test_send_trace_reports_failed_requests_in_words(fake_load, capsys):
    fake_load(fail="ConnectionError: refused")
    records = asyncio.run(send_trace(server(), [BatchRequest("r0", 0.0, 16, 3), BatchRequest("r1", 0.0, 16, 3)]))
    assert [r.ok for r in records] == [False, False]
    assert "2 of 2 requests failed: ConnectionError: refused (2)." in capsys.readouterr().out
    asyncio.run(send_trace(server(), [BatchRequest("r0", 0.0, 16, 3)], quiet=True))
    assert capsys.readouterr().out == ""


def test_the_timeline_title_counts_failed_requests_and_says_why():
    ax = plot_request_timeline(BURST).axes[0]
    title = ax.get_title()
    assert title.startswith("2 of 4 requests finished at 2 distinct moments")
    assert "2 of 4 requests failed: APIConnectionError: Connection error. (1); asked for 5 tokens, got 3 (1)." in title


def test_a_failed_decode_measurement_says_how_many_failed_and_what_to_do():
    failed = record(0, 0.0, None, None, 0, ok=False, error="boom")
    ok = record(1, 0.0, 0.0, 1.0, 11)
    with pytest.raises(RuntimeError, match=r"1 of 2 requests failed: boom \(1\)\. Run the cell again"):
        decode_tok_s([ok, failed])


def test_prediction_record_matches_predict_throughput_and_survives_a_json_round_trip(tmp_path):
    model = StepTimeModel(overhead_s=0.05, prefill_token_s=0.001, decode_seq_s=0.004)
    rec = prediction_record(model, fitted_from="a test")
    from helpers.batching.trace import lab_trace

    assert rec["predicted_output_tok_s"][1] == pytest.approx(predict_throughput(model, lab_trace(), 64))
    assert rec["ratio_64_vs_8"] == pytest.approx(rec["predicted_output_tok_s"][1] / rec["predicted_output_tok_s"][0])
    assert set(rec) >= {"max_num_seqs", "predicted_output_tok_s", "ratio_64_vs_8", "step_time_model",
                        "fitted_from", "created"}
    path = save_prediction(rec, tmp_path / "p.json")
    assert load_prediction(path) == json.loads(json.dumps(rec))
    assert load_prediction(tmp_path / "missing.json") is None


def test_model_table_lists_every_model_in_milliseconds():
    text = model_table({"defaults": StepTimeModel(), "fitted": StepTimeModel(overhead_s=0.05)})
    assert "defaults" in text.splitlines()[0] and "50.000" in text.splitlines()[1]
    budgets = model_table({"cpu": StepTimeModel(), "h200": StepTimeModel(max_num_batched_tokens=8192)}).splitlines()[-1]
    gpu = model_table({"h100": StepTimeModel(overhead_s=0.0024, prefill_token_s=5.12e-6, decode_seq_s=11.7834e-6)})
    # hundredths of a millisecond keep five significant figures, not three decimals (0.012, 0.005)
    assert [line.split()[-1] for line in gpu.splitlines()[1:4]] == ["2.4000", "0.0051200", "0.011783"]
    assert budgets.split() == ["step", "budget", "(tokens)", "2,048", "8,192"]


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_measuring_the_real_server_gives_a_positive_fitted_model():
    from helpers.serve.server import start_server

    # A budget other than vLLM's default of 2,048, which vLLM 0.32 then logs (helpers.serve.budget says why only then)
    with start_server(max_num_seqs=2, quiet=True, **QUICK_START,
                      extra_args=("--max-num-batched-tokens", "1024")) as server:
        # a prefill of 512 tokens against one of 32, twice: on a 2-core machine with other jobs beside it, one
        # 256-token prefill once was lost in the noise (the fit gave it 0 s); 512 costs about a second there
        data = asyncio.run(measure_step_times(server, batch_sizes=(1, 2), output_len=12, prefill_len=512,
                                              repeats=2, more_repeats_within_s=0))
        # the front end on the same server: 8 requests of 1 and of 48 tokens (CPU time is counted in 10 ms ticks)
        front = asyncio.run(measure_front_end(server, num_requests=8, output_len=48, repeats=1))
        log = server.log_text()
    assert "Chunked prefill is enabled with max_num_batched_tokens=1024." in log
    assert data.max_num_batched_tokens == 1024 and data.fit().max_num_batched_tokens == 1024
    assert all(r.ok for rs in data.records.values() for r in rs)
    assert data.clock == "server"
    # the API server streamed 8 x 47 tokens more in the longer load: its CPU time grew (wrong process: it would not)
    assert 0 < front.api_token_s < 0.01 and front.api_request_s >= 0 and front.client_token_s >= 0
    prefill = data.measurements[-1]
    assert (prefill.label, prefill.num_steps, prefill.num_prefill_tokens) == ("prefill 512-32 tokens", 0, 480)
    fit = data.fit()
    assert fit.overhead_s + fit.decode_seq_s > 0 and fit.prefill_token_s > 0
    assert 1 < fit.decode_tok_s(1) < (1000 if server.device == "cpu" else 100_000)  # tok/s of a 135M model
    # The short prompt pays what any prefill pays (the step's overhead, sampling) besides its 32 tokens: more than
    # a sixteenth of the long one's time. The fit charges a token the slope between them, not a prompt's time / its
    # length (the fit before: it charged every token a share of that fixed cost).
    short, long = (statistics.median(data.timings[f"prefill {n} tokens"]) for n in (32, 512))
    assert short > long / 16
    if long > short:
        assert fit.prefill_token_s == pytest.approx((long - short) / 480) and fit.prefill_token_s < long / 512
    else:  # on the H200 480 more prompt tokens of this model cost less than the noise: no slope to charge
        assert server.device == "cuda" and fit.prefill_token_s < 1e-6, (short, long, fit)


# ----- the saved prediction, written whole and read back with a clear error ------------------------
@pytest.mark.parametrize("content", ["", '{"max_num_seqs": [8, 64], "predicted_output_t'])
def test_a_prediction_file_cut_short_raises_an_error_naming_it_and_how_to_make_it_again(tmp_path, content):
    # before: a bare json.JSONDecodeError that named neither the file nor the notebook
    from helpers.errors import ResultsFileError

    path = tmp_path / "batching_prediction.json"
    path.write_text(content)
    with pytest.raises(ResultsFileError) as caught:
        load_prediction(path)
    assert str(path) in str(caught.value) and "Run notebook 04" in str(caught.value)


def test_a_json_file_that_is_not_a_prediction_is_refused_by_name(tmp_path):
    from helpers.errors import ResultsFileError

    path = tmp_path / "batching_prediction.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(ResultsFileError, match=r"batching_prediction\.json is not a batching prediction"):
        load_prediction(path)


def test_a_prediction_save_that_fails_midway_keeps_the_previous_prediction(tmp_path, monkeypatch):
    from helpers import files

    path = save_prediction(prediction_record(StepTimeModel(), fitted_from="first"), tmp_path / "p.json")
    monkeypatch.setattr(files.os, "replace", lambda *args: (_ for _ in ()).throw(OSError("killed before the rename")))
    with pytest.raises(OSError):
        save_prediction(prediction_record(StepTimeModel(), fitted_from="second"), path)
    assert load_prediction(path)["fitted_from"] == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_a_prediction_for_another_model_or_device_is_not_overlaid_on_the_lab():
    from helpers.batching.prediction import prediction_mismatch
    from helpers.batching.trace import lab_trace

    saved = prediction_record(StepTimeModel(), trace=lab_trace(output_len=256), served_model="dummy-llama-3.1-8b",
                              device="cuda")
    assert saved["output_tokens"] == [256]
    assert "'dummy-llama-3.1-8b'" in prediction_mismatch(saved, model="smollm2", device="cuda")
    assert "made on cuda" in prediction_mismatch(saved, model="dummy-llama-3.1-8b", device="cpu")
    assert prediction_mismatch(saved, model="dummy-llama-3.1-8b", device="cuda") is None
    assert prediction_mismatch(dict(saved, output_tokens=[32]), model="dummy-llama-3.1-8b", device="cuda") is None


def test_a_prediction_for_another_length_is_simulated_again_with_its_own_clocks(tmp_path):
    """The lab's pace probe can pick another output length than notebook 04's: the saved clocks (each setting's,
    the front end's included) replay the lab's length, and give what notebook 04 would have saved for it."""
    from helpers.batching.prediction import for_output_tokens
    from helpers.batching.trace import lab_trace

    clocks = {8: StepTimeModel(overhead_s=0.02), 64: StepTimeModel(stream_token_s=0.004, admit_request_s=0.01)}
    measured = [StepMeasurement.decode(8, 150.0)]
    saved = load_prediction(save_prediction(prediction_record(clocks, trace=lab_trace(output_len=32),
                                                              measurements=measured, fitted_from="notebook 04",
                                                              served_model="smollm2", device="cpu"),
                                            tmp_path / "p.json"))
    again = for_output_tokens(saved, 36)
    direct = prediction_record(clocks, trace=lab_trace(output_len=36), measurements=measured,
                               fitted_from="notebook 04", served_model="smollm2", device="cpu")
    assert again["predicted_output_tok_s"] == direct["predicted_output_tok_s"]
    assert again["output_tokens"] == [36] and again["resimulated_from"] == [32]
    assert {k: again[k] for k in ("model", "device", "fitted_from", "measurements", "step_time_models", "created")} \
        == {**{k: direct[k] for k in ("model", "device", "fitted_from", "measurements", "step_time_models")},
            "created": saved["created"]}
    assert for_output_tokens(saved, 32) is saved
    old = {k: v for k, v in saved.items() if k != "step_time_models"}  # saved before each setting had its own clock
    assert for_output_tokens(old, 36)["step_time_models"]["8"] == saved["step_time_model"]
