"""Capacity arithmetic for a length mix, the live demo's requests, the /metrics reader, and the drawings
(no server needed)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import math  # noqa: E402
from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402

from helpers.load.prometheus import MetricsSample  # noqa: E402

from helpers.load.client import RequestRecord  # noqa: E402
from helpers.load.workload import LAB_PROMPT_LENS, token_prompt  # noqa: E402
from helpers.paged.cache import PagedKVCache  # noqa: E402
from helpers.paged.capacity import LAB_MIX, LengthMix, capacity_table, fit, lab_capacity  # noqa: E402
from helpers.paged.capacity_plots import held_blocks, plot_capacity, plot_kv_usage  # noqa: E402
from helpers.paged.contiguous import ContiguousKVCache  # noqa: E402
from helpers.paged.kv_math import blocks_for  # noqa: E402
from helpers.paged.live_demo import token_workload  # noqa: E402
from helpers.paged.sim import simulate_allocator  # noqa: E402
from helpers.paged.trace import KVRequest  # noqa: E402
from helpers.serve.log import KVCacheReport  # noqa: E402

CPU_REPORT = KVCacheReport(num_tokens=93_184, num_blocks=728, block_size=128, max_model_len=2048, max_concurrency=45.5)


def test_the_lab_mix_cycles_through_its_four_prompt_lengths():
    lengths = LAB_MIX.final_lengths()
    assert len(lengths) == 50 and lengths[:5] == [80, 128, 320, 576, 80]
    assert LAB_MIX.prompt_lens is LAB_PROMPT_LENS  # one definition of the lab's prompt mix


def test_blocks_round_up_to_whole_blocks():
    assert [blocks_for(n, 16) for n in (0, 1, 16, 17, 37)] == [0, 1, 1, 2, 3]


def test_naive_capacity_is_vllms_own_maximum_concurrency_rounded_down():
    naive = fit(LAB_MIX, CPU_REPORT.num_tokens, scheme="naive", max_model_len=2048)
    assert naive.max_requests == math.floor(CPU_REPORT.max_concurrency) == 45
    assert naive.num_fit == 45 and not naive.all_fit


def test_paged_capacity_on_the_cpu_server_counts_whole_blocks_of_128():
    # per cycle of four requests: 80 -> 1, 128 -> 1, 320 -> 3, 576 -> 5 blocks = 10 blocks
    paged = fit(LAB_MIX, CPU_REPORT.num_tokens, scheme="paged", block_size=128)
    assert paged.all_fit
    assert paged.max_requests == 4 * 72 + 3  # 72 cycles use 720 blocks; then 1 + 1 + 3 blocks fit, 5 do not
    assert paged.token_share == pytest.approx(sum(LAB_MIX.final_lengths()) / (128 * (12 * 10 + 1 + 1)))


def test_a_hand_checkable_small_pool():
    mix = LengthMix(prompt_lens=(16, 512), output_len=64, num_requests=4)  # lengths 80, 576, 80, 576
    assert fit(mix, 1024, scheme="naive", max_model_len=1024).num_fit == 1
    assert fit(mix, 1024, scheme="exact").num_fit == 3  # 80 + 576 + 80 = 736 <= 1024 < 1312
    assert fit(mix, 1024, scheme="paged", block_size=128).num_fit == 3  # 1 + 5 + 1 = 7 of 8 blocks


def test_the_counts_agree_with_replaying_the_mix_through_the_allocators():
    mix = LengthMix(num_requests=12)
    prompts = [n - mix.output_len for n in mix.final_lengths()]
    trace = [KVRequest(f"r{i:02d}", 0, tuple(range(1000 * i, 1000 * i + p)), mix.output_len)
             for i, p in enumerate(prompts)]
    need = sum(blocks_for(n, 128) for n in mix.final_lengths())  # 3 cycles of 1 + 1 + 3 + 5 = 30 blocks
    assert fit(mix, need * 128, scheme="paged", block_size=128).num_fit == 12
    run = simulate_allocator(trace, PagedKVCache(need, 128))
    assert run[0].num_running == 12 and run[-1].num_preemptions == 0  # all at once, none ever pushed out
    assert fit(mix, (need - 1) * 128, scheme="paged", block_size=128).num_fit == 11
    assert simulate_allocator(trace, PagedKVCache(need - 1, 128))[-1].num_preemptions > 0  # one block short: someone waits
    naive = simulate_allocator(trace, ContiguousKVCache(5 * 2048, max_model_len=2048))
    assert max(f.num_running for f in naive) == fit(mix, 5 * 2048, scheme="naive", max_model_len=2048).num_fit == 5


def test_lab_capacity_gives_one_row_per_scheme_and_block_size():
    rows = lab_capacity(CPU_REPORT, block_sizes=[128, 16])
    assert [r.scheme for r in rows] == ["naive: max_model_len each", "contiguous: prompt + max_tokens",
                                        "paged: blocks of 128", "paged: blocks of 16"]
    assert rows[3].token_share == 1.0  # every final length of the mix is a multiple of 16
    assert "fit of 50" in capacity_table(rows).splitlines()[0]


def test_fit_rejects_an_unknown_scheme_and_a_request_longer_than_max_model_len():
    with pytest.raises(ValueError):
        fit(LAB_MIX, 1000, scheme="buddy")
    with pytest.raises(ValueError, match="exceeds max_model_len"):
        fit(LAB_MIX, 100_000, scheme="naive", max_model_len=512)


METRICS = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="smollm2"} 0.013736263736263736
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="smollm2"} 1.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="smollm2"} 1093.0
vllm:prefix_cache_queries_created{engine="0",model_name="smollm2"} 1.79e+09
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} 512.0
vllm:prefix_cache_hits_created{engine="0",model_name="smollm2"} 1.79e+09
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0",num_gpu_blocks="728"} 1.0
"""


