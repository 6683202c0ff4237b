"""helpers.tuning (arithmetic, comparison, report, workloads, plots, exercises): hand-checkable cases, no server needed.

Measurements here are built from synthetic records and /metrics samples, so every expected
number can be worked out by hand. tests/test_tuning_server.py runs the same pieces against
the real vLLM server.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace

import pytest

from helpers.hardware import cpu_supports_fp8_kv
from helpers.lab.table import ResultRow
from helpers.load.client import RequestRecord
from helpers.load.prometheus import MetricsSample
from helpers.load.run import LoadTestRun, ServerFacts
from helpers.tuning.arithmetic import (
    LLAMA_31_8B,
    blocks_per_request,
    count_parameters,
    fit_in_pool,
    ideal_prefix_hits,
    memory_rows,
    server_settings,
)
from helpers.tuning.comparison import (
    NOISE,
    compare_measurements,
    describe_change,
    describe_ratio,
)
from helpers.tuning.exercises import (
    grade_first_lever,
    grade_hits_per_request,
    grade_ideal_hits,
    grade_pool_blocks,
)
from helpers.tuning.measure import checkpoint_parameters, kv_pool_bytes, measure
from helpers.tuning.measurement import CapacityPoint, Measurement
from helpers.tuning.plots import (
    plot_engine,
    plot_kv_capacity,
    plot_lever,
    plot_prefix,
    plot_tradeoff,
)
from helpers.tuning.report import checklist, memory_table
from helpers.tuning.workloads import shared_prefix_workload
from tests.test_hardware import SAPPHIRE, ZEN2, ZEN4
from tests.test_loadtest import WordTokenizer

SMOLLM2 = {"vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
           "num_key_value_heads": 3, "intermediate_size": 1536, "tie_word_embeddings": True}


# ----- synthetic measurements --------------------------------------------------------------------
def sample(t: float, running: int, *, preemptions: int = 0, queries: int = 0, hits: int = 0,
           usage: float = 0.0) -> MetricsSample:
    return MetricsSample(t, running, 0, usage, preemptions, 0, 0, queries, hits)


def measurement(setting: str, *, e2e: float, ttft: float, num: int = 4, out: int = 10, prompt: int = 100,
                kv_tokens: int = 2304, peak: int = 4, preemptions: int = 0, queries: int = 0, hits: int = 0,
                lever: str = "KV pool", failed: int = 0) -> Measurement:
    """`num` requests all sent at t=0, each `out` tokens, first token at `ttft`, last at `e2e`.
    Throughput is num x out / e2e tokens/s (every request ends at e2e). The last `failed`
    requests failed instead: no first or last token, no usage."""
    records = [RequestRecord(i, ok=True, prompt_len=prompt - 30, prompt_tokens=prompt, output_tokens=out,
                             send_s=0.0, ttft_s=ttft, e2e_s=e2e, done_s=e2e) for i in range(num - failed)]
    records += [RequestRecord(i, ok=False, error="APIConnectionError: Connection error.", send_s=0.0, done_s=1.0)
                for i in range(num - failed, num)]
    server = ServerFacts("smollm2", max_num_seqs=64, max_model_len=2048,
                         kv_cache={"num_tokens": kv_tokens, "num_blocks": kv_tokens // 128, "block_size": 128,
                                   "max_model_len": 2048, "max_concurrency": kv_tokens / 2048})
    run = LoadTestRun(f"{lever}: {setting}", {}, server, "CPU: 2 cores", "2026-01-01T00:00:00+00:00", e2e, records)
    samples = [sample(0.0, 0, queries=1000, hits=500), sample(0.5, peak, usage=0.5),
               sample(e2e, 0, preemptions=preemptions, queries=1000 + queries, hits=500 + hits)]
    return Measurement(lever, setting, run, samples, max_num_seqs=64)


# ----- parameters and memory ---------------------------------------------------------------------
def test_parameters_from_the_config_match_the_published_sizes():
    assert count_parameters(SMOLLM2) == 134_515_008  # SmolLM2-135M, tied embeddings
    assert count_parameters(LLAMA_31_8B) == 8_030_261_248  # Llama-3.1-8B, separate output head


def test_untying_the_embeddings_adds_one_vocabulary_matrix():
    untied = {**SMOLLM2, "tie_word_embeddings": False}
    assert count_parameters(untied) - count_parameters(SMOLLM2) == 49152 * 576


def test_checkpoint_parameters_are_read_from_the_safetensors_headers(tmp_path):
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [0, 24]},
              "b": {"dtype": "BF16", "shape": [5], "data_offsets": [24, 34]}}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(34))
    assert checkpoint_parameters(tmp_path) == 17


def test_fp8_weights_double_the_kv_room_of_an_8b_model_on_a_24_gib_gpu():
    bf16, fp8 = memory_rows(LLAMA_31_8B, 24 * 0.92, weights=("bf16", "fp8"), kv_dtypes=("bf16",))
    assert bf16.weight_gib == pytest.approx(2 * fp8.weight_gib)
    assert fp8.kv_tokens > 2 * bf16.kv_tokens
    # Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes per token
    assert bf16.kv_tokens == int(bf16.kv_gib * 2**30 // 131_072)


def test_an_fp8_kv_cache_doubles_the_tokens_of_the_same_room():
    rows = memory_rows(SMOLLM2, 10.0, weights=("bf16",), kv_dtypes=("bf16", "fp8"))
    assert rows[1].kv_tokens == pytest.approx(2 * rows[0].kv_tokens, abs=1)


def test_weights_larger_than_the_budget_leave_no_kv_room():
    (row,) = memory_rows(LLAMA_31_8B, 8.0, weights=("bf16",), kv_dtypes=("bf16",))
    assert row.kv_gib == 0 and row.kv_tokens == 0 and row.requests_at_len == 0
    assert "| bf16 | bf16 | 14.96 | 0.00 | 0 | 0 |" in memory_table([row])


# ----- prefix caching ----------------------------------------------------------------------------
def test_only_full_blocks_of_the_shared_prefix_count_and_the_first_request_finds_nothing():
    assert ideal_prefix_hits(12, 560, 128) == 11 * 512
    assert ideal_prefix_hits(12, 100, 128) == 0  # shorter than one block: nothing to share
    assert ideal_prefix_hits(1, 5000, 16) == 0


def test_shared_prefix_requests_share_one_exact_length_system_prompt_and_differ_in_the_question():
    tokenizer = WordTokenizer()
    workload = shared_prefix_workload(tokenizer, num_requests=5, system_tokens=200, question_tokens=20,
                                      output_tokens=8, run_tag="abcd")
    systems = {spec.system for spec in workload.requests}
    assert len(systems) == 1
    (system,) = systems
    assert system.startswith("(abcd/0) ") and len(tokenizer.encode(system)) == 200
    assert len({spec.prompt for spec in workload.requests}) == 5
    assert all(len(tokenizer.encode(spec.prompt)) == 20 and spec.max_tokens == 8 for spec in workload.requests)


def test_two_shared_prefix_workloads_do_not_share_their_system_prompt():
    first, second = (shared_prefix_workload(WordTokenizer(), num_requests=2, system_tokens=50) for _ in range(2))
    assert first.run_tag != second.run_tag
    assert first.requests[0].system.split()[0] != second.requests[0].system.split()[0]


# ----- one measurement, two measurements ----------------------------------------------------------
def test_a_measurement_counts_only_what_happened_during_its_run():
    m = measurement("on", e2e=2.0, ttft=0.5, preemptions=3, queries=400, hits=300)
    assert (m.num_preemptions, m.prefix_cache_queries, m.prefix_cache_hits) == (3, 400, 300)
    assert m.prefix_hit_rate == 0.75
    assert m.engine.peak_running == 4
    row = m.row()
    assert row["output_tok_per_s"] == 20.0 and row["kv_tokens"] == 2304 and row["prefix_hit_rate"] == 0.75


def test_no_lookups_means_no_hit_rate_rather_than_zero():
    assert measurement("off", e2e=2.0, ttft=0.5).prefix_hit_rate is None


def test_compare_measurements_gives_after_over_before():
    slow, fast = measurement("8", e2e=4.0, ttft=2.0), measurement("64", e2e=2.0, ttft=0.5)
    change = compare_measurements(slow, fast)
    assert change.throughput_ratio == 2.0 and change.e2e_p95_ratio == 0.5 and change.ttft_p50_ratio == 0.25


def test_a_change_smaller_than_the_noise_is_called_noise():
    assert "noise" in describe_ratio(1 + NOISE / 2, "throughput")
    assert "noise" not in describe_ratio(1 + 2 * NOISE, "throughput")
    assert describe_ratio(None, "throughput") == "throughput: not measured"


def test_the_change_sentence_quotes_both_numbers():
    text = describe_change(measurement("8", e2e=4.0, ttft=2.0), measurement("64", e2e=2.0, ttft=0.5))
    assert "8 -> 64" in text and "10 -> 20 output tok/s" in text and "4.0 -> 2.0 s" in text


def test_repeated_runs_whose_ranges_overlap_are_called_noise_and_their_ranges_are_quoted():
    slow, fast = measurement("defaults", e2e=4.0, ttft=2.0), measurement("command", e2e=2.0, ttft=0.5)
    apart = describe_change(replace(slow, runs_tok_s=(9.0, 10.0, 11.0)), replace(fast, runs_tok_s=(19.0, 20.0, 24.0)))
    assert "throughput 2.00x (up 100%)" in apart and "10 -> 20 output tok/s; runs 9-11 -> 19-24)" in apart
    meet = describe_change(replace(slow, runs_tok_s=(9.0, 10.0, 19.5)), replace(fast, runs_tok_s=(19.0, 20.0, 24.0)))
    assert "throughput 2.00x (within the run-to-run noise: the runs' ranges overlap)" in meet
    row = checklist([(replace(slow, runs_tok_s=(9.0, 10.0, 19.5)), replace(fast, runs_tok_s=(19.0, 20.0)))])
    assert "ranges overlap" in row
    once = describe_change(slow, fast)  # a CPU's single runs: no ranges, the fixed band
    assert "runs" not in once and "(up 100%)" in once


def test_the_checklist_has_one_row_per_lever_with_the_measured_numbers():
    pairs = [(measurement("0.05 GiB", e2e=4.0, ttft=2.0, kv_tokens=2304, peak=6, preemptions=2),
              measurement("2 GiB", e2e=2.0, ttft=1.0, kv_tokens=93184, peak=24)),
             (measurement("off", e2e=3.0, ttft=2.0, lever="prefix caching"),
              measurement("on", e2e=2.9, ttft=0.4, lever="prefix caching", queries=100, hits=80))]
    table = checklist(pairs).splitlines()
    assert len(table) == 2 + len(pairs)
    assert "| KV pool | 0.05 GiB -> 2 GiB | 10 -> 20 | 4.0 -> 2.0 |" in table[2]
    assert "2,304 -> 93,184" in table[2] and "| 6 -> 24 | 2 -> 0 |" in table[2]
    assert "| - -> 80% |" in table[3] and "noise" in table[3]  # throughput 1.03x: noise


def test_server_settings_change_one_thing_and_keep_the_base_flags():
    base = {"max_num_seqs": 64, "extra_args": ("--attention-backend", "TRITON_ATTN")}
    changed = server_settings(base, extra_args=("--kv-cache-dtype", "fp8"), kv_cache_space_gib=0.05)
    assert changed == {"max_num_seqs": 64, "kv_cache_space_gib": 0.05,
                       "extra_args": ("--attention-backend", "TRITON_ATTN", "--kv-cache-dtype", "fp8")}
    assert base["extra_args"] == ("--attention-backend", "TRITON_ATTN")  # the base is not modified


def test_requests_fit_in_the_pool_in_arrival_order():
    assert fit_in_pool([3, 3, 3], 8) == 2
    assert fit_in_pool([], 8) == 0
    assert fit_in_pool([1] * 20, 18) == 18


XEON_WITHOUT_BF16 = "model name\t: Intel(R) Xeon(R) Processor @ 2.80GHz\nflags\t\t: avx2 avx512f avx512bw avx512_vnni\n"


@pytest.mark.parametrize(("cpuinfo", "emulated", "supported"), [
    (ZEN4, None, True), (SAPPHIRE, None, True), (XEON_WITHOUT_BF16, None, True), (ZEN2, None, False),
    (SAPPHIRE, "avx2", False)], ids=["zen4", "sapphire-rapids", "xeon-without-bf16", "zen2", "sapphire-as-avx2"])
def test_fp8_kv_support_follows_avx512_or_amx_and_the_avx2_emulation(monkeypatch, cpuinfo, emulated, supported):
    """It decides whether notebook 05 measures the FP8 KV cache, and whether its real-server test runs or is skipped."""
    from helpers import hardware

    if emulated:
        monkeypatch.setenv("VLLM_COURSE_CPU_ISA", emulated)
    else:
        monkeypatch.delenv("VLLM_COURSE_CPU_ISA", raising=False)
    assert cpu_supports_fp8_kv(hardware.detect_cpu(cpuinfo)) is supported


def test_kv_pool_bytes_is_the_start_up_report_not_a_second_reading_of_the_log():
    """The log's "Available KV cache memory" line is parsed once, rounded, by helpers.serve.log; the pool's
    bytes are that report's, and a server without a report has none."""
    from types import SimpleNamespace

    from helpers.serve.log import parse_kv_cache_report

    def unread_log():
        raise AssertionError("kv_pool_bytes read the log again")

    log = ("Available KV cache memory: 127.95 GiB\nGPU KV cache size: 5,962,912 tokens\n"
           "Maximum concurrency for 1,024 tokens per request: 5823.16x\n")
    report = parse_kv_cache_report(log)
    assert kv_pool_bytes(SimpleNamespace(kv_cache=report, log_text=unread_log)) == round(127.95 * 2**30)
    assert kv_pool_bytes(SimpleNamespace(kv_cache=None, log_text=unread_log)) is None


