"""The engine's step token budget (max_num_batched_tokens), read from real logs of both vLLM versions:
0.26 on the H200 logs it (8,192); 0.32's CPU build never logs its 2,048. Neither publishes it on /metrics."""

from pathlib import Path

import pytest

from helpers.serve.budget import VLLM_UNLOGGED_DEFAULT, step_budget

DATA = Path(__file__).parent / "data"
LOGS = DATA / "server_logs"


@pytest.mark.parametrize("log_name", ["ready_gpu.log", "ready_gpu_dummy_8b.log", "gpu-0.26/kv_pool_too_small.log"])
def test_vllm_026_on_the_h200_logs_its_budget_of_8192(log_name):
    found = step_budget((LOGS / log_name).read_text())
    assert (found.tokens, found.source) == (8192, "the server's log")


def test_vllm_032_on_cpu_does_not_log_its_budget_which_is_then_the_unlogged_default():
    text = (LOGS / "ready_cpu.log").read_text()
    assert "Chunked prefill is enabled" not in text and "enable_chunked_prefill=True" in text
    found = step_budget(text)
    assert found.tokens == VLLM_UNLOGGED_DEFAULT == 2048 and "does not log" in found.source
    assert str(found) == "2,048 tokens a step (vLLM's default, which it does not log)"


def test_a_budget_passed_on_the_command_line_wins_over_what_was_logged():
    text = ("(APIServer pid=1) INFO [api_utils.py:286] non-default args: {'model': '/m', 'max_num_batched_tokens': 4096, "
            "'max_num_seqs': 8}\n(APIServer pid=1) INFO [scheduler.py:307] Chunked prefill is enabled with "
            "max_num_batched_tokens=4096.\n")
    assert step_budget(text).tokens == 4096 and step_budget(text).source == "passed on the command line"


def test_a_log_that_cannot_tell_gives_none():
    assert step_budget((LOGS / "port_in_use.log").read_text()) is None  # died before the engine's config line
    assert step_budget("... with config: model='m', enable_chunked_prefill=False, ...") is None


@pytest.mark.parametrize("capture", ["vllm-0.26.0-gpu.txt", "vllm-0.32-cpu-busy-max_num_seqs-4.txt"])
def test_neither_version_publishes_the_budget_on_metrics_which_is_why_the_log_is_read(capture):
    assert "max_num_batched_tokens" not in (DATA / "metrics" / capture).read_text()


@pytest.mark.server  # slow: imports vLLM and builds its config, as the API server does (about 30 s)
def test_the_unlogged_budget_is_what_this_vllm_computes_for_the_course_server():
    import subprocess
    import sys

    from helpers.hardware import detect_device
    from helpers.serve.model import resolve_model

    if detect_device() != "cpu":
        pytest.skip("checks vLLM's CPU build; on a GPU the budget is logged (8,192 on the H200)")
    code = ("import sys\nfrom vllm.engine.arg_utils import EngineArgs\nfrom vllm.usage.usage_lib import UsageContext\n"
            "c = EngineArgs(model=sys.argv[1], max_model_len=2048, max_num_seqs=8)"
            ".create_engine_config(UsageContext.OPENAI_API_SERVER)\nprint('BUDGET', c.scheduler_config.max_num_batched_tokens)")
    out = subprocess.run([sys.executable, "-c", code, resolve_model().model], capture_output=True, text=True,
                         timeout=300, check=False)  # its stderr goes into the failure message
    budget = [line for line in out.stdout.splitlines() if line.startswith("BUDGET")]
    assert budget == [f"BUDGET {VLLM_UNLOGGED_DEFAULT}"], out.stderr[-2000:]
