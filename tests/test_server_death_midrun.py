"""A real vLLM server killed (SIGKILL to its API server) in the middle of the lab's sweep, of a
tuning comparison and of the step-time measurement: each returns within seconds, keeps what it
measured, and marks the rest as not run or lost, in words.

Three server starts in all (30-60 s each on a 2-core CPU), small loads. A thread watches the
server's ``vllm:request_success_total`` and kills the API server once a few requests finished,
so the kill lands mid-load. The same bookkeeping without a server: tests/test_not_run_points.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from helpers.batching.measure import measure_step_times, send_trace
from helpers.batching.trace import BatchRequest
from helpers.errors import ServerStartError
from helpers.hardware import detect_device
from helpers.lab import sweep
from helpers.lab.results import NotRunPoint, load_not_run, load_run, load_runs, save_run
from helpers.load.workload import build_workload
from helpers.serve.server import start_server
from helpers.tuning.comparison import describe_change
from helpers.tuning.measure import measure
from helpers.tuning.plots import plot_engine, plot_lever, plot_tradeoff
from helpers.tuning.report import checklist
from tests.conftest import finished_requests, tokens_to_catch_mid_run, warm_up_requests
from tests.real_server import QUICK_START

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]
ROOT = Path(__file__).resolve().parent.parent
DIED = "server died: exit code -9"
BOUND_S = 30  # from the kill to the call's return


class Killer(threading.Thread):
    """Kills the server's API server process (SIGKILL) once ``after`` more requests finished
    (or after ``deadline_s`` at the latest); ``killed_at`` is when, on the monotonic clock."""

    def __init__(self, server, after: int, deadline_s: float = 240) -> None:
        super().__init__(daemon=True)
        self.server, self.target = server, finished_requests(server) + after
        self.deadline = time.monotonic() + deadline_s
        self.killed_at: float | None = None
        self.seen = 0.0

    def run(self) -> None:
        while time.monotonic() < self.deadline:
            self.seen = finished_requests(self.server)
            if self.seen >= self.target:
                break
            time.sleep(0.1)
        os.kill(self.server.process.pid, signal.SIGKILL)
        self.killed_at = time.monotonic()


def test_the_lab_sweep_script_keeps_what_it_measured_and_exits_1_naming_the_load_tests_not_run(
        tmp_path, monkeypatch, capsys):
    started, killers, stops = [], [], []

    def start(max_num_seqs, quiet):
        if started:  # the second setting: a start that fails, as on a machine out of memory (no second server)
            raise ServerStartError("The vLLM server exited during start-up (process killed).", cause="process killed",
                                   log_tail="", log_path="vllm.log")
        server = start_server(max_num_seqs=max_num_seqs, quiet=quiet, **QUICK_START)
        started.append(server)
        stop = server.stop

        def timed_stop(*args, **kwargs):  # how much of the time after the kill is ending the server's processes
            began = time.monotonic()
            try:
                return stop(*args, **kwargs)
            finally:
                stops.append(time.monotonic() - began)

        server.stop = timed_stop
        killers.append(Killer(server, after=2 + warm_up_requests(server, 6)))
        killers[0].start()
        return server

    monkeypatch.setattr(sweep, "start_server", start)
    monkeypatch.setattr(sweep, "RETRY_WAIT_S", 0)
    spec = importlib.util.spec_from_file_location("lab_sweep_killed", ROOT / "scripts" / "lab_sweep.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    try:
        code = script.main(["--settings", "2", "4", "--repetitions", "2", "--num-requests", "6",
                            "--output-tokens", str(tokens_to_catch_mid_run(detect_device(), 16)), "--out", str(tmp_path)])
        returned = time.monotonic()
    finally:
        for server in started:
            server.stop()
    captured = capsys.readouterr()
    print(captured.out, captured.err)
    assert killers[0].killed_at is not None and killers[0].seen >= killers[0].target, \
        "the kill came at the deadline, not mid-run"
    print(f"sweep: returned {returned - killers[0].killed_at:.1f} s after the kill, of which the sweep's "
          f"server.stop() took {stops[0]:.1f} s")
    assert returned - killers[0].killed_at < BOUND_S
    assert code == 1 and "Traceback" not in captured.out + captured.err
    assert f"max_num_seqs=2, run 2: not run ({DIED})" in captured.err
    assert "max_num_seqs=4, run 1: not run (server did not start: process killed)" in captured.err
    [run] = load_runs(tmp_path)
    assert run.max_num_seqs == 2 and run.settings["server_died"] == DIED
    assert run.summary.num_ok >= 2 and run.summary.num_errors >= 1 and run.summary.num_requests == 6
    assert load_not_run(tmp_path) == [NotRunPoint(2, 2, DIED),
                                      NotRunPoint(4, 1, "server did not start: process killed"),
                                      NotRunPoint(4, 2, "server did not start: process killed")]


def test_a_tuning_comparison_whose_second_run_lost_its_server_keeps_the_first_and_names_the_death(tmp_path):
    server = start_server(max_num_seqs=2, quiet=True, **QUICK_START)
    try:
        async def both():
            first = await measure(server, build_workload(server, num_requests=2, output_tokens=4),
                                  lever="max_num_seqs", setting="2", progress=False, timeout_s=120)
            workload = build_workload(server, num_requests=6, output_tokens=tokens_to_catch_mid_run(server.device, 16), seed=1)
            killer = Killer(server, after=2 + warm_up_requests(server, 6))  # measure() warms a GPU server first
            killer.start()
            second = await measure(server, workload, lever="max_num_seqs", setting="2, again", progress=False,
                                   timeout_s=120)
            return first, second, killer, time.monotonic()

        first, second, killer, returned = asyncio.run(asyncio.wait_for(both(), 300))
    finally:
        server.stop()
    assert killer.killed_at is not None and killer.seen >= killer.target
    print(f"tuning: measure returned {returned - killer.killed_at:.1f} s after the kill")
    assert returned - killer.killed_at < BOUND_S
    assert first.failure is None and first.summary.num_ok == 2
    assert second.failure == DIED
    assert second.summary.num_ok >= 2 and second.summary.num_errors >= 1 and second.summary.num_requests == 6
    text = describe_change(first, second)
    assert "not compared." in text and DIED in text and "Measured at 2:" in text
    assert f"not compared: 2, again {DIED}" in checklist([(first, second)])
    for figure in (plot_lever([first, second]), plot_engine([first, second]), plot_tradeoff([first, second])):
        assert figure.axes
    kept = load_run(save_run(second.run, tmp_path))  # what finished before the death, saved and read back
    assert [r.ok for r in kept.records] == [r.ok for r in second.run.records]


def test_the_step_time_measurement_returns_what_it_timed_before_the_server_died(capsys):
    server = start_server(max_num_seqs=2, quiet=True, **QUICK_START)
    try:
        async def measure_then_replay():
            killer = Killer(server, after=4)  # the warm-up, decode x1 and decode x2 of the first repeat
            killer.start()
            data = await measure_step_times(server, batch_sizes=(1, 2), output_len=16, prompt_len=64,
                                            prefill_len=256, repeats=2)
            returned = time.monotonic()
            began = time.monotonic()
            records = await send_trace(server, [BatchRequest("a", 0.0, 16, 4), BatchRequest("b", 0.1, 16, 4)])
            return data, killer, returned, records, time.monotonic() - began

        data, killer, returned, records, replay_s = asyncio.run(asyncio.wait_for(measure_then_replay(), 300))
    finally:
        server.stop()
    out = capsys.readouterr().out
    print(out)
    assert killer.killed_at is not None and killer.seen >= killer.target
    print(f"step times: returned {returned - killer.killed_at:.1f} s after the kill; replay on the dead server "
          f"{replay_s:.1f} s")
    assert returned - killer.killed_at < BOUND_S
    assert data.stopped == DIED and data.lost and data.planned == 10
    assert {"decode x1", "decode x2"} <= {m.label for m in data.measurements}
    assert f"Measuring stopped early ({DIED}): {len(data.lost)} of 10 timings lost" in out
    try:
        fit = data.fit()
        assert fit.overhead_s + fit.decode_seq_s > 0
    except ValueError as error:
        assert str(error).startswith("too few points to fit") and DIED in str(error)
    assert [r.ok for r in records] == [False, False] and replay_s < BOUND_S
    assert f"{DIED} during the replay: 0 of 2 requests finished before it (kept)." in out