# ----- figures ---------------------------------------------------------------------------------------
def test_capacity_plot_says_the_reports_match_the_prediction():
    points = [CapacityPoint("2 GiB", 2 * 2**30, 23040, 93184, 45.5),
              CapacityPoint("0.05 GiB", 53687091, 23040, 2304, 1.12),
              CapacityPoint("0.05 GiB, FP8 KV", 53687091, 11520, 4608, 2.25)]
    fig = plot_kv_capacity(points, block_size=128, max_model_len=2048)
    assert "match the prediction exactly" in fig._suptitle.get_text()
    assert fig.axes[0].get_ylabel().startswith("KV token slots")


def test_lever_plot_titles_the_measured_change():
    fig = plot_lever([measurement("0.05 GiB", e2e=4.0, ttft=2.0), measurement("2 GiB", e2e=2.0, ttft=1.0)])
    title = fig._suptitle.get_text()
    assert "0.05 GiB -> 2 GiB" in title and "throughput 2.00x" in title
    assert [ax.get_ylabel() for ax in fig.axes] == ["output throughput, tokens/s", "latency per request, s"]


def test_engine_plot_names_each_setting_peak():
    fig = plot_engine([measurement("2 GiB", e2e=2.0, ttft=1.0, peak=24), measurement("0.05 GiB", e2e=4.0, ttft=2.0, peak=6)])
    assert "24 at 2 GiB, 6 at 0.05 GiB" in fig._suptitle.get_text()


