"""scripts/bench_vs_vllm.py and scripts/vllm_bench_results.py, no server: the reader on every captured
`vllm bench serve` result file in tests/data/bench_serve/ (at least one of vLLM 0.26 and one of 0.32 are required),
pooling and the verdict, the refusal of an odd number of pairs, and the gate that holds vLLM's tool until its turn."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from helpers.load.summary import summarize

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # the script imports its sibling vllm_bench_results the same way

from vllm_bench_results import (  # noqa: E402
    OURS, THEIRS, TimedRun, check_pairs, compare, pair_order, pooled, read_bench_result, report_text,
    run_from_bench, verdict_lines)

CAPTURES = sorted((ROOT / "tests" / "data" / "bench_serve").glob("*.json"))
SHARED_026 = ROOT.parent / "shared" / "captures" / "vllm-0.26-bench-serve-result.json"  # cut to 20 requests
HOW_TO_CAPTURE = ("`python scripts/bench_vs_vllm.py --capture tests/data/bench_serve/` on that vLLM writes one (on the "
                  "H200: STEPS=bench-vs-vllm scripts/gpu_reference_run.sh)")


def version_of(path: Path) -> str | None:
    """"0.26" of "vllm-0.26.0-gpu.json"."""
    found = re.match(r"vllm-(\d+\.\d+)\.\d+-", path.name)
    return found.group(1) if found else None


def test_captures_of_both_result_layouts_are_there():
    versions = {version_of(path) for path in CAPTURES}
    missing = [version for version in ("0.26", "0.32") if version not in versions]
    assert not missing, (f"tests/data/bench_serve/ has no `vllm bench serve` result file of vLLM {', '.join(missing)} "
                         f"(it has {[p.name for p in CAPTURES]}): {HOW_TO_CAPTURE}.")


@pytest.mark.parametrize("path", CAPTURES, ids=[path.name for path in CAPTURES])
def test_every_captured_file_reads_as_records_that_agree_with_vllms_own_numbers(path):
    result = json.loads(path.read_text())
    read = read_bench_result(result)
    assert read.layout.startswith(version_of(path)), f"{path.name} is named for one vLLM and laid out as another"
    assert ("latencies" in result) == (version_of(path) != "0.26")
    records = read.records
    assert len(records) == result["num_prompts"] == result["completed"] + result["failed"]
    assert sum(r.ok for r in records) == result["completed"]
    assert sum(r.output_tokens for r in records if r.ok) == result["total_output_tokens"]
    s = summarize(records)
    # TTFT and TPOT the way vLLM computes them (numpy percentiles over the successful requests)
    assert 1000 * s.ttft_p50_s == pytest.approx(result["median_ttft_ms"], rel=1e-9)
    assert 1000 * s.ttft_p95_s == pytest.approx(result["p95_ttft_ms"], rel=1e-9)
    if "latencies" in result:
        assert 1000 * s.e2e_p50_s == pytest.approx(result["median_e2el_ms"], rel=1e-9)
        assert s.tpot_mean_ms == pytest.approx(result["mean_tpot_ms"], rel=1e-9)
        assert read.sources["e2e"] == "latencies, per request"
    else:  # 0.26's own e2el also counted the usage chunk after the last token: a little longer than ttft + itls
        assert 0.95 * result["median_e2el_ms"] <= 1000 * s.e2e_p50_s <= result["median_e2el_ms"] + 1e-6
        assert read.sources["e2e"] == "ttfts + sum(itls), per request"
    # vLLM's duration runs from before the first send to after the last reply; ours from the first send to the
    # last token, so a little shorter
    assert 1.0 <= s.output_tok_per_s / result["output_throughput"] <= 1.10


@pytest.mark.skipif(not SHARED_026.exists(), reason="no shared/ folder beside the checkout")
def test_the_shared_026_capture_reads_without_latencies():
    result = json.loads(SHARED_026.read_text())  # cut to 20 requests: its aggregates are of all 200
    read = read_bench_result(result)
    assert read.layout == "0.26 layout (end-to-end = TTFT + ITLs)" and "latencies" not in result
    assert len(read.records) == len(result["ttfts"]) == 20
    first = read.records[0]
    assert first.e2e_s == pytest.approx(result["ttfts"][0] + sum(result["itls"][0]))
    assert first.itl_s == result["itls"][0] and first.output_tokens == result["output_lens"][0]


def test_a_026_file_with_a_failed_request():
    read = read_bench_result({"start_times": [10.0, 10.5], "ttfts": [0.5, 0.0], "itls": [[0.25, 0.25], []],
                              "output_lens": [3, 0], "errors": ["", "Bad Request"], "input_lens": [40, 41]})
    ok, failed = read.records
    assert (ok.ok, ok.send_s, ok.ttft_s, ok.e2e_s, ok.prompt_tokens) == (True, 0.0, 0.5, 1.0, 40)
    assert (failed.ok, failed.error, failed.ttft_s, failed.e2e_s, failed.send_s) == (False, "Bad Request", None,
                                                                                      None, 0.5)
    assert summarize(read.records).num_errors == 1


def test_a_file_saved_without_per_request_details_falls_back_to_vllms_aggregates():
    result = {"duration": 10.0, "completed": 20, "failed": 0, "total_output_tokens": 1000, "output_throughput": 100.0,
              "median_ttft_ms": 250.0, "p95_ttft_ms": 400.0, "median_e2el_ms": 9000.0, "mean_tpot_ms": 30.0}
    assert read_bench_result(result).records is None
    run = run_from_bench(0, True, result)
    assert (run.output_tok_per_s, run.ttft_p50_ms, run.wall_s, run.output_tokens, run.e2e_p50_s) == (
        100.0, 250.0, 10.0, 1000, 9.0)
    assert run.sources["ttft p50"] == "median_ttft_ms (aggregate)" and run.ttfts_ms == []


def test_per_request_lists_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="differ in length: start_times 2, ttfts 1"):
        read_bench_result({"start_times": [0, 1], "ttfts": [0.1], "itls": [[], []], "output_lens": [1, 1],
                           "errors": ["", ""]})


@pytest.mark.parametrize("pairs, message", [(3, "must be even, got 3"), (5, "must be even, got 5"),
                                            (2, "at least 4, got 2"), (0, "at least 4"), (-4, "at least 4")])
def test_odd_or_too_few_pairs_are_refused(pairs, message):
    with pytest.raises(ValueError, match=message):
        check_pairs(pairs)


def test_even_pairs_let_each_tool_go_first_equally_often():
    assert check_pairs(4) == 4 and check_pairs(6) == 6
    firsts = [pair_order(pair)[0] for pair in range(4)]
    assert firsts == [OURS, THEIRS, OURS, THEIRS]


def test_the_script_refuses_an_odd_number_of_pairs_before_starting_anything(capsys):
    spec = importlib.util.spec_from_file_location("bench_vs_vllm_under_test", ROOT / "scripts" / "bench_vs_vllm.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with pytest.raises(SystemExit) as stopped:
        script.main(["--pairs", "3", "--out", "/nonexistent/never-written"])
    assert stopped.value.code == 2
    assert "--pairs must be even, got 3" in capsys.readouterr().err


def runs_of(ours_rates, theirs_rates, ours_ttft=100.0, theirs_ttft=100.0):
    """Two tools' runs, alternating who goes first, 10 s each."""
    runs = []
    for pair, (mine, theirs) in enumerate(zip(ours_rates, theirs_rates)):
        for position, tool in enumerate(pair_order(pair)):
            rate, ttft = (mine, ours_ttft) if tool == OURS else (theirs, theirs_ttft)
            runs.append(TimedRun(tool, pair, position == 0, 10.0, int(rate * 10), rate, ttft,
                                 ttfts_ms=[ttft - 10, ttft, ttft + 10]))
    return runs


