"""helpers.lab.plots: every figure builds headless (Agg) from runs, and its title states what the data show."""

import math
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from helpers.lab.plots import plot_latency_cdf, plot_sweep, plot_throughput, plot_timeline
from helpers.lab.table import ResultRow, runs_table
from helpers.load.client import RequestRecord
from helpers.load.run import LoadTestRun, ServerFacts
from helpers.load.summary import summarize


def waves_run(seqs, step_s, tag, n=50, tokens=64):
    """All sent at t=0; `seqs` at a time, each wave taking tokens * step_s seconds."""
    records = []
    for i in range(n):
        wave = i // seqs
        start = wave * tokens * step_s
        records.append(RequestRecord(i, ok=True, prompt_len=16, prompt_tokens=46, output_tokens=tokens, send_s=0.0,
                                     ttft_s=start + step_s, e2e_s=start + tokens * step_s,
                                     done_s=start + tokens * step_s, itl_s=[step_s] * (tokens - 1)))
    records[-1] = RequestRecord(n - 1, ok=False, error="boom", send_s=0.0, done_s=1.0)
    server = ServerFacts("smollm2", max_num_seqs=seqs, device="cpu")
    return LoadTestRun(f"max_num_seqs={seqs}", {"run_tag": tag}, server, "CPU: 2 cores",
                       "2026-11-29T08:00:00+00:00", 0.0, records)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture
def groups():
    return {8: [waves_run(8, 0.06, "a"), waves_run(8, 0.065, "b")], 64: [waves_run(64, 0.2, "c"), waves_run(64, 0.21, "d")]}


def test_latency_cdfs_have_labelled_axes_and_a_title_with_the_p95s(groups):
    fig = plot_latency_cdf(groups)
    left = fig.axes[0]
    assert left.get_xlabel().endswith(", s") and "fraction" in left.get_ylabel()
    assert "p95 latency" in fig._suptitle.get_text() and "max_num_seqs=8" in fig._suptitle.get_text()
    assert len(left.get_legend().get_texts()) == 2


def test_throughput_bars_state_the_measured_ratio(groups):
    fig = plot_throughput(groups, reference=groups)
    title = fig.axes[0].get_title()
    assert "max_num_seqs=64 gave" in title and "(ideal: 6.25x)" in title  # 50 requests fill 50 of 64 slots
    assert "tokens/s" in fig.axes[0].get_ylabel()


def test_the_timeline_shows_waiting_at_8_and_names_the_longest_wait(groups):
    fig = plot_timeline({8: groups[8][0], 64: groups[64][0]})
    assert "at most 8 generating at once" in fig.axes[0].get_title()
    assert "longest wait for a first token" in fig._suptitle.get_text()
    assert fig.axes[0].get_xlabel() == "time since the run started, s"


def test_the_sweep_overlays_ideal_scaling_the_prediction_and_the_learners_points():
    runs = [waves_run(s, 0.05 * s ** 0.6, f"r{s}") for s in (1, 2, 4, 8, 16, 32, 64)]
    rows = runs_table(runs, pooled=True)
    prediction = {"max_num_seqs": [1, 8, 64], "predicted_output_tok_s": [20, 90, 150], "ratio_64_vs_8": 1.6}
    fig = plot_sweep(rows, own=rows[3:4] + rows[-1:], prediction=prediction, num_requests=50)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("ideal linear" in label for label in labels)
    assert any("prediction" in label for label in labels) and "your runs" in labels
    assert fig.axes[0].get_title().startswith("Peak ")
    assert "max_num_seqs" in fig.axes[1].get_xlabel()


def test_sub_second_gpu_latencies_keep_their_digits_in_the_sweep_title():
    rows = runs_table([waves_run(s, 0.0005, f"r{s}") for s in (1, 8, 64)], pooled=True)
    title = plot_sweep(rows).axes[1].get_title()
    assert "0 s" not in title.replace("10 s", "") and " s at 1 " in title


def test_the_sweep_builds_without_a_prediction():
    rows = runs_table([waves_run(s, 0.05, f"r{s}") for s in (1, 8, 64)], pooled=True)
    labels = [t.get_text() for t in plot_sweep(rows).axes[0].get_legend().get_texts()]
    assert not any("prediction" in label for label in labels)