def test_engine_plot_names_a_cap_far_above_every_peak_instead_of_drawing_it():
    near, far = measurement("64", e2e=2.0, ttft=1.0, peak=40), measurement("default", e2e=2.0, ttft=1.0, peak=10)
    far.max_num_seqs = 1024  # a GPU's default: drawn, it would flatten peaks of 40 and 10 near zero
    fig = plot_engine([near, far])
    top = fig.axes[0]
    assert [line.get_ydata()[0] for line in top.lines if line.get_linestyle() == "--"] == [64]
    assert top.get_ylim()[1] < 1024
    labels = [text.get_text() for text in top.get_legend().get_texts()]
    assert labels[1].endswith("cap 1,024 (off the plot)") and "off the plot" not in labels[0]


def test_tradeoff_plot_compares_the_fastest_with_the_slowest_setting():
    points = [measurement("8", e2e=4.0, ttft=2.0, lever="max_num_seqs"),
              measurement("64", e2e=2.0, ttft=0.5, lever="max_num_seqs")]
    # the lab's pooled rows: max_num_seqs and a RunSummary (here 80 and 108 tok/s, p95 37 s and 29.6 s)
    reference = [ResultRow(8, "1 run", measurement("8", num=74, out=40, e2e=37.0, ttft=1.0).summary),
                 ResultRow(64, "1 run", measurement("64", num=80, out=40, e2e=29.6, ttft=1.0).summary)]
    fig = plot_tradeoff(points, reference=reference)
    assert fig._suptitle.get_text().startswith("max_num_seqs=64 gave 2.00x the throughput of max_num_seqs=8, at a lower")
    assert "throughput" in fig.axes[0].get_xlabel() and "p95" in fig.axes[0].get_ylabel()
    assert [t.get_text() for t in fig.axes[1].texts] == ["8", "64"]
    assert list(fig.axes[1].lines[0].get_xdata()) == pytest.approx([80.0, 108.1], abs=0.1)