def test_kv_metrics_come_from_the_course_metrics_reader():
    m = MetricsSample.from_text(METRICS)
    assert (m.num_requests_running, m.num_requests_waiting) == (4, 1)
    assert (m.prefix_cache_queries, m.prefix_cache_hits) == (1093, 512)
    assert m.kv_cache_usage_perc * 728 == pytest.approx(10)


def test_token_prompts_are_exact_and_differ_by_seed():
    assert len(token_prompt(512, seed=3)) == 512
    assert token_prompt(128, seed=1)[:128] != token_prompt(128, seed=2)[:128]


def test_the_live_demo_sends_token_prompts_of_exact_length_without_streaming():
    workload = token_workload([token_prompt(512, seed=0), token_prompt(16, seed=1)], [16, 64])
    assert [(r.index, r.prompt_tokens, r.max_tokens, r.is_tokens, r.stream) for r in workload.requests] == [
        (0, 512, 16, True, False), (1, 16, 64, True, False)]
    assert workload.settings()["output_lens"] == [16, 64]
    with pytest.raises(ValueError, match="one max_tokens per prompt"):
        token_workload([token_prompt(4, seed=0)], [8, 8])


def _record(index, ok, prompt_tokens, output_tokens, send_s, done_s, error=None):
    return RequestRecord(index, ok=ok, error=error, prompt_len=prompt_tokens, prompt_tokens=prompt_tokens if ok else None,
                         output_tokens=output_tokens if ok else None, send_s=send_s, done_s=done_s)


def test_held_blocks_counts_prompt_and_output_in_whole_blocks():
    assert held_blocks(_record(0, True, 512, 16, 0.0, 3.0), 128) == 5
    assert held_blocks(_record(1, False, 16, 0, 0.0, 0.2, "refused"), 128) == 1  # failed: what it asked for


def test_drawings_label_their_axes_and_state_the_finding():
    fig = plot_capacity(lab_capacity(CPU_REPORT), max_num_seqs=128)
    ax = fig.axes[0]
    assert ax.get_xlabel() and ax.get_ylabel() and "6.5×" in ax.get_title()
    records = [_record(0, True, 512, 16, 0.0, 3.0),  # 528 tokens: 5 blocks, answered at 3 s
               _record(1, True, 16, 64, 0.0, 6.0)]  # 80 tokens: 1 block, answered at 6 s
    samples = [replace(MetricsSample.from_text(METRICS.replace("0.013736263736263736", str(u))), t_s=t)
               for t, u in ((0.5, 6 / 728), (4.0, 1 / 728), (7.0, 0.0))]
    fig = plot_kv_usage(samples, records, num_blocks=728, block_size=128, max_model_len=2048)
    ax = fig.axes[0]
    assert ax.get_xlabel() and ax.get_ylabel()
    assert "at most 6 of 728 blocks" in ax.get_title() and "predicted 6" in ax.get_title()


def test_the_kv_usage_drawing_counts_failed_requests_and_survives_when_all_failed():
    failed = _record(1, False, 16, 0, 0.0, 0.2, "APIConnectionError: Connection error.")
    samples = [replace(MetricsSample.from_text(METRICS.replace("0.013736263736263736", str(u))), t_s=t)
               for t, u in ((0.5, 5 / 728), (4.0, 0.0))]
    records = [_record(0, True, 512, 16, 0.0, 3.0), failed]
    title = plot_kv_usage(samples, records, num_blocks=728, block_size=128, max_model_len=2048).axes[0].get_title()
    assert "for 1 requests" in title and "1 of 2 requests failed: APIConnectionError: Connection error. (1)." in title
    ax = plot_kv_usage(samples, [failed], num_blocks=728, block_size=128, max_model_len=2048).axes[0]
    assert "1 of 1 request failed" in ax.get_title() and ax.get_ylim()[1] > 0
