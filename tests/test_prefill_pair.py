"""Which prompts the step-time fit's prefill pair times: above the server's CUDA graphs, read from its log."""

import ast
import asyncio
import inspect
import json
from pathlib import Path

import pytest

import helpers.batching.measure
import helpers.serve.ahead
import helpers.serve.server
from helpers.batching.fit_plan import DEFAULT_PREFILL_PAIR, choose_prefill_pair, prefill_pair_for
from helpers.serve.cuda_graphs import cuda_graph_tokens
from helpers.validate import InvalidArgumentError

LOGS = Path(__file__).parent / "data" / "server_logs"
LAB_2 = Path(__file__).resolve().parent.parent / "labs" / "02_serving_real_traffic.ipynb"


@pytest.mark.parametrize(("log", "tokens"), [
    ("ready_gpu.log", 16),  # vLLM 0.26 on the H200, max_num_seqs=8: graphs up to 2 x 8 tokens
    ("ready_gpu_dummy_8b.log", 16),
    ("ready_cpu.log", 0),  # the CPU build logs None
    ("gpu-0.26/mml_exceeds_kv.log", 0),  # an eager GPU server logs 0
    ("bad_flag.log", None),  # refused before the engine's config line
])
def test_the_graphs_largest_step_is_read_from_the_engines_config_line(log, tokens):
    assert cuda_graph_tokens((LOGS / log).read_text()) == tokens


def test_the_last_config_line_wins():
    assert cuda_graph_tokens("'max_cudagraph_capture_size': 16 ... 'max_cudagraph_capture_size': 128") == 128


@pytest.mark.parametrize("graphs", [None, 0, 16, 31])
def test_without_graphs_or_below_the_short_prompt_the_pair_stays_32_and_512(graphs):
    assert choose_prefill_pair(graphs, step_budget_tokens=2048).lens == DEFAULT_PREFILL_PAIR


@pytest.mark.parametrize(("graphs", "pair"), [(32, (64, 256)), (128, (256, 1024)), (512, (1024, 4096))])
def test_both_prompts_go_above_the_graphs_largest_step(graphs, pair):
    chosen = choose_prefill_pair(graphs, step_budget_tokens=8192, max_model_len=8192)
    assert chosen.lens == pair and min(chosen.lens) > graphs
    assert f"{graphs} tokens as CUDA graphs" in chosen.reason


def test_the_long_prompt_stays_within_the_step_budget_and_max_model_len():
    assert choose_prefill_pair(128, step_budget_tokens=768).lens == (256, 768)
    assert choose_prefill_pair(128, step_budget_tokens=8192, max_model_len=600).lens == (256, 599)


def test_a_pair_above_the_graphs_that_cannot_fit_keeps_the_default_and_says_what_it_measures():
    chosen = choose_prefill_pair(512, step_budget_tokens=1024)
    assert chosen.lens == DEFAULT_PREFILL_PAIR
    assert "does not fit its step budget (1,024 tokens)" in chosen.reason and "what the graph saves" in chosen.reason


def test_a_budget_that_is_not_a_positive_number_is_refused():
    with pytest.raises(InvalidArgumentError, match="step_budget_tokens"):
        choose_prefill_pair(128, step_budget_tokens=0)


class _Server:
    def __init__(self, log: str, max_model_len: int | None):
        self._log = log
        self.kv_cache = type("KV", (), {"max_model_len": max_model_len})()

    def log_text(self) -> str:
        return self._log


def test_a_running_servers_pair_comes_from_its_log_and_kv_report():
    log = ("non-default args: {'max_num_seqs': 64} ... Chunked prefill is enabled with max_num_batched_tokens=8192. "
           "... 'max_cudagraph_capture_size': 128, ...")
    assert prefill_pair_for(_Server(log, 2048)).lens == (256, 1024)
    assert prefill_pair_for(_Server((LOGS / "ready_cpu.log").read_text(), 2048)).lens == DEFAULT_PREFILL_PAIR
    assert "prefill of a 1024- against a 256-token prompt" in prefill_pair_for(_Server(log, None)).describe()