def test_prefix_plot_reports_the_hit_rate_and_ttft():
    off = measurement("off", e2e=3.0, ttft=2.0, lever="prefix caching")
    on = measurement("on", e2e=1.0, ttft=0.25, lever="prefix caching", queries=400, hits=300)
    title = plot_prefix(off, on)._suptitle.get_text()
    assert "75%" in title and "2.00 s -> 0.25 s" in title


# ----- exercise checks -------------------------------------------------------------------------------
def test_grades_accept_the_right_answers_and_refuse_others():
    small = measurement("0.05 GiB", e2e=4.0, ttft=2.0, queries=400, hits=300)
    pool = int(0.1 * 2**30)  # 107,374,182 bytes: 36 whole blocks of 128 x 23,040 bytes (36.4), 18 in float32
    assert grade_pool_blocks(36, pool, 23_040, 128) and not grade_pool_blocks(37, pool, 23_040, 128)
    assert grade_pool_blocks(18, pool, 46_080, 128) and not grade_pool_blocks(4608, pool, 23_040, 128)
    assert grade_pool_blocks(291, pool, 23_040, 16)  # a GPU's blocks of 16
    unknown = grade_pool_blocks(36, pool, None, 128)
    assert unknown.ok is False and "config.json" in unknown.message
    assert grade_hits_per_request(300 / len(small.run.records), small) and not grade_hits_per_request(0.75, small)
    assert grade_ideal_hits(19 * 896, num_requests=20, shared_tokens=1000, block_size=128)
    assert grade_first_lever("prefix caching") and not grade_first_lever("max_num_seqs")
    unanswered = grade_pool_blocks(None, pool, 23_040, 128)
    assert unanswered.ok is None and "not answered yet" in unanswered.message


