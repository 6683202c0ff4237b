"""helpers.tuning against the real vLLM server (CPU build on CI): what the tuning notebook relies on.

Two server starts (30-40 s each) and a few seconds of load: the default cache settings as the
engine reports them, prefix-cache hits on a shared system prompt, and an FP8 KV cache holding
twice the tokens of the same pool.
"""

from __future__ import annotations

import asyncio

import pytest

from helpers.hardware import cpu_supports_fp8_kv, detect_device
from helpers.load.poller import cache_config_info, scrape
from helpers.load.warmup import needs_warm_up
from helpers.serve.config import DEFAULT_CPU_KV_CACHE_GIB
from helpers.serve.server import start_server
from helpers.tuning.arithmetic import ideal_prefix_hits
from helpers.tuning.measure import (
    GPU_REPEATS,
    kv_pool_bytes,
    measure,
    repeats_for,
    shared_prefix_tokens,
)
from helpers.tuning.workloads import shared_prefix_workload

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]
ON_CPU = detect_device() == "cpu"


@pytest.fixture(scope="module")
def server():
    with start_server(max_num_seqs=8, eager=True, quiet=True) as running:
        yield running


def test_the_engine_reports_prefix_caching_on_by_default(server):
    info = cache_config_info(server)
    assert info["enable_prefix_caching"] == "True"
    assert int(info["block_size"]) == server.kv_cache.block_size


@pytest.mark.skipif(not ON_CPU, reason="the pool size is given explicitly only on the CPU build")
def test_the_pool_size_is_the_one_the_server_was_given(server):
    assert kv_pool_bytes(server) == int(DEFAULT_CPU_KV_CACHE_GIB * 2**30)


def test_requests_behind_one_system_prompt_hit_the_prefix_cache_in_whole_blocks(server):
    block = server.kv_cache.block_size
    workload = shared_prefix_workload(server, num_requests=4, system_tokens=2 * block + 20, question_tokens=12,
                                      output_tokens=2)
    shared = shared_prefix_tokens(server, workload)
    assert shared >= 2 * block + 20  # template + system prompt + the start of the user turn
    m = asyncio.run(asyncio.wait_for(measure(server, workload, lever="prefix caching", setting="on",
                                             progress=False, timeout_s=120), 180))
    assert all(r.ok for r in m.run.records), [r.error for r in m.run.records]
    assert m.prefix_cache_queries == m.summary.prompt_tokens_total
    assert m.prefix_cache_hits == ideal_prefix_hits(4, shared, block)


def test_a_repeated_load_keeps_its_median_run_and_sends_fresh_prompts_each_time(server):
    assert repeats_for(server) == (GPU_REPEATS if server.device == "cuda" else 1)
    block = server.kv_cache.block_size
    workload = shared_prefix_workload(server, num_requests=3, system_tokens=2 * block + 20, question_tokens=12,
                                      output_tokens=4)
    shared = shared_prefix_tokens(server, workload)
    hits_before = scrape(server).prefix_cache_hits
    m = asyncio.run(asyncio.wait_for(measure(server, workload, lever="prefix caching", setting="on",
                                             progress=False, timeout_s=120, repeats=3), 300))
    assert m.failure is None and len(m.runs_tok_s) == 3 and all(v > 0 for v in m.runs_tok_s)
    assert m.spread == (min(m.runs_tok_s), max(m.runs_tok_s))
    assert m.summary.output_tok_per_s == sorted(m.runs_tok_s)[1]  # the median run is the measurement, whole
    # each repeat's system prompt is new: the first request of every run computes it (a reused one would hit);
    # a GPU server's untimed warm-up is one more such run
    loads = 3 + (1 if needs_warm_up(server) else 0)
    assert scrape(server).prefix_cache_hits - hits_before == loads * ideal_prefix_hits(3, shared, block)


@pytest.mark.skipif(not (ON_CPU and cpu_supports_fp8_kv()), reason="needs the CPU build on a CPU with AVX-512 or AMX")
def test_an_fp8_kv_cache_holds_twice_the_tokens_of_the_same_pool():
    with start_server(kv_cache_space_gib=0.05, extra_args=("--kv-cache-dtype", "fp8"), eager=True, quiet=True) as fp8:
        assert cache_config_info(fp8)["cache_dtype"] == "fp8"
        assert fp8.kv_cache.num_tokens == 2 * 2304  # 0.05 GiB holds 2,304 tokens in bf16 (18 blocks of 128)
        reply = fp8.client().chat.completions.create(
            model=fp8.model_name, messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8, temperature=0)
        assert reply.usage.completion_tokens >= 1


def test_a_passed_cap_and_the_default_memory_fraction_are_read_back_from_the_server(server):
    from helpers.tuning.command import engine_settings

    s = engine_settings("fixture", cache_config_info(server), server.log_text(), None,
                        device="cpu" if ON_CPU else "cuda")
    assert (s.max_num_seqs, s.max_num_seqs_source) == (8, "passed on the command line")
    assert s.prefix_caching == "True"
    assert s.gpu_memory_utilization == "0.92"  # not passed: vLLM's own default (0.26 and 0.32), read from /metrics


@pytest.mark.skipif(not ON_CPU, reason="the CPU build's handling of --gpu-memory-utilization beside an explicit pool")
def test_on_cpu_the_modules_command_keeps_the_courses_pool_and_records_the_fraction_it_ignores():
    from dataclasses import asdict

    from helpers.tuning.command import MODULE_COMMAND, engine_settings

    with start_server(**MODULE_COMMAND, max_model_len=1024, eager=True, quiet=True) as command:
        info = cache_config_info(command)
        s = engine_settings("module's command", info, command.log_text(), asdict(command.kv_cache), device="cpu")
    assert (s.max_num_seqs, s.max_num_seqs_source) == (256, "passed on the command line")
    assert s.gpu_memory_utilization == "0.9" and s.prefix_caching == "True"
    assert s.kv_pool_bytes == int(DEFAULT_CPU_KV_CACHE_GIB * 2**30)  # the course's pool, not 0.9 of the machine
    assert s.kv_tokens == command.kv_cache.num_tokens