def test_pooling_adds_tokens_and_seconds_and_takes_the_p50_of_every_request():
    ours = pooled([r for r in runs_of([100, 120, 110, 130], [100] * 4) if r.tool == OURS])
    assert ours["runs"] == 4 and ours["output_tok_per_s"] == pytest.approx(115.0)
    assert ours["output_tok_per_s_range"] == [100, 130]
    assert (ours["ttft_p50_ms"], ours["ttft_p50_ms_range"], ours["ttft_pooled_as"]) == (
        100.0, [100.0, 100.0], "p50 of every request's TTFT")


@pytest.mark.parametrize("ours, theirs_ttft, tok_within, ttft_within", [
    (101.9, 100.0, True, True), (102.1, 100.0, False, True), (98.1, 95.3, True, True), (100.0, 94.0, True, False)])
def test_the_verdict_holds_output_tok_s_to_2_percent_and_ttft_p50_to_5(ours, theirs_ttft, tok_within, ttft_within):
    comparison = compare(runs_of([ours] * 4, [100.0] * 4, theirs_ttft=theirs_ttft))
    verdicts = comparison["verdicts"]
    assert verdicts["output_tok_per_s"]["ratio"] == pytest.approx(ours / 100)
    assert (verdicts["output_tok_per_s"]["within"], verdicts["ttft_p50_ms"]["within"]) == (tok_within, ttft_within)
    lines = verdict_lines(comparison)
    assert lines[0].startswith(f"output tok/s: ours / vLLM's {ours / 100:.3f} (pairs ")
    assert lines[0].endswith(": PASS" if tok_within else ": FAIL")
    assert "the 5% target" in lines[1]