def test_checks_print_the_verdict_and_return_nothing(capsys):
    from helpers.tuning.exercises import check_first_lever, check_pool_blocks

    assert check_pool_blocks(None, 2**30, 23_040, 128) is None and check_first_lever("prefix caching") is None
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("✏️ blocks in the pool: not answered yet") and out[1].startswith("✅ first lever: correct.")


def test_a_run_shared_with_another_server_is_flagged_in_the_sentence_and_the_checklist():
    quiet, shared = measurement("8", e2e=4.0, ttft=2.0), measurement("64", e2e=2.0, ttft=0.5)
    shared.other_servers = 1
    assert "Another vLLM server shared the machine" in describe_change(quiet, shared)
    assert "Another vLLM server" not in describe_change(quiet, quiet)
    row = checklist([(quiet, shared)]).splitlines()[2]
    assert "| 0 -> 1 |" in row and "machine shared: less reliable" in row


def test_context_points_are_drawn_but_left_out_of_the_tradeoff_title():
    points = [measurement("8", e2e=4.0, ttft=2.0, lever="max_num_seqs"),
              measurement("64", e2e=2.0, ttft=0.5, lever="max_num_seqs")]
    slow = measurement("64, tiny pool", e2e=8.0, ttft=4.0, lever="max_num_seqs")
    fig = plot_tradeoff(points, context=[slow])
    assert "tiny pool" not in fig._suptitle.get_text()
    assert len(fig.axes[0].lines) == 3


