"""helpers.lab.sweep and scripts/lab_sweep.py: impossible settings are refused before any server
starts, and the one sweep loop starts, measures, saves and stops one server per setting.

No test here starts a vLLM server: start_server is replaced by a stand-in (a fake server, or
one that fails the test if the sweep gets that far), and the load test by a fake one.
"""

import asyncio
import importlib.util
from pathlib import Path

import pytest

from helpers.lab import sweep
from helpers.lab.results import load_runs
from helpers.lab.sweep import SweepPlan, check_sweep, run_sweep
from helpers.load.client import RequestRecord
from helpers.load.run import LoadTestRun, ServerFacts
from helpers.load.workload import Workload

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_server(monkeypatch):
    started = []

    def refuse(**kwargs):
        started.append(kwargs)
        raise AssertionError(f"the sweep tried to start a server with {kwargs}")

    monkeypatch.setattr(sweep, "start_server", refuse)
    return started


@pytest.fixture
def script(no_server):
    spec = importlib.util.spec_from_file_location("lab_sweep_under_test", ROOT / "scripts" / "lab_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("args, message", [
    (["--repetitions", "0"], "argument --repetitions: must be a positive integer, got '0'"),
    (["--num-requests", "-3"], "argument --num-requests: must be a positive integer, got '-3'"),
    (["--output-tokens", "2.5"], "argument --output-tokens: must be a positive integer, got '2.5'"),
    (["--settings", "8", "0"], "argument --settings: must be a positive integer, got '0'"),
    (["--output-tokens", "4000"], "the lab's longest prompt (512 tokens) plus output_tokens=4000 is 4,512 tokens, "
                                  "more than the model's context (max_model_len=2,048)"),
])
def test_impossible_options_stop_the_script_with_a_message_before_any_server(script, no_server, tmp_path, capsys,
                                                                              args, message):
    with pytest.raises(SystemExit) as stopped:
        script.main([*args, "--out", str(tmp_path)])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
    assert no_server == []


@pytest.mark.parametrize("settings, plan, attempts, message", [
    ((8, 0), SweepPlan(1, 4, 4), 1, r"^each max_num_seqs setting must be a positive integer, got 0\."),
    ((8,), SweepPlan(0, 4, 4), 1, r"^repetitions must be a positive integer, got 0\."),
    ((8,), SweepPlan(1, 2.5, 4), 1, r"^num_requests must be a positive integer, got 2\.5\."),
    ((8,), SweepPlan(1, 4, float("nan")), 1, r"^output_tokens must be a positive integer, got nan\."),
    ((8,), SweepPlan(1, 4, 4), 0, r"^attempts must be a positive integer, got 0\."),
    ((), SweepPlan(1, 4, 4), 1, "at least one max_num_seqs value"),
])
def test_the_sweep_refuses_bad_arguments_before_starting_a_server(no_server, tmp_path, settings, plan, attempts,
                                                                  message):
    with pytest.raises(ValueError, match=message):
        asyncio.run(run_sweep(settings, plan, tmp_path, attempts=attempts))
    assert no_server == []


def test_check_sweep_accepts_the_defaults():
    check_sweep(sweep.SWEEP_SETTINGS, SweepPlan(2, 50, 64), max_model_len=2048)


class FakeServer:
    def __init__(self, max_num_seqs, log):
        self.max_num_seqs, self.log, self.startup_seconds = max_num_seqs, log, 1.0

    def __enter__(self):
        self.log.append(("start", self.max_num_seqs))
        return self

    def __exit__(self, *exc):
        self.log.append(("stop", self.max_num_seqs))


def test_one_server_per_setting_runs_every_repetition_saves_it_and_stops(monkeypatch, tmp_path, capsys):
    log = []

    def build(server, *, num_requests, output_tokens, seed):
        return Workload(requests=(), prompt_lens=(16,), output_tokens=output_tokens, seed=seed, run_tag=f"t{seed}")

    async def load(server, workload, *, progress, label):
        log.append(("run", server.max_num_seqs, workload.seed, workload.output_tokens))
        records = [RequestRecord(0, ok=True, prompt_tokens=46, output_tokens=workload.output_tokens, send_s=0.0,
                                 ttft_s=1.0, e2e_s=2.0, done_s=2.0)]
        return LoadTestRun(label, {"run_tag": f"s{server.max_num_seqs}r{workload.seed}"},
                           ServerFacts("smollm2", max_num_seqs=server.max_num_seqs), "CPU: 2 cores",
                           f"2026-11-29T08:0{len(log)}:00+00:00", 2.0, records, cpu_cores=2)

    async def fit(server, plan):
        return SweepPlan(1, plan.num_requests, 32)  # the first server says: half the tokens, one repetition

    monkeypatch.setattr(sweep, "start_server", lambda max_num_seqs, quiet: FakeServer(max_num_seqs, log))
    monkeypatch.setattr(sweep, "build_workload", build)
    monkeypatch.setattr(sweep, "run_load_test", load)
    monkeypatch.setattr(sweep, "other_vllm_servers", lambda: 0)
    result = asyncio.run(run_sweep((8, 64), SweepPlan(2, 4, 64), tmp_path, quiet=True))
    assert log == [("start", 8), ("run", 8, 0, 64), ("run", 8, 1, 64), ("stop", 8),
                   ("start", 64), ("run", 64, 0, 64), ("run", 64, 1, 64), ("stop", 64)]
    assert [run.max_num_seqs for run in load_runs(tmp_path)] == [8, 8, 64, 64]
    assert [w.seed for w in result.workloads] == [0, 1, 0, 1] and result.plan == SweepPlan(2, 4, 64)
    assert all(run.settings["other_vllm_servers_at_start"] == 0 for run in result.runs)
    out = capsys.readouterr().out
    assert "max_num_seqs=8: server ready in 1 s" in out and "1 of 1 requests ok, wall 2.0 s, errors 0; 32.0 output tok/s" in out

    log.clear()
    fitted = asyncio.run(run_sweep((8, 64), SweepPlan(2, 4, 64), tmp_path / "fitted", fit=fit))
    out = capsys.readouterr().out
    assert "1 of 1 requests ok, errors 0\n" in out and "wall" not in out  # the lab's: no answers in it, nor the wall time
    assert [entry for entry in log if entry[0] == "run"] == [("run", 8, 0, 32), ("run", 64, 0, 32)]
    assert fitted.plan == SweepPlan(1, 4, 32)