def test_pairs_that_disagree_more_than_the_target_are_called_noisy_and_the_order_effect_is_measured():
    runs = runs_of([90, 110, 90, 110], [100] * 4)  # pooled ratio 1.0, pairs 0.9 and 1.1
    comparison = compare(runs)
    tok = comparison["verdicts"]["output_tok_per_s"]
    assert tok["ratio"] == pytest.approx(1.0) and tok["within"] and tok["pairs_disagree"]
    assert "the pairs disagree" in verdict_lines(comparison)[0]
    slow_first = [TimedRun(r.tool, r.pair, r.first, 10.0, 1200 if r.first else 1500, 120.0 if r.first else 150.0,
                           100.0) for r in runs]
    assert compare(slow_first)["second_over_first"] == pytest.approx(1.25)


def test_the_text_report_names_the_machine_the_runs_and_where_vllms_numbers_came_from():
    runs = runs_of([100] * 4, [100] * 4)
    for run in runs:
        if run.tool == THEIRS:
            run.sources = {"e2e": "ttfts + sum(itls), per request"}
    text = report_text(runs, compare(runs), {"max_num_seqs": 64, "pairs": 4, "requests": 640, "output_tokens": 256,
                                             "warm_requests": 64, "warm_output_tokens": 32},
                       {"machine": "1 x NVIDIA H200 (139 GiB)", "server": {"vllm_version": "0.26.0", "device": "cuda",
                                                                          "model": "smollm2"}, "wall_s": 200.0})
    assert text.startswith("bench_vs_vllm: 1 x NVIDIA H200 (139 GiB); vLLM 0.26.0 (cuda)")
    assert "| course client | 4 | 100 | 100-100 | 100 | 100-100 | 0 |" in text
    assert text.rstrip().endswith("came from: e2e: ttfts + sum(itls), per request")


@pytest.mark.parametrize("argv, message", [
    (["--request-rate", "0"], "rate must be a positive"), (["--burstiness", "-1"], "burstiness must be a positive"),
    (["--goodput", "ttft:-5"], "ttft_ms must be a finite number of 0 or more")])
def test_the_script_refuses_a_bad_rate_burstiness_or_slo_before_starting_anything(capsys, argv, message):
    spec = importlib.util.spec_from_file_location("bench_vs_vllm_open_loop", ROOT / "scripts" / "bench_vs_vllm.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with pytest.raises(SystemExit) as stopped:
        script.main([*argv, "--out", "/nonexistent/never-written"])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_an_open_loop_run_counts_its_goodput_and_the_report_says_how_requests_were_sent():
    from helpers.load.client import RequestRecord
    from helpers.load.slo import SLO
    from vllm_bench_results import with_goodput

    records = [RequestRecord(index=i, ok=True, prompt_len=10, output_tokens=11, send_s=i, ttft_s=ttft, e2e_s=ttft + 1.0,
                             done_s=i + ttft + 1.0) for i, ttft in enumerate((0.2, 0.4, 0.9, 0.3))]
    run = with_goodput(TimedRun(OURS, 0, True, 8.0, 44, 5.5, 350.0), records, SLO.parse("ttft:500 tpot:200"))
    assert run.goodput_per_s == pytest.approx(3 / 8.0)  # 0.9 s is over the TTFT limit; TPOT is 100 ms for all
    assert with_goodput(TimedRun(OURS, 0, True, 8.0, 44, 5.5, 350.0), records, None).goodput_per_s is None
    runs = runs_of([100] * 4, [100] * 4)
    settings = {"max_num_seqs": 64, "pairs": 4, "requests": 640, "output_tokens": 256, "warm_requests": 64,
                "warm_output_tokens": 32, "request_rate": 20.0, "burstiness": 0.5, "goodput": "ttft:500 tpot:50"}
    text = report_text(runs, compare(runs), settings, {"machine": "m", "server": {}, "wall_s": 1.0})
    assert "output tokens sent at 20 req/s, burstiness 0.5, SLO ttft:500 tpot:50, a warm-up" in text


FAKE_CHILD = """import json, sys
print({gate!r}, flush=True)
if sys.stdin.readline().strip() == "go":
    json.dump({{"went": True}}, open(sys.argv[1], "w"))
"""


def test_the_gate_holds_vllms_tool_until_go_and_ends_it_if_never_let_through(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_vs_vllm_gate", ROOT / "scripts" / "bench_vs_vllm.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    class Server:
        url, model_name = "http://127.0.0.1:9", "smollm2"

    class Workload:
        requests, output_tokens = (), 4

    child = tmp_path / "child.py"
    child.write_text(FAKE_CHILD.format(gate=script.GATE))
    for name, let_through in (("went", True), ("held", False)):
        bench = script.GatedBench(Server(), Workload(), tmp_path, name, "/tokenizer")
        bench.argv = [sys.executable, str(child), str(tmp_path / f"{name}.json")]
        with bench:
            assert bench.process.poll() is None  # waiting at the gate
            if let_through:
                assert bench.run() == {"went": True}
        assert bench.process.poll() is not None  # ended either way
    assert not (tmp_path / "held.json").exists()