# ----- caller input: a clear ValueError, never an assert or a ZeroDivisionError -----------------------
@pytest.mark.parametrize("name, value, message", [
    ("num_requests", 0, r"^num_requests must be a positive integer, got 0\."),
    ("num_requests", 2.5, r"^num_requests must be a positive integer, got 2\.5\."),
    ("system_tokens", 8, r"^system_tokens must be an integer above 8, got 8\. The system prompt's opening words"),
    ("system_tokens", float("inf"), r"^system_tokens must be an integer above 8, got inf\."),
    ("question_tokens", 0, r"^question_tokens must be a positive integer, got 0\."),
    ("output_tokens", -1, r"^output_tokens must be a positive integer, got -1\."),
    ("output_tokens", float("nan"), r"^output_tokens must be a positive integer, got nan\."),
    ("seed", True, r"^seed must be an integer of 0 or more, got True \(a bool\)\."),
])
def test_shared_prefix_workload_refuses_bad_counts_by_name(name, value, message):
    # before: AssertionError: (0, 512) for some (gone under python -O), TypeError or silence for others
    with pytest.raises(ValueError, match=message):
        shared_prefix_workload(WordTokenizer(), **{name: value})


def test_shared_prefix_workload_refuses_a_load_longer_than_the_servers_context():
    tokenizer = WordTokenizer()
    tokenizer.config = type("Config", (), {"max_model_len": 256})()
    with pytest.raises(ValueError, match=r"system_tokens=512 \+ question_tokens=24 \+ output_tokens=8 is 544 tokens, "
                                         r"more than the model's context \(max_model_len=256\)"):
        shared_prefix_workload(tokenizer)


