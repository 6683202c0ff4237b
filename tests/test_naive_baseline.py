"""helpers.lab.naive: the generate() loop the module text compares vLLM with, run for real on the embedded model."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from helpers.lab.naive import compare_naive, naive_run
from helpers.load.client import RequestSpec
from helpers.load.workload import Workload
from tests.real_server import QUICK_START

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]


def text_workload(n: int, tokens: int) -> Workload:
    return Workload(tuple(RequestSpec(i, f"Question {i}: what is a page table?", 9, tokens) for i in range(n)),
                    (9,), tokens, 0, "t")


def test_the_loop_and_vllm_serve_the_same_requests_and_the_comparison_says_how_they_differ():
    from helpers.load.run import run_load_test
    from helpers.serve.model import resolve_model
    from helpers.serve.server import start_server

    workload = text_workload(3, 12)
    with start_server(max_num_seqs=4, quiet=True, **QUICK_START) as server:
        dtype = server.kv_cache.dtype
        vllm_run = asyncio.run(run_load_test(server, workload, progress=False, timeout_s=300))
    naive = naive_run(resolve_model().model, workload, dtype=dtype)  # after the server stopped: no shared cores
    assert naive.output_tokens == [12, 12, 12]  # exactly max_tokens each, like vLLM's ignore_eos
    # the same chat template as the server's: its usage.prompt_tokens and the loop's prompt agree
    assert naive.prompt_tokens == [r.prompt_tokens for r in vllm_run.records]
    assert all(s > 0 for s in naive.seconds) and naive.wall_s == pytest.approx(sum(naive.seconds))
    comparison = compare_naive(naive, vllm_run)
    assert comparison.requests == 3 and comparison.speedup == pytest.approx(
        vllm_run.summary.output_tok_per_s / naive.output_tok_per_s)
    assert "3 requests: a generate() loop took" in comparison.describe()
    fewer = replace(naive, output_tokens=naive.output_tokens[:2], seconds=naive.seconds[:2])
    with pytest.raises(ValueError, match="did not serve the same requests"):
        compare_naive(fewer, vllm_run)
