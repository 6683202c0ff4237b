"""Measuring the server for the step-time model: request records, rates, the saved prediction.

Most tests use a fake OpenAI client that streams tokens on a known schedule; the last one
measures the real server (marked `server`).
"""

import asyncio
import doctest
import json
from types import SimpleNamespace

import numpy as np
import pytest

from helpers.batching import step_fit as step_fit
from helpers.batching.trace import Request
from helpers.batching.step_fit import (
    TimedRequest,
    decode_tok_s,
    finish_moments,
    load_prediction,
    measure_step_times,
    server_mean_seconds,
    model_table,
    plot_request_timeline,
    prediction_record,
    random_prompt,
    save_prediction,
    send_one,
    send_trace,
)
from helpers.batching.step_time import StepTimeModel, predict_throughput


class FakeCompletions:
    """Streams max_tokens chunks, `step_s` apart, then a usage chunk; or raises."""

    def __init__(self, step_s=0.01, fail=None, short_by=0):
        self.step_s, self.fail, self.short_by = step_s, fail, short_by
        self.calls = []

    async def create(self, **kwargs):
        self.calls.append(kwargs)
        if self.fail:
            raise self.fail
        n = kwargs["max_tokens"] - self.short_by

        async def stream():
            for _ in range(n):
                await asyncio.sleep(self.step_s)
                yield SimpleNamespace(choices=[SimpleNamespace(text="x")], usage=None)
            yield SimpleNamespace(choices=[], usage=SimpleNamespace(completion_tokens=n))

        return stream()


class FakeServer:
    model_name = "fake"

    def __init__(self, completions, max_num_seqs=8):
        self.completions = completions
        self.config = SimpleNamespace(max_num_seqs=max_num_seqs)

    def async_client(self, **kwargs):
        completions = self.completions

        class Client:
            def __init__(self):
                self.completions = completions

            async def close(self):
                pass

        return Client()


def test_docstring_examples_run():
    assert doctest.testmod(step_fit).failed == 0


def test_random_prompts_have_the_exact_length_and_avoid_special_tokens():
    ids = random_prompt(300, np.random.default_rng(0))
    assert len(ids) == 300 and min(ids) >= 1000
    assert random_prompt(5, np.random.default_rng(1)) != random_prompt(5, np.random.default_rng(2))


def test_a_streamed_request_records_first_and_last_token_and_asks_to_ignore_eos():
    fake = FakeCompletions(step_s=0.01)
    r = asyncio.run(send_one(SimpleNamespace(completions=fake), "m", [1000] * 16, 5, "a", 0.0))
    assert r.ok and r.error is None and r.num_output_tokens == r.num_chunks == 5
    assert r.sent_s < r.first_token_s < r.last_token_s
    assert fake.calls[0]["extra_body"] == {"ignore_eos": True} and fake.calls[0]["temperature"] == 0.0
    assert fake.calls[0]["prompt"] == [1000] * 16


def test_a_failing_request_returns_a_record_instead_of_raising():
    fake = FakeCompletions(fail=ConnectionError("refused"))
    r = asyncio.run(send_one(SimpleNamespace(completions=fake), "m", [1000], 5, "a", 0.0))
    assert not r.ok and r.error == "ConnectionError: refused" and r.ttft_s is None


def test_a_request_that_stops_early_is_not_ok():
    fake = FakeCompletions(short_by=2)
    r = asyncio.run(send_one(SimpleNamespace(completions=fake), "m", [1000], 5, "a", 0.0))
    assert not r.ok and "asked for 5 tokens, got 3" in r.error


def test_decode_rate_is_batch_size_times_the_median_requests_steps_per_second():
    fast = TimedRequest("a", 16, 11, 0.0, 0.0, 1.0, 11, 11, True)  # 10 steps/s
    slow = TimedRequest("b", 16, 11, 0.0, 0.0, 2.0, 11, 11, True)  # 5 steps/s
    assert decode_tok_s([fast, fast, slow]) == pytest.approx(30.0)


def test_decode_rate_refuses_a_batch_with_a_failed_request():
    failed = TimedRequest("a", 16, 11, 0.0, None, None, 0, 0, False, "boom")
    with pytest.raises(RuntimeError, match="boom"):
        decode_tok_s([failed])


def test_send_trace_sends_each_request_at_its_arrival_time_with_its_lengths():
    fake = FakeCompletions(step_s=0.001)
    trace = [Request("r0", 0.0, 16, 3), Request("r1", 0.2, 64, 2)]
    records = asyncio.run(send_trace(FakeServer(fake), trace))
    assert [r.request_id for r in records] == ["r0", "r1"]
    assert [(r.prompt_len, r.max_tokens) for r in records] == [(16, 3), (64, 2)]
    assert records[1].sent_s - records[0].sent_s == pytest.approx(0.2, abs=0.05)


def test_measure_step_times_gives_one_measurement_per_batch_size_and_a_prefill():
    fake = FakeCompletions(step_s=0.002)
    data = asyncio.run(measure_step_times(FakeServer(fake), batch_sizes=(1, 2), output_len=6, prefill_len=64,
                                          repeats=2))
    assert [m.label for m in data.measurements] == ["decode x1", "decode x2", "prefill 64 tokens"]
    assert data.measurements[2].num_prefill_tokens == 64
    assert len(data.records["decode x2"]) == 4  # 2 requests x 2 repeats
    sizes = sorted(call["max_tokens"] for call in fake.calls)
    assert sizes.count(6) == 6 and sizes.count(1) == 2  # plus one warm-up of 4 tokens
    assert "decode x2" in data.table()
    assert data.clock == "client"  # a server without /metrics: timed on the client