@pytest.mark.parametrize("call, message", [
    (lambda: ideal_prefix_hits(12, 560, 0), r"^block_size must be a positive integer, got 0\."),
    (lambda: ideal_prefix_hits(-1, 560, 128), r"^num_requests must be an integer of 0 or more, got -1\."),
    (lambda: ideal_prefix_hits(12, 560.5, 128), r"^shared_tokens must be an integer of 0 or more, got 560\.5\."),
    (lambda: fit_in_pool([1, 2], -1), r"^num_blocks must be an integer of 0 or more, got -1\."),
    (lambda: fit_in_pool([1, -2], 8), r"^blocks\[1\] must be an integer of 0 or more, got -2\."),
    (lambda: describe_ratio(1.5, "throughput", noise=-0.1), r"^noise must be a finite number of 0 or more"),
    (lambda: describe_ratio(1.5, "throughput", noise=float("nan")), r"^noise must be a finite number of 0 or more"),
    (lambda: memory_rows(LLAMA_31_8B, 0), r"^budget_gib must be a positive, finite number of GiB, got 0\."),
    (lambda: memory_rows(LLAMA_31_8B, float("nan")), r"^budget_gib must be a positive, finite number of GiB, got nan"),
    (lambda: memory_rows(LLAMA_31_8B, float("inf")), r"^budget_gib must be a positive, finite number of GiB, got inf"),
    (lambda: memory_rows(LLAMA_31_8B, 22.0, overhead_gib=-1), r"^overhead_gib must be a finite number of 0 or more"),
    (lambda: memory_rows(LLAMA_31_8B, 22.0, request_len=0), r"^request_len must be a positive integer, got 0\."),
    (lambda: memory_rows(LLAMA_31_8B, 22.0, request_len=2.5), r"^request_len must be a positive integer, got 2\.5\."),
    (lambda: memory_rows(LLAMA_31_8B, 22.0, weights=("fp4",)), r"^weights must be one of 'bf16', 'fp8', 'int4', got 'fp4'"),
    (lambda: memory_rows(LLAMA_31_8B, 22.0, kv_dtypes=("int8",)), r"^kv_dtypes must be one of"),
    (lambda: memory_rows({**LLAMA_31_8B, "max_position_embeddings": 2048}, 22.0, request_len=4096),
     r"^request_len=4096 is 4,096 tokens, more than the model's context \(max_model_len=2,048\)"),
    (lambda: memory_table([], request_len=0), r"^request_len must be a positive integer, got 0\."),
    (lambda: count_parameters({**SMOLLM2, "num_attention_heads": 0}),
     r"^config\['num_attention_heads'\] must be a positive integer, got 0\."),
    (lambda: count_parameters({key: v for key, v in SMOLLM2.items() if key != "hidden_size"}),
     r"^the model config has no hidden_size"),
])
def test_tuning_arithmetic_refuses_impossible_inputs_by_name(call, message):
    # before: ZeroDivisionError (block_size 0, request_len 0, no heads), KeyError ("fp4"), a NaN turned into a
    # "cannot convert float NaN to integer", or a silent answer for a negative count or noise
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("name, value", [("interval_s", 0), ("interval_s", float("nan")), ("timeout_s", -1),
                                         ("timeout_s", float("inf"))])
def test_measure_refuses_bad_seconds_before_touching_the_server(name, value):
    import asyncio

    workload = shared_prefix_workload(WordTokenizer(), num_requests=1, system_tokens=20)
    with pytest.raises(ValueError, match=rf"^{name} must be a positive, finite number of seconds"):
        asyncio.run(measure(object(), workload, lever="x", setting="y", **{name: value}))


def test_blocks_per_request_counts_prompt_and_output_in_whole_blocks_of_successful_requests():
    # 100 prompt + 10 output tokens = 110: 7 blocks of 16, 1 block of 128; failed requests left out
    assert blocks_per_request(failing("a", failed=1, e2e=1.0, ttft=0.5), 16) == [7, 7, 7]
    assert blocks_per_request(measurement("a", e2e=1.0, ttft=0.5), 128) == [1, 1, 1, 1]


def test_blocks_per_request_refuses_a_block_size_of_zero():
    with pytest.raises(ValueError, match=r"^block_size must be a positive integer, got 0\."):
        blocks_per_request(measurement("a", e2e=1.0, ttft=0.5), 0)


# ----- measurements with failed requests -------------------------------------------------------------
def failing(setting: str, *, failed: int, num: int = 4, lever: str = "KV pool", **kwargs) -> Measurement:
    """measurement() with its last `failed` requests failed."""
    return measurement(setting, num=num, lever=lever, failed=failed, **kwargs)


def test_the_change_sentence_survives_a_run_where_every_request_failed_and_counts_them():
    # before: TypeError: unsupported format string passed to NoneType.__format__
    broken, fine = failing("8", failed=4, e2e=4.0, ttft=2.0), measurement("64", e2e=2.0, ttft=0.5)
    text = describe_change(broken, fine)
    assert "p95 latency: not measured (- -> 2.0 s)" in text and "median TTFT: not measured (- -> 0.50 s)" in text
    assert "8: 4 of 4 requests failed: APIConnectionError: Connection error. (4)." in text


