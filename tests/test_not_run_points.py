"""A server that dies mid-run, without a server: the bookkeeping of what was measured and what was not.

The lab's sweep, the tuning comparisons and the step-time measurement each keep what they
measured before the server died, mark the rest as not run (or lost) in words, and never hang or
raise a traceback for it. Here the servers are stand-ins whose process "exits" on cue; the same
paths against a real vLLM server killed with SIGKILL are tests/test_server_death_midrun.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.batching import measure as batching_measure
from helpers.batching.measure import measure_step_times, send_trace
from helpers.batching.measure_stats import StepFitData
from helpers.batching.step_time import StepMeasurement, StepTimeModel, fit_step_time_model
from helpers.batching.trace import BatchRequest
from helpers.errors import CourseError, ServerStartError
from helpers.lab import side_by_side, sweep
from helpers.lab.results import NotRunPoint, load_not_run, load_runs
from helpers.lab.side_by_side import run_side_by_side
from helpers.lab.sweep import SweepPlan, run_sweep
from helpers.load.client import RequestRecord
from helpers.load.prometheus import MetricsSample
from helpers.load.run import LoadTestRun, ServerFacts
from helpers.load.workload import Workload
from helpers.tuning import measure as tuning_measure
from helpers.tuning.comparison import compare_measurements, describe_change
from helpers.tuning.measurement import Measurement
from helpers.tuning.plots import plot_engine, plot_lever, plot_prefix, plot_tradeoff
from helpers.tuning.report import checklist

ROOT = Path(__file__).resolve().parent.parent
DIED = "server died: exit code -9"


class FakeProcess:
    """A Popen stand-in: running until ``die()``, then exited with -9 (SIGKILL)."""

    def __init__(self) -> None:
        self.code = None

    def die(self) -> None:
        self.code = -9

    def poll(self):
        return self.code

    def wait(self, timeout=None):
        if self.code is None:
            raise subprocess.TimeoutExpired("vllm", timeout)
        return self.code


def ok_record(i: int, tokens: int = 8) -> RequestRecord:
    return RequestRecord(i, ok=True, prompt_len=16, prompt_tokens=46, output_tokens=tokens, send_s=0.0,
                         ttft_s=0.5, e2e_s=2.0, done_s=2.0)


def lost_record(i: int) -> RequestRecord:
    return RequestRecord(i, error="APIConnectionError: Connection error.", prompt_len=16, send_s=0.0, done_s=2.1)


# ----- the lab's sweep ---------------------------------------------------------------------------------
class FakeServer:
    def __init__(self, max_num_seqs: int, log: list) -> None:
        self.max_num_seqs, self.log, self.startup_seconds = max_num_seqs, log, 1.0
        self.process, self.started = FakeProcess(), False

    def __enter__(self):  # as VLLMServer: starts it unless it was started (start_together)
        if not self.started:
            self.log.append(("start", self.max_num_seqs))
            self.started = True
        return self

    def __exit__(self, *exc):
        self.log.append(("stop", self.max_num_seqs))


@pytest.fixture
def fake_sweep(monkeypatch):
    """A sweep whose load test kills the server of the settings in ``die_at`` in its first run
    (3 of 6 requests done), and whose start fails for the settings in ``no_start``."""
    log: list = []
    plan = SimpleNamespace(die_at=set(), no_start=set(), unreachable=set(), start_settings=[])

    def start(max_num_seqs, quiet, **settings):
        plan.start_settings.append(settings)
        if max_num_seqs in plan.no_start:
            raise ServerStartError("The vLLM server exited during start-up (process killed).", cause="process killed",
                                   log_tail="", log_path="vllm.log")
        return FakeServer(max_num_seqs, log)

    def server(max_num_seqs, **settings):  # side_by_side's VLLMServer on a CPU: created, started by start_together
        plan.start_settings.append(settings)
        return FakeServer(max_num_seqs, log)

    def together(servers, *, labels, quiet):
        if failed := [s.max_num_seqs for s in servers if s.max_num_seqs in plan.no_start]:
            raise ServerStartError(f"The vLLM server at {failed[0]} exited during start-up (process killed).",
                                   cause="process killed", log_tail="", log_path="vllm.log")
        for s in servers:
            s.__enter__()
        return servers

    def build(server, *, num_requests, output_tokens, seed):
        if server.max_num_seqs in plan.unreachable:
            raise ConnectionRefusedError(111, "Connection refused")
        return Workload(requests=(), prompt_lens=(16,), output_tokens=output_tokens, seed=seed, run_tag=f"t{seed}")

    async def load(server, workload, *, progress, label):
        log.append(("run", server.max_num_seqs, workload.seed))
        if server.max_num_seqs in plan.die_at:
            server.process.die()
            records = [ok_record(i) for i in range(3)] + [lost_record(i) for i in range(3, 6)]
        else:
            records = [ok_record(i) for i in range(6)]
        return LoadTestRun(label, {"run_tag": f"s{server.max_num_seqs}r{workload.seed}"},
                           ServerFacts("smollm2", max_num_seqs=server.max_num_seqs), "CPU: 2 cores",
                           f"2026-11-29T08:0{len(log)}:00+00:00", 2.1, records, cpu_cores=2)

    monkeypatch.setattr(sweep, "start_server", start)
    monkeypatch.setattr(side_by_side, "VLLMServer", server)
    monkeypatch.setattr(side_by_side, "start_together", together)
    monkeypatch.setattr(side_by_side, "detect_device", lambda: "cpu")
    monkeypatch.setattr(sweep, "build_workload", build)
    monkeypatch.setattr(sweep, "run_load_test", load)
    monkeypatch.setattr(sweep, "other_vllm_servers", lambda **exclude: 0)
    monkeypatch.setattr(sweep, "RETRY_WAIT_S", 0)
    plan.log = log
    return plan


def test_side_by_side_starts_every_server_first_takes_turns_and_stops_them_all(fake_sweep, tmp_path):
    result = asyncio.run(run_side_by_side((8, 64), SweepPlan(3, 6, 8), tmp_path, quiet=True, kv_cache_space_gib=1.5))
    assert fake_sweep.log == [("start", 8), ("start", 64), ("run", 8, 0), ("run", 64, 0), ("run", 64, 1),
                              ("run", 8, 1), ("run", 8, 2), ("run", 64, 2), ("stop", 64), ("stop", 8)]
    assert fake_sweep.start_settings == [{"kv_cache_space_gib": 1.5}] * 2  # not vLLM's 92% of the GPU each
    assert not result.not_run and [w.seed for w in result.workloads] == [0, 0, 1, 1, 2, 2]
    assert all(run.settings["side_by_side"] == [8, 64] for run in load_runs(tmp_path))


def test_side_by_side_on_a_gpu_gives_each_server_an_equal_share_of_its_memory(fake_sweep, tmp_path, monkeypatch):
    monkeypatch.setattr(side_by_side, "detect_device", lambda: "cuda")
    asyncio.run(run_side_by_side((8, 64), SweepPlan(1, 6, 8), tmp_path, quiet=True, kv_cache_space_gib=1.3))
    assert fake_sweep.start_settings == [{"kv_cache_space_gib": 1.3, "gpu_memory_utilization": 0.42}] * 2


def test_side_by_side_goes_on_with_the_other_setting_when_one_server_dies(fake_sweep, tmp_path):
    fake_sweep.die_at = {8}
    result = asyncio.run(run_side_by_side((8, 64), SweepPlan(3, 6, 8), tmp_path, quiet=True, kv_cache_space_gib=1.0))
    assert [entry for entry in fake_sweep.log if entry[0] == "run"] == [("run", 8, 0), ("run", 64, 0),
                                                                       ("run", 64, 1), ("run", 64, 2)]
    assert result.not_run == [NotRunPoint(8, 2, DIED), NotRunPoint(8, 3, DIED)]
    assert fake_sweep.log[-2:] == [("stop", 64), ("stop", 8)]


def test_on_a_cpu_side_by_side_falls_back_to_one_after_the_other_when_the_servers_cannot_start_together(
        fake_sweep, tmp_path, capsys):
    fake_sweep.no_start = {64}
    result = asyncio.run(run_side_by_side((8, 64), SweepPlan(2, 6, 8), tmp_path, quiet=True, kv_cache_space_gib=1.0))
    assert fake_sweep.log == [("start", 8), ("run", 8, 0), ("run", 8, 1), ("stop", 8)]  # run_sweep's own starts
    assert "did not start together (process killed): measuring the settings one after" in capsys.readouterr().out
    assert [(p.max_num_seqs, p.run) for p in result.not_run] == [(64, 1), (64, 2)]
    assert all("side_by_side" not in run.settings for run in result.runs)


def test_on_a_gpu_side_by_side_falls_back_to_one_after_the_other_when_the_second_server_does_not_fit(
        fake_sweep, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(side_by_side, "detect_device", lambda: "cuda")
    fake_sweep.no_start = {64}
    result = asyncio.run(run_side_by_side((8, 64), SweepPlan(2, 6, 8), tmp_path, quiet=True, kv_cache_space_gib=1.0))
    assert fake_sweep.log == [("start", 8), ("stop", 8), ("start", 8), ("run", 8, 0), ("run", 8, 1), ("stop", 8)]
    assert "did not start beside the others (process killed): measuring the settings one after" in capsys.readouterr().out
    assert [(p.max_num_seqs, p.run) for p in result.not_run] == [(64, 1), (64, 2)]
    assert all("side_by_side" not in run.settings for run in result.runs)


def test_on_a_gpu_side_by_side_runs_nothing_when_the_first_server_does_not_start(fake_sweep, tmp_path, monkeypatch):
    monkeypatch.setattr(side_by_side, "detect_device", lambda: "cuda")
    fake_sweep.no_start = {8}
    result = asyncio.run(run_side_by_side((8, 64), SweepPlan(2, 6, 8), tmp_path, quiet=True, kv_cache_space_gib=1.0))
    assert fake_sweep.log == [] and not result.runs
    assert [(p.max_num_seqs, p.run) for p in result.not_run] == [(8, 1), (8, 2), (64, 1), (64, 2)]
    assert all("max_num_seqs=8 did not start: process killed" in p.reason for p in result.not_run)


def test_a_server_that_dies_keeps_its_run_marks_the_rest_and_the_next_setting_gets_a_fresh_server(
        fake_sweep, tmp_path, capsys):
    fake_sweep.die_at, fake_sweep.no_start = {8}, {128}
    result = asyncio.run(run_sweep((8, 64, 128), SweepPlan(2, 6, 8), tmp_path, quiet=True))
    assert fake_sweep.log == [("start", 8), ("run", 8, 0), ("stop", 8),
                              ("start", 64), ("run", 64, 0), ("run", 64, 1), ("stop", 64)]
    assert result.not_run == [NotRunPoint(8, 2, DIED),
                              NotRunPoint(128, 1, "server did not start: process killed"),
                              NotRunPoint(128, 2, "server did not start: process killed")]
    cut = result.runs[0]
    assert cut.settings["server_died"] == DIED and (cut.summary.num_ok, cut.summary.num_errors) == (3, 3)
    saved = load_runs(tmp_path)  # the not-run file sits beside the runs and is skipped by load_runs
    assert [(r.max_num_seqs, r.summary.num_ok, r.settings.get("server_died")) for r in saved] == [
        (8, 3, DIED), (64, 6, None), (64, 6, None)]
    assert load_not_run(tmp_path) == result.not_run
    assert result.not_run_file.parent == tmp_path and result.not_run_file.name.endswith("-not-run.json")
    out = capsys.readouterr().out
    assert f"max_num_seqs=8, run 1: {DIED} during the run; kept the 3 of 6 requests" in out
    assert "3 of 6 load tests not run:" in out
    assert f"max_num_seqs=8, run 2: not run ({DIED})" in out
    assert "max_num_seqs=128, run 1: not run (server did not start: process killed)" in out


def test_a_server_that_no_longer_answers_marks_its_remaining_runs_not_run(fake_sweep, tmp_path):
    fake_sweep.unreachable = {8}
    result = asyncio.run(run_sweep((8, 64), SweepPlan(1, 6, 8), tmp_path, quiet=True))
    assert [run.max_num_seqs for run in result.runs] == [64]
    [point] = result.not_run
    assert (point.max_num_seqs, point.run) == (8, 1)
    assert point.reason.startswith("server stopped answering:") and "Connection refused" in point.reason


def test_a_fit_cut_short_by_the_server_dying_is_tried_again_on_the_next_server(fake_sweep, tmp_path):
    fits = []

    async def fit(server, plan):
        fits.append(server.max_num_seqs)
        if len(fits) == 1:
            server.process.die()
            raise RuntimeError("The pace probe failed (APIConnectionError: Connection error.)")
        return SweepPlan(1, plan.num_requests, 4)

    result = asyncio.run(run_sweep((8, 64), SweepPlan(2, 6, 8), tmp_path, fit=fit, quiet=True))
    assert fits == [8, 64] and result.plan == SweepPlan(1, 6, 4)
    assert result.not_run == [NotRunPoint(8, 1, DIED), NotRunPoint(8, 2, DIED)]
    assert [run.max_num_seqs for run in result.runs] == [64]


def test_a_complete_sweep_has_nothing_not_run_and_writes_no_not_run_file(fake_sweep, tmp_path):
    result = asyncio.run(run_sweep((8,), SweepPlan(1, 6, 8), tmp_path, quiet=True))
    assert result.not_run == [] and result.not_run_file is None and result.describe_not_run() is None
    assert load_not_run(tmp_path) == [] and [p.name for p in tmp_path.glob("*not-run*")] == []


def test_the_script_exits_1_with_the_points_not_run_and_no_traceback(fake_sweep, tmp_path, capsys):
    fake_sweep.die_at, fake_sweep.no_start = {2}, {4}
    spec = importlib.util.spec_from_file_location("lab_sweep_death", ROOT / "scripts" / "lab_sweep.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    code = script.main(["--settings", "2", "4", "--repetitions", "2", "--num-requests", "6",
                        "--output-tokens", "8", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in captured.out + captured.err
    assert "lab_sweep: the sweep is incomplete. 3 of 4 load tests not run:" in captured.err
    assert f"max_num_seqs=2, run 2: not run ({DIED})" in captured.err
    assert "max_num_seqs=4, run 2: not run (server did not start: process killed)" in captured.err
    assert "| 2 | 1 run |" in captured.out  # the table of what was measured
    assert "start failed (process killed), attempt 1 of 2" in captured.out  # START_ATTEMPTS: tried twice


# ----- the tuning comparisons ----------------------------------------------------------------------------
def tuning_measurement(setting: str, records: list[RequestRecord], failure: str | None = None) -> Measurement:
    run = LoadTestRun(f"max_num_seqs: {setting}", {}, ServerFacts("smollm2", kv_cache={"num_tokens": 2304}),
                      "CPU: 2 cores", "2026-01-01T00:00:00+00:00", 2.1, records)
    samples = [MetricsSample(0.0, 0, 0, 0.0, 0, 0, 0, 100, 50), MetricsSample(1.0, 2, 0, 0.4, 1, 0, 0, 300, 150)]
    return Measurement("max_num_seqs", setting, run, samples, max_num_seqs=int(setting), failure=failure)


FIRST = tuning_measurement("8", [ok_record(i) for i in range(4)])
CUT = tuning_measurement("64", [ok_record(0), lost_record(1), lost_record(2), lost_record(3)], failure=DIED)
NOT_RUN = Measurement.not_run("max_num_seqs", "64", "server did not start: port in use")


def test_a_not_run_measurement_has_no_numbers_and_says_why():
    assert NOT_RUN.failure == "not run: server did not start: port in use" and not NOT_RUN.comparable
    assert (NOT_RUN.num_preemptions, NOT_RUN.prefix_cache_hits, NOT_RUN.prefix_hit_rate) == (0, 0, None)
    assert NOT_RUN.engine.num_samples == 0 and NOT_RUN.summary.num_requests == 0
    assert NOT_RUN.row()["failure"] == NOT_RUN.failure
    assert NOT_RUN.trouble() == "64: not run: server did not start: port in use."


def test_a_comparison_with_a_side_cut_short_is_not_compared_and_keeps_the_other_sides_numbers():
    assert compare_measurements(FIRST, CUT).throughput_ratio is None
    text = describe_change(FIRST, CUT)
    assert text.startswith("max_num_seqs 8 -> 64: not compared.")
    assert (f"64: {DIED}; 1 of 4 requests finished before it (kept), the other 3 count as failed." in text)
    assert "Measured at 8: 16 output tok/s, p95 latency 2.0 s, median TTFT 0.50 s." in text
    assert CUT.summary.num_ok == 1  # what finished before the death is still there


@pytest.mark.parametrize("before, after, setting", [(FIRST, None, "(not measured)"), (None, FIRST, "(not measured)"),
                                                     (FIRST, NOT_RUN, "64")])
def test_a_missing_or_not_run_side_is_named_instead_of_crashing(before, after, setting):
    text = describe_change(before, after)
    assert "not compared." in text and setting in text and "Measured at 8" in text
    row = checklist([(before, after)]).splitlines()[2]
    assert "not compared:" in row and "not run" in row
    assert "16 -> -" in row or "- -> 16" in row


def test_nothing_to_compare_when_neither_side_was_measured():
    assert describe_change(None, None) == "Nothing to compare: neither side was measured."


def test_the_checklist_names_a_side_the_server_died_in():
    row = checklist([(FIRST, CUT)]).splitlines()[2]
    assert f"not compared: 64 {DIED}" in row
    assert "| 16 -> - |" in row and "| 2 -> - |" in row  # throughput and peak running: the cut side shows "-"


def test_the_plots_draw_a_cut_short_and_a_not_run_side_without_crashing():
    for figure in (plot_lever([FIRST, CUT]), plot_lever([FIRST, NOT_RUN]), plot_engine([FIRST, CUT, NOT_RUN]),
                   plot_tradeoff([FIRST, CUT], context=[NOT_RUN]), plot_prefix(NOT_RUN, CUT)):
        assert figure.axes
    assert "not measured" in plot_lever([FIRST, CUT])._suptitle.get_text()  # no ratio across a death


def test_measure_marks_a_run_the_server_died_in(monkeypatch, capsys):
    server = SimpleNamespace(process=FakeProcess(), config=SimpleNamespace(max_num_seqs=64), url="http://x")

    async def watch(load, target, interval_s):
        load.close()  # the load tester is not run: this stand-in answers for it
        server.process.die()
        return CUT.run, CUT.samples

    monkeypatch.setattr(tuning_measure, "watch", watch)
    monkeypatch.setattr(tuning_measure, "other_vllm_servers", lambda **exclude: 0)
    workload = Workload(requests=(), prompt_lens=(16,), output_tokens=8, seed=0, run_tag="t")
    m = asyncio.run(tuning_measure.measure(server, workload, lever="max_num_seqs", setting="64", progress=False))
    assert m.failure == DIED and m.run is CUT.run
    assert f"max_num_seqs: 64: {DIED}; 1 of 4 requests finished before it" in capsys.readouterr().out


# ----- the step-time measurement -----------------------------------------------------------------------------
class DyingLoadTester:
    """Stands in for run_load_test: requests succeed (first token after 10 ms, one more every 10 ms)
    until ``die_after`` requests were answered; then the server's process exits and every later
    request fails at once."""

    def __init__(self, server, die_after: int) -> None:
        self.server, self.left = server, die_after

    async def __call__(self, target, workload, **options):
        records = []
        for spec in workload.requests:
            if self.left > 0:
                self.left -= 1
                records.append(RequestRecord(spec.index, ok=True, output_tokens=spec.max_tokens, send_s=spec.arrival_s,
                                             ttft_s=0.01, e2e_s=0.01 * spec.max_tokens))
                continue
            self.server.process.die()
            records.append(RequestRecord(spec.index, error="APIConnectionError: Connection error.",
                                         send_s=spec.arrival_s, done_s=spec.arrival_s))
        return SimpleNamespace(records=records)


def dying_server():
    return SimpleNamespace(model_name="fake", config=SimpleNamespace(max_num_seqs=8), process=FakeProcess())


def test_measure_step_times_returns_what_it_measured_before_the_server_died(monkeypatch, capsys):
    server = dying_server()
    # warm-up 1, decode x1 1, decode x2 2: the short prefill of repeat 1 is the first request to fail
    monkeypatch.setattr(batching_measure, "run_load_test", DyingLoadTester(server, die_after=4))
    data = asyncio.run(measure_step_times(server, batch_sizes=(1, 2), output_len=6, prefill_len=64, repeats=2))
    assert [m.label for m in data.measurements] == ["decode x1", "decode x2"]
    assert data.stopped == DIED
    lost = ("prefill 4 tokens (repeat 1)", "prefill 64 tokens (repeat 1)", "decode x1 (repeat 2)",
            "decode x2 (repeat 2)", "prefill 4 tokens (repeat 2)", "prefill 64 tokens (repeat 2)",
            "prefill 4 tokens (repeat 3)", "prefill 64 tokens (repeat 3)")  # the third prefill pair too
    assert data.lost == lost
    assert (data.requests_failed, data.requests_not_sent, data.planned) == (1, 8, 10)  # no rounds added after a death
    assert len(data.records["prefill 4 tokens"]) == 1  # the failed request is kept, with its error
    out = capsys.readouterr().out
    assert (f"Measuring stopped early ({DIED}): 8 of 10 timings lost ({', '.join(lost[:6])}, ...); 1 request "
            "failed, 8 never sent.") in out
    fit = data.fit(StepTimeModel(prefill_token_s=0.123))  # two decode batch sizes: enough to fit
    assert fit.prefill_token_s == 0.123 and fit.decode_seq_s >= 0


def test_too_few_points_after_a_death_is_a_value_error_that_says_so(monkeypatch):
    server = dying_server()
    monkeypatch.setattr(batching_measure, "run_load_test", DyingLoadTester(server, die_after=2))
    data = asyncio.run(measure_step_times(server, batch_sizes=(1, 2), output_len=6, prefill_len=64, repeats=1))
    assert [m.label for m in data.measurements] == ["decode x1"]
    with pytest.raises(ValueError, match=r"^too few points to fit: 1 measurement for the 2 parameters .*server died: "
                                         r"exit code -9"):
        data.fit()


def test_a_death_during_the_warm_up_loses_every_timing_without_sending_them(monkeypatch):
    server = dying_server()
    fake = DyingLoadTester(server, die_after=0)
    monkeypatch.setattr(batching_measure, "run_load_test", fake)
    data = asyncio.run(measure_step_times(server, batch_sizes=(1, 4), output_len=6, repeats=2))
    assert data.measurements == [] and len(data.lost) == 10 and data.requests_not_sent == 2 * (1 + 4 + 1 + 1) + 2
    with pytest.raises(ValueError, match="^too few points to fit: no measurements"):
        data.fit()


def test_send_trace_says_the_server_died_and_keeps_what_finished(monkeypatch, capsys):
    server = dying_server()
    monkeypatch.setattr(batching_measure, "run_load_test", DyingLoadTester(server, die_after=1))
    records = asyncio.run(send_trace(server, [BatchRequest("a", 0.0, 16, 3), BatchRequest("b", 0.0, 16, 3)]))
    assert [r.ok for r in records] == [True, False]
    assert f"{DIED} during the replay: 1 of 2 requests finished before it (kept). 1 of 2 requests failed" in (
        capsys.readouterr().out)


@pytest.mark.parametrize("measurements, message", [
    ([], "^too few points to fit: no measurements"),
    ([StepMeasurement.prefill(512, 0.4)], "^too few points to fit: 1 measurement for the 2 parameters"),
    ([StepMeasurement.decode(1, 30.0), StepMeasurement(float("nan"), 1, 0, 4, "decode x4")],
     "^cannot fit measurements whose time is not a positive number of seconds: decode x4"),
    ([StepMeasurement.decode(1, 30.0), StepMeasurement(0.0, 1, 0, 4, "decode x4")], "decode x4"),
])
def test_the_fit_refuses_too_few_or_unusable_points_with_a_value_error(measurements, message):
    with pytest.raises(ValueError, match=message):
        fit_step_time_model(measurements)


def test_step_fit_data_without_losses_describes_none_and_fits_as_before():
    data = StepFitData([StepMeasurement.decode(b, StepTimeModel().decode_tok_s(b)) for b in (1, 8)], records={})
    assert data.describe_losses() is None and data.requests_failed == 0
    assert data.fit().decode_seq_s == pytest.approx(StepTimeModel().decode_seq_s)


def test_the_lab_stops_with_the_reason_when_a_setting_it_compares_has_no_finished_run(fake_sweep, tmp_path):
    fake_sweep.no_start = {64}
    result = asyncio.run(run_sweep((8, 64), SweepPlan(1, 6, 8), tmp_path, quiet=True))
    with pytest.raises(CourseError, match=r"max_num_seqs=64, and there is none") as error:
        sweep.require_every_setting(result, (8, 64))
    assert "max_num_seqs=64, run 1: not run (server did not start: process killed)" in str(error.value)
    sweep.require_every_setting(result, (8,))  # what was measured is enough for a comparison of 8 alone


def test_on_a_gpu_a_server_standing_by_starts_first_so_a_failed_fresh_start_falls_back(
        fake_sweep, tmp_path, capsys, monkeypatch):
    """Lab 1's check keeps its 64-slot server standing by: the 8-slot start that fails beside it is the later one."""
    from helpers.serve import standby
    from helpers.serve.config import GPU_SHARE
    from helpers.serve.server import with_settings

    monkeypatch.setattr(side_by_side, "detect_device", lambda: "cuda")
    fake_sweep.no_start = {8}
    config = with_settings(None, {"max_num_seqs": 64, "kv_cache_space_gib": 1.0,
                                  "gpu_memory_utilization": round(GPU_SHARE / 2, 2)})
    monkeypatch.setitem(standby.STANDING_BY, config, SimpleNamespace(process=None))
    asyncio.run(run_side_by_side((8, 64), SweepPlan(2, 6, 8), tmp_path, quiet=True, kv_cache_space_gib=1.0))
    assert fake_sweep.log[:2] == [("start", 64), ("stop", 64)]
    assert "max_num_seqs=8 did not start beside the others (process killed): measuring the settings one after" \
        in capsys.readouterr().out