# ----- failed requests --------------------------------------------------------------------------------
def all_failed_run(seqs, tag, n=10):
    """Every request failed: some never got a token, some were cut short after their first ones."""
    records = [RequestRecord(i, ok=False, error="APIConnectionError: Connection error.", send_s=0.0, done_s=1.0)
               for i in range(n - 2)]
    records += [RequestRecord(i, ok=False, error="stream ended before the server finished the answer", send_s=0.0,
                              ttft_s=0.5, e2e_s=None, done_s=None, itl_s=[0.1]) for i in range(n - 2, n)]
    server = ServerFacts("smollm2", max_num_seqs=seqs, device="cpu")
    return LoadTestRun(f"max_num_seqs={seqs}", {"run_tag": tag}, server, "CPU: 2 cores", "2026-11-29T08:00:00+00:00",
                       1.0, records)


def test_throughput_bars_survive_a_setting_where_every_request_failed_and_say_so(groups):
    # before: ZeroDivisionError in the title (0 tok/s at the first setting)
    broken = {8: [all_failed_run(8, "x")], 64: groups[64]}
    title = plot_throughput(broken).axes[0].get_title()
    assert "No request succeeded at max_num_seqs=8" in title
    assert "12 of 110 requests failed: APIConnectionError: Connection error. (8)" in title


def test_throughput_title_counts_the_failed_requests(groups):
    title = plot_throughput(groups).axes[0].get_title()
    assert "gave" in title and "4 of 200 requests failed: boom (4)." in title


def test_the_timeline_draws_failed_requests_and_counts_them_in_each_title(groups):
    fig = plot_timeline({8: groups[8][0], 64: all_failed_run(64, "x")})
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].endswith("; 1 of 50 failed (x)")
    assert titles[1] == "max_num_seqs=64: at most 0 generating at once; 10 of 10 failed (x)"


def test_the_latency_cdf_leaves_a_setting_without_successful_requests_out(groups):
    fig = plot_latency_cdf({8: [all_failed_run(8, "x")], 64: groups[64]})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["max_num_seqs=64 (98 requests)"]


def test_the_sweep_survives_a_setting_with_no_successful_request():
    # before: TypeError comparing None latencies, or formatting None in the title
    runs = [waves_run(1, 0.05, "r1"), all_failed_run(8, "r8"), waves_run(64, 0.05, "r64")]
    rows = runs_table(runs, pooled=True)
    assert rows[1].summary.e2e_p95_s is None
    own = [ResultRow(8, "yours", replace(summarize([]), output_tok_per_s=0.0))]
    fig = plot_sweep(rows, own=own, num_requests=50)
    left, right = fig.axes
    assert "at 1 to" in right.get_title() and "at 64" in right.get_title()
    assert fig._suptitle.get_text() == "12 of 110 requests failed; they add no tokens and no latencies"


def test_the_sweep_names_a_first_setting_without_throughput_instead_of_dividing_by_it():
    rows = runs_table([all_failed_run(1, "r1"), waves_run(8, 0.05, "r8")], pooled=True)
    title = plot_sweep(rows).axes[0].get_title()
    assert "no successful request at 1 slot(s) to compare with" in title


def test_the_ideal_throughput_ratio_is_the_slot_ratio_when_the_requests_fill_every_slot():
    groups = {2: [waves_run(2, 0.05, "a", n=12)], 8: [waves_run(8, 0.1, "b", n=12)]}
    assert "(ideal: 4x)" in plot_throughput(groups).axes[0].get_title()


def test_the_sweep_leaves_zero_throughput_off_its_log_axis():
    # a setting whose requests all failed measured 0 tok/s: before, a point and a star at 0 on a log axis
    rows = runs_table([waves_run(1, 0.05, "r1"), all_failed_run(8, "r8"), waves_run(64, 0.05, "r64")], pooled=True)
    own = [ResultRow(8, "yours", replace(summarize([]), output_tok_per_s=0.0))]
    left = plot_sweep(rows, own=own, num_requests=50).axes[0]
    measured = next(c for c in left.containers if c.get_label().startswith("measured")).lines[0]
    assert math.isnan(measured.get_ydata()[1])  # a gap
    assert all(y > 0 for line in left.get_lines() for y in line.get_ydata() if not math.isnan(y))
    assert "your runs" not in [t.get_text() for t in left.get_legend().get_texts()]


def test_the_cdf_y_label_fits_both_panels_it_is_shared_with(groups):
    fig = plot_latency_cdf(groups)
    assert fig.axes[0].get_ylabel() == "fraction of requests at or below x"


def test_the_timeline_legend_lies_below_the_panels_not_over_the_bars(groups):
    fig = plot_timeline({8: groups[8][0], 64: groups[64][0]})
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.y1 < ax.get_window_extent().y0  # under the axes
    assert legend.y1 < ax.xaxis.label.get_window_extent().y0  # and under the time axis' label