def test_the_change_sentence_counts_a_partial_failure():
    text = describe_change(failing("8", failed=1, e2e=4.0, ttft=2.0), measurement("64", e2e=2.0, ttft=0.5))
    assert "8: 1 of 4 requests failed" in text and text.count("requests failed") == 1


def test_the_checklist_counts_failed_requests_in_the_verdict():
    row = checklist([(failing("8", failed=4, e2e=4.0, ttft=2.0), measurement("64", e2e=2.0, ttft=0.5))]).splitlines()[2]
    assert "| - |" in row and "failed requests 4 of 4 -> 0 of 4" in row


def test_the_tradeoff_plot_names_a_setting_without_successful_requests_instead_of_crashing():
    # before: TypeError formatting a None p95, then ZeroDivisionError in the title
    points = [failing("8", failed=4, e2e=4.0, ttft=2.0, lever="max_num_seqs"),
              measurement("64", e2e=2.0, ttft=0.5, lever="max_num_seqs")]
    fig = plot_tradeoff(points, context=[measurement("64, tiny pool", e2e=8.0, ttft=4.0, lever="max_num_seqs")])
    title = fig._suptitle.get_text()
    assert title.startswith("Nothing to compare: no request succeeded at 8")
    assert "8: 4 of 4 requests failed" in title
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "max_num_seqs 8: no successful request (4 failed)" in labels


def test_the_tradeoff_plot_compares_the_settings_that_did_measure_something():
    points = [failing("8", failed=1, e2e=4.0, ttft=2.0, lever="max_num_seqs"),
              measurement("64", e2e=2.0, ttft=0.5, lever="max_num_seqs")]
    title = plot_tradeoff(points)._suptitle.get_text()
    assert title.startswith("max_num_seqs=64 gave") and "8: 1 of 4 requests failed" in title


def test_the_prefix_plot_survives_a_run_without_any_first_token():
    # before: TypeError formatting a None median TTFT (and numpy's warning for the median of nothing)
    off = failing("off", failed=4, e2e=3.0, ttft=2.0, lever="prefix caching")
    on = measurement("on", e2e=1.0, ttft=0.25, lever="prefix caching", queries=400, hits=300)
    fig = plot_prefix(off, on)
    title = fig._suptitle.get_text()
    assert "median TTFT - -> 0.25 s" in title and "off: 4 of 4 requests failed" in title
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0] == "prefix caching off: no successful request"


def test_the_lever_plot_marks_latencies_nobody_measured_and_counts_failures():
    fig = plot_lever([failing("0.05 GiB", failed=4, e2e=4.0, ttft=2.0), measurement("2 GiB", e2e=2.0, ttft=1.0)])
    notes = [t.get_text() for t in fig.axes[1].texts]
    assert notes[:4] == ["n/a"] * 4 and "0.05 GiB: 4 of 4 requests failed" in fig._suptitle.get_text()


def test_the_startup_comparison_names_the_cap_the_notebook_read_or_says_it_was_vllms_default():
    from dataclasses import replace

    from helpers.tuning.startup import compare_startup

    compiled, eager = measurement("compiled", e2e=1.0, ttft=0.1), measurement("eager", e2e=4.0, ttft=0.2)
    compiled.max_num_seqs = 1024  # as notebook 05 sets it from the server's log
    assert compare_startup(compiled, 99.0, eager, 46.0).load.endswith("max_num_seqs=1024")
    compiled.max_num_seqs = None
    compiled.run = replace(compiled.run, server=replace(compiled.run.server, max_num_seqs=None))
    assert compare_startup(compiled, 99.0, eager, 46.0).load.endswith("max_num_seqs: vLLM's default")


def test_the_70b_shapes_bf16_weights_do_not_fit_vllms_default_share_of_one_h200():
    from helpers.tuning.exercises import grade_70b_fits_h200

    verdict = grade_70b_fits_h200(" No")
    assert verdict.ok is True and "131.4 GiB" in verdict.message and "129.2 GiB" in verdict.message
    assert grade_70b_fits_h200("yes").ok is False and grade_70b_fits_h200(None).ok is None
