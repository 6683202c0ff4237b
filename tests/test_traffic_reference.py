"""Lab 2's run beside the recorded H200 sweep (helpers.traffic.reference): the table and the sentence come from
the two sweeps, and a missing reference or a setting that never saturated is said, not invented."""

from __future__ import annotations

from helpers.traffic.rates import RatePoint
from helpers.traffic.reference import RECORDED, beside_reference, ratio_sentence, recorded_sweep


def at(setting, rate, served, ttft=0.3, tpot=80.0):
    sent = [i / rate for i in range(20)]
    latencies = [(ttft + max(rate / served - 1, 0) * s, 2.0, 16) for s in sent]
    return RatePoint(setting, rate, 1.0, 20, num_ok=20, achieved_rate=min(rate, served), sent_s=sent,
                     latencies=latencies, ttft_p50_s=ttft, tpot_p50_ms=tpot)


MINE = [at("max_num_seqs=2", r, 0.8) for r in (0.5, 1.2)] + [at("max_num_seqs=8", r, 1.3, 1.0, 200.0) for r in (0.7, 1.9)]
ABOUT = {"machine": "CPU: 2 cores", "predicted": {"max_num_seqs=2": 0.86, "max_num_seqs=8": 1.21}}


def test_the_table_has_a_row_per_run_and_setting_with_the_lightest_rate_s_latencies():
    theirs = [at("max_num_seqs=8", r, 15.6, 0.02, 4.0) for r in (13.0, 21.8)]
    table = beside_reference(MINE, ABOUT, (theirs, {"machine": "GPU: H200", "vllm": "0.26.0"}))
    rows = [line for line in table.splitlines() if line.startswith(("| yours", "| recorded"))]
    assert rows == ["| yours | max_num_seqs=2 | 0.8 | 0.86 | 0.3 s |",
                    "| yours | max_num_seqs=8 | 1.3 | 1.21 | 1 s |",
                    "| recorded: GPU: H200, vLLM 0.26.0 | max_num_seqs=8 | 15.6 | not recorded | 0.02 s |"]
    assert "TPOT" not in table and "ms |" not in table             # question 2 (TPOT at light load) comes later
    assert "on GPU: H200, a setting never saturated" in table      # one setting recorded: no ratio there


def test_a_setting_that_kept_up_everywhere_gives_a_bound_not_a_number():
    kept = [at("max_num_seqs=2", r, 0.8) for r in (0.5, 1.2)] + [at("max_num_seqs=8", r, 9.0) for r in (0.7, 1.9)]
    sentence = ratio_sentence(kept, ABOUT, MINE, {})
    assert sentence.startswith("Here, a setting never saturated") and "4x the slots served 1.6x" in sentence
    assert "| max_num_seqs=8 | above 1.9 |" in beside_reference(kept, ABOUT, (MINE, {}))


def test_no_recorded_sweep_is_said_and_the_committed_one_loads(tmp_path):
    assert recorded_sweep("smollm2", tmp_path) is None
    assert beside_reference(MINE, ABOUT, None).startswith("No recorded sweep for this model")
    points, about = recorded_sweep("smollm2")                     # results/gpu/lab2/smollm2/sweep.json
    assert RECORDED.name == "lab2" and about["device"] == "cuda" and "H200" in about["machine"]
    assert {p.setting for p in points} == {"max_num_seqs=8", "max_num_seqs=64"} and all(p.ran for p in points)
