"""Lab 2's question 1 when a setting never saturated, and the `vllm bench serve` run's record: pure, no server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from helpers.hardware import describe_machine
from helpers.load.client import RequestRecord
from helpers.traffic.exercises import grade_slot_ratio, slot_ratio_unmeasured
from helpers.traffic.rates import MeasuredSaturation
from helpers.traffic.vllm_bench import bench_run

NAME = "a slot of the larger batch against one of the smaller"


def found(low_estimate: float | None, high_estimate: float | None) -> dict[str, MeasuredSaturation]:
    return {"max_num_seqs=2": MeasuredSaturation("max_num_seqs=2", 0.857, 1.285 if low_estimate else None,
                                                 low_estimate),
            "max_num_seqs=8": MeasuredSaturation("max_num_seqs=8", 2.64, 3.96 if high_estimate else None,
                                                 high_estimate)}


def test_both_settings_saturated_grades_the_per_slot_ratio():
    right = (1.31 / 8) / (0.78 / 2)
    assert grade_slot_ratio(right, found(0.78, 1.31), (2, 8), name=NAME, rel_tol=0.02).ok is True
    assert grade_slot_ratio(1.31 / 0.78, found(0.78, 1.31), (2, 8), name=NAME, rel_tol=0.02).ok is False
    assert grade_slot_ratio(None, found(0.78, 1.31), (2, 8), name=NAME).ok is None


@pytest.mark.parametrize("answer", [None, 0.42, "0.42"])
def test_a_setting_that_kept_up_at_every_rate_is_named_with_the_knob_that_would_overload_it(answer):
    verdict = grade_slot_ratio(answer, found(0.78, None), (2, 8), name=NAME, rel_tol=0.02)
    assert verdict.ok is None  # neither right nor wrong: this run cannot say
    assert "Could not check" not in verdict.message and "TypeError" not in verdict.message
    assert verdict.message.startswith(f"{NAME}: this run cannot check it: max_num_seqs=8 kept up at every rate "
                                      "offered (up to 2.64 req/s)")
    assert "raise the last of RATE_FRACTIONS" in verdict.message and "run the lab again from section 1" in verdict.message


def test_every_setting_without_a_rate_is_named_and_one_missing_from_the_sweep_too():
    both = slot_ratio_unmeasured(found(None, None), (8, 2))
    assert "max_num_seqs=8 kept up" in both and "max_num_seqs=2 kept up" in both
    missing = slot_ratio_unmeasured({"max_num_seqs=8": found(0.78, 1.31)["max_num_seqs=8"]}, (8, 2))
    assert missing.startswith("no rate of max_num_seqs=2 was measured")
    assert slot_ratio_unmeasured(found(0.78, 1.31), (8, 2)) is None


def test_the_tools_run_is_described_like_the_course_own_runs_machine_and_utc_start():
    local = timezone(timedelta(hours=-5))
    records = [RequestRecord(0, ok=True, done_s=1.5), RequestRecord(1, ok=True, done_s=2.25)]
    run = bench_run(records, 2.0, 1.0, {}, datetime(2026, 12, 3, 4, 30, 5, tzinfo=local))
    assert run.started_at == "2026-12-03T09:30:05+00:00"  # ISO 8601, UTC, as LoadTestRun documents it
    assert run.hardware == describe_machine() != ""
    assert run.wall_s == 2.25 and run.settings == {"request_rate": 2.0, "burstiness": 1.0}
