"""scripts/bench_prefill_clocks.py and helpers.batching.prefill_clocks: prefills (lone prompts and groups sent at
once) timed on the server's clock and the client's at once, on a real server."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import course_pythonpath

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_prefill_clocks.py"


def run_script(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": course_pythonpath(os.environ)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.parametrize("lengths", ["512", "32,abc", "0,512"])
def test_bad_lengths_are_refused_before_any_server_starts(lengths):
    done = run_script("--lengths", lengths, timeout=60)
    assert done.returncode == 2 and "--lengths" in done.stderr and "starting vLLM" not in done.stdout


@pytest.mark.parametrize("args, says", [
    (("--lengths", "512", "--groups", "1,x"), "--groups takes positive whole numbers"),
    (("--lengths", "512", "--groups", "0,2"), "--groups takes positive whole numbers"),
    (("--lengths", "256,512", "--groups", "1,2"), "same number of prompt tokens"),  # 512 alone and 256 x 2
    (("--lengths", "512", "--groups", "1,8", "--max-num-seqs", "4"), "the rest would wait"),
])
def test_bad_groups_are_refused_before_any_server_starts(args, says):
    done = run_script(*args, timeout=60)
    assert done.returncode == 2 and says in done.stderr and "starting vLLM" not in done.stdout


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_both_clocks_time_every_lone_prompt_and_see_the_longer_prompt_cost_more(tmp_path):
    out = tmp_path / "clocks.json"
    done = run_script("--max-num-seqs", "2", "--lengths", "32,512", "--repeats", "2", "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    timings = result["timings_s"]
    assert result["lengths"] == [32, 512] and timings["failed"] == 0
    for length in ("32", "512"):
        server, client = timings["server"][length], timings["client"][length]
        assert len(server) == len(client) == 2 and None not in server
        # the client's time to first token holds the server's scheduled-to-first-token interval
        assert all(c >= s for s, c in zip(server, client)), (length, server, client)
    # on a CPU 480 more prompt tokens of SmolLM2 cost hundreds of milliseconds: both clocks must see them
    assert result["slope_us_a_token"]["server"] > 0 and result["slope_us_a_token"]["client"] > 0
    assert "slope (us a token)" in done.stdout and "saved:" in done.stdout


@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_a_group_sent_at_once_is_keyed_by_its_prompt_tokens_and_costs_more_than_one_prompt(tmp_path):
    out = tmp_path / "clocks.json"
    done = run_script("--max-num-seqs", "2", "--lengths", "128", "--groups", "1,2", "--repeats", "1",
                      "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    timings = result["timings_s"]
    assert result["groups"] == [1, 2] and timings["failed"] == 0
    assert set(timings["server"]) == set(timings["client"]) == {"128", "256"}
    # the client waits for the group's last first token: two 128-token prompts on a CPU take longer than one
    assert timings["client"]["256"][0] > timings["client"]["128"][0]
    assert result["step_budget_tokens"] and "step budget:" in done.stdout


def test_a_prompt_longer_than_the_servers_context_is_refused_before_it_starts():
    done = run_script("--lengths", "32,4096", timeout=120)
    assert done.returncode == 1 and "max_model_len=2048" in done.stderr and "starting vLLM" not in done.stdout