def test_server_timing_is_used_only_when_exactly_the_measured_requests_were_observed():
    before = {"time_to_first_token_seconds_sum": 3.0, "time_to_first_token_seconds_count": 5}
    after = {"time_to_first_token_seconds_sum": 3.4, "time_to_first_token_seconds_count": 6}
    assert server_mean_seconds(before, after, "time_to_first_token_seconds", 1) == pytest.approx(0.4)
    assert server_mean_seconds(before, after, "time_to_first_token_seconds", 2) is None  # someone else's traffic
    assert server_mean_seconds(None, after, "time_to_first_token_seconds", 1) is None  # no /metrics


def test_measure_step_times_refuses_batches_larger_than_the_servers_cap():
    with pytest.raises(ValueError, match="exceeds the server's max_num_seqs=4"):
        asyncio.run(measure_step_times(FakeServer(FakeCompletions(), max_num_seqs=4), batch_sizes=(1, 8)))


def test_finish_moments_merge_finishes_within_50_ms():
    rs = [TimedRequest(i, 1, 1, 0.0, t, t, 1, 1, True) for i, t in (("a", 1.0), ("b", 1.04), ("c", 1.2), ("d", 3.0))]
    assert finish_moments(rs) == [1.0, 1.2, 3.0]


def test_timeline_plot_has_one_lane_per_request_and_counts_finishes_in_its_title():
    rs = [TimedRequest("a", 16, 3, 0.0, 0.5, 1.0, 3, 3, True), TimedRequest("b", 16, 5, 0.0, 0.5, 2.0, 5, 5, True)]
    ax = plot_request_timeline(rs).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert ax.get_title().startswith("2 requests finished at 2 distinct moments")


# ----- a burst with failed requests (notebook 04's live burst cell) -----------------------------------
BURST = [TimedRequest("r0", 16, 3, 0.0, 0.5, 2.0, 3, 3, True),
         TimedRequest("r1", 16, 3, 0.1, 1.5, 3.5, 3, 3, True),
         TimedRequest("r2", 16, 3, 0.2, None, None, 0, 0, False, "APIConnectionError: Connection error."),
         TimedRequest("r3", 16, 5, 0.3, 1.0, 2.5, 3, 3, False, "asked for 5 tokens, got 3")]


def test_the_burst_duration_skips_requests_that_never_got_a_token():
    # notebook 04 computed max(r.last_token_s for r in records) inline: TypeError with one failed request
    assert step_fit.burst_seconds(BURST) == pytest.approx(3.5)  # first send 0.0 -> last token 3.5
    assert step_fit.burst_seconds(BURST[2:3]) is None  # nothing arrived: no duration, not a crash
    assert step_fit.burst_seconds([]) is None


def test_the_measured_median_ttft_leaves_out_requests_without_a_first_token():
    # notebook 04's sorted(r.ttft_s for r in records) raised TypeError on a None
    assert step_fit.median_ttft_s(BURST) == pytest.approx(0.7)  # ttfts 0.5, 0.7, 1.4: the middle one
    assert step_fit.median_ttft_s(BURST[2:3]) is None


def test_send_trace_reports_failed_requests_in_words(capsys):
    fake = FakeCompletions(fail=ConnectionError("refused"))
    records = asyncio.run(send_trace(FakeServer(fake), [Request("r0", 0.0, 16, 3), Request("r1", 0.0, 16, 3)]))
    assert [r.ok for r in records] == [False, False]
    assert "2 of 2 requests failed: ConnectionError: refused (2)." in capsys.readouterr().out
    asyncio.run(send_trace(FakeServer(fake), [Request("r0", 0.0, 16, 3)], quiet=True))
    assert capsys.readouterr().out == ""


def test_the_timeline_title_counts_failed_requests_and_says_why():
    ax = plot_request_timeline(BURST).axes[0]
    title = ax.get_title()
    assert title.startswith("2 of 4 requests finished at 2 distinct moments")
    assert "2 of 4 requests failed: APIConnectionError: Connection error. (1); asked for 5 tokens, got 3 (1)." in title


def test_a_failed_decode_measurement_says_how_many_failed_and_what_to_do():
    failed = TimedRequest("a", 16, 11, 0.0, None, None, 0, 0, False, "boom")
    ok = TimedRequest("b", 16, 11, 0.0, 0.0, 1.0, 11, 11, True)
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


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_measuring_the_real_server_gives_a_positive_fitted_model():
    from helpers.serve.server import start_server

    with start_server(max_num_seqs=2, kv_cache_space_gib=0.25, quiet=True) as server:
        data = asyncio.run(measure_step_times(server, batch_sizes=(1, 2), output_len=12, prefill_len=256,
                                              repeats=1))
    assert all(r.ok for rs in data.records.values() for r in rs)
    assert data.clock == "server"
    fit = data.fit()
    assert fit.overhead_s + fit.decode_seq_s > 0 and fit.prefill_token_s > 0
    assert 1 < fit.decode_tok_s(1) < 1000  # tok/s: a 135M model on a CPU


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