def test_on_a_gpu_the_long_side_is_a_group_that_fills_the_step_budget_up_to_the_cap():
    log = ("non-default args: {'max_num_seqs': 64} ... Chunked prefill is enabled with max_num_batched_tokens=8192. "
           "... 'max_cudagraph_capture_size': 128, ...")
    gpu = _Server(log, 2048)
    gpu.device, gpu.config = "cuda", type("Config", (), {"max_num_seqs": 64})()
    pair = prefill_pair_for(gpu)
    assert (pair.lens, pair.long_group) == ((256, 1024), 8)
    assert "prefill of 8 x 1024-token prompts at once (8,192 tokens) against a 256-token prompt alone" in pair.describe()
    gpu.config.max_num_seqs = 2  # a group never waits for a slot
    assert prefill_pair_for(gpu).long_group == 2
    assert prefill_pair_for(_Server(log, 2048)).long_group == 1  # not a GPU: lone prompts, as on a CPU


def _lab2_server(log: str, device: str, max_num_seqs: int) -> _Server:
    server = _Server(log, 2048)
    server.device, server.config = device, type("Config", (), {"max_num_seqs": max_num_seqs})()
    return server


class _ClockTimed(Exception):
    """Stops lab 2's clock cell once it has asked for its step times: the rest fits what a server measured."""


def clock_cell_times(server: _Server, settings: tuple[int, int], monkeypatch) -> dict:
    """Runs lab 2's 'clock' cell on ``server`` and returns the arguments it gave measure_step_times, defaults filled."""
    cells = json.loads(LAB_2.read_text())["cells"]
    source = "".join(next(c["source"] for c in cells if c.get("id") == "clock"))
    started, asked = [], {}
    signature = inspect.signature(helpers.batching.measure.measure_step_times)

    def start_server(**settings_given):
        started.append(settings_given)
        return server

    async def measure_step_times(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        asked.update(bound.arguments)
        raise _ClockTimed

    ahead = []
    monkeypatch.setattr(helpers.serve.server, "start_server", start_server)
    monkeypatch.setattr(helpers.serve.ahead, "start_ahead", lambda servers: ahead.append(servers))
    monkeypatch.setattr(helpers.batching.measure, "measure_step_times", measure_step_times)
    code = compile(source, "lab 2's clock cell", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    lab_globals = {"SETTINGS": settings, "DECODE_BATCHES": (1, 8), "OUTPUT_TOKENS": 16, "BURSTINESS": 1.0,
                   "POOL": {}, "SMALL_BUDGET": 64}
    with pytest.raises(_ClockTimed):
        asyncio.run(eval(code, lab_globals))  # the course's own cell, awaited as Jupyter would
    assert started == [{"max_num_seqs": settings[-1]}] and asked["server"] is server
    # the servers of sections 3 and 6 asked for ahead: the first is the one this cell starts
    assert [list(servers) for servers in ahead] == [[f"max_num_seqs={settings[-1]}", f"max_num_seqs={settings[0]}",
                                                      "small token budget"]]
    assert list(ahead[0].values())[0] == started[0]
    return asked


def test_lab_2s_cpu_clock_keeps_the_pair_its_recorded_runs_timed(monkeypatch):
    # lab 2 timed 32 against 512 tokens on a CPU before it took notebook 04's choice: the same pair, one prompt each
    server = _lab2_server((LOGS / "ready_cpu.log").read_text(), "cpu", 8)
    asked = clock_cell_times(server, (2, 8), monkeypatch)
    pair = prefill_pair_for(server)
    timed = (asked["short_prefill_len"], asked["prefill_len"], asked["long_group"])
    assert timed == (pair.short, pair.long, pair.long_group) == (512 // 16, 512, 1)


def test_lab_2s_gpu_clock_times_above_the_graphs_of_its_64_slot_server(monkeypatch):
    # the 64-slot server graphs steps up to 128 tokens (results/gpu/README.md): 32 against 512 measured the graph
    log = ("non-default args: {'max_num_seqs': 64} ... Chunked prefill is enabled with max_num_batched_tokens=8192. "
           "... 'max_cudagraph_capture_size': 128, ...")
    server = _lab2_server(log, "cuda", 64)
    asked = clock_cell_times(server, (8, 64), monkeypatch)
    pair = prefill_pair_for(server)
    assert pair.short > 128 and (pair.lens, pair.long_group) == ((256, 1024), 8)
    assert (asked["short_prefill_len"], asked["prefill_len"], asked["long_group"]) == (256, 1024, 8)
