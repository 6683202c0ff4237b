"""A class drawn on paper (helpers.route.class_sim), judged per student (class_report), the policies on paper
(policies), the notebook's predictions and exercises (exercises) and its figures (plots): no server needed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from helpers.load.client import RequestRecord
from helpers.route.class_report import (
    ClassReport,
    StudentView,
    class_report,
    load_class_sim,
    replicas_needed,
    save_class_sim,
    student_views,
)
from helpers.route.class_sim import ClassRun, class_plan
from helpers.route.exercises import (
    grade_round_robin_finders,
    grade_scheme,
    grade_tp_kv_bytes,
    grade_tp_weight_bytes,
    judge_class_guess,
    judge_policy_guess,
)
from helpers.route.plots import class_finding, plot_class, plot_routing, routing_finding
from helpers.route.policies import grouped_placement, prefix_finders, round_robin_placement
from helpers.route.spread import ReplicaShare


def test_the_same_seed_draws_the_same_class_and_another_seed_another():
    assert class_plan(5, seed=3) == class_plan(5, seed=3)
    assert class_plan(5, seed=3).times != class_plan(5, seed=4).times


def test_every_student_sends_their_requests_starting_within_the_start_window():
    plan = class_plan(6, requests_each=4, gap_s=2.0, start_within_s=3.0, seed=1)
    assert plan.num_requests == 24 and sorted(plan.students) == sorted(list(range(6)) * 4)
    assert list(plan.times) == sorted(plan.times)
    firsts = [min(t for t, s in zip(plan.times, plan.students) if s == student) for student in range(6)]
    assert all(0 <= first < 3.0 for first in firsts)


def test_a_students_think_times_average_the_gap_asked_for():
    plan = class_plan(200, requests_each=20, gap_s=5.0, start_within_s=0.0, seed=0)
    spans = [max(t for t, s in zip(plan.times, plan.students) if s == student) for student in range(200)]
    assert sum(spans) / len(spans) / 19 == pytest.approx(5.0, rel=0.05)
    assert "200 students x 20 requests" in plan.describe() and plan.offered_rate > 200 / 5.0 / 2


@pytest.mark.parametrize("bad", [{"num_students": 0}, {"num_students": 2, "gap_s": 0},
                                 {"num_students": 2, "requests_each": 0}])
def test_a_class_without_students_requests_or_think_time_is_refused(bad):
    with pytest.raises(ValueError):
        class_plan(**bad)


def records(latencies, ok=None):
    ok = ok or [True] * len(latencies)
    return [RequestRecord(i, ok=good, e2e_s=s if good else None, ttft_s=0.1 if good else None,
                          output_tokens=4 if good else None, send_s=float(i), done_s=float(i) + (s or 0))
            for i, (s, good) in enumerate(zip(latencies, ok))]


def test_each_student_gets_the_p95_of_their_own_requests_against_the_target():
    views = student_views(records([1.0, 2.0, 6.0, 1.5]), students=(0, 0, 1, 1), target_s=5.0)
    assert [(v.student, v.num_requests, v.num_ok, v.within_target) for v in views] == [(0, 2, 2, True), (1, 2, 2, False)]
    assert views[1].p95_e2e_s == pytest.approx(1.5 + 0.95 * 4.5)


def test_a_student_with_a_failed_request_is_not_within_target_even_if_the_rest_were_fast():
    views = student_views(records([1.0, None], ok=[True, False]), students=(0, 0), target_s=5.0)
    assert views[0].num_ok == 1 and not views[0].within_target


def test_a_report_reads_a_class_run_and_survives_its_results_file(tmp_path):
    plan = class_plan(2, requests_each=2, gap_s=1.0, start_within_s=1.0, seed=0)
    run = SimpleNamespace(records=records([0.5, 0.7, 0.9, 8.0]), wall_s=10.0, started_at="2026-12-02T12:00:00+00:00",
                          summary=SimpleNamespace(num_ok=4, ttft_p50_s=0.1, peak_in_flight=2))
    report = class_report(ClassRun("1 replica", 1, plan, run), target_s=5.0)
    assert report.num_requests == 4 and len(report.views) == 2 and "of 2 students within 5 s" in report.describe()
    path = save_class_sim(tmp_path / "route" / "class_sim.json", [report], machine="CPU: 2 cores", shared=False)
    loaded, about = load_class_sim(path)
    assert loaded == [report] and about["machine"] == "CPU: 2 cores" and "created" in about


def test_the_fewest_replicas_that_kept_everyone_within_target_is_named_or_none():
    good = ClassReport("2", 2, 5.0, "", (StudentView(0, 3, 3, 1.0, True),), 3, 3, 9.0, 0.2, "")
    bad = ClassReport("1", 1, 5.0, "", (StudentView(0, 3, 3, 9.0, False),), 3, 3, 9.0, 0.2, "")
    assert replicas_needed([bad, good]) == 2 and replicas_needed([bad]) is None


def test_round_robin_spreads_each_group_and_cache_aware_as_intended_keeps_it_together():
    groups = [g for g in range(3) for _ in range(4)]
    assert round_robin_placement(12, 2) == [0, 1] * 6
    assert prefix_finders(groups, round_robin_placement(12, 2)) == 6
    assert grouped_placement(groups, 2) == [0] * 4 + [1] * 4 + [0] * 4
    assert prefix_finders(groups, grouped_placement(groups, 2)) == 9


def result(policy, hits, queries, per_replica):
    shares = [ReplicaShare(f"http://127.0.0.1:800{i}", n, queries // len(per_replica), 0, queries // len(per_replica),
                           h) for i, (n, h) in enumerate(zip(per_replica, hits))]
    run = SimpleNamespace(summary=SimpleNamespace(ttft_p50_s=0.3, num_ok=sum(per_replica)))
    return SimpleNamespace(policy=policy, shares=shares, run=run,
                           hit_rate=sum(hits) / queries if queries else None)


def test_a_policy_prediction_is_set_beside_the_measured_hit_rates_without_a_grade_when_missing():
    results = [result("round_robin", [300, 300], 2000, [3, 3]), result("cache_aware", [1200, 0], 2000, [6, 0])]
    assert judge_policy_guess("cache_aware", results).ok is True
    assert judge_policy_guess("round_robin", results).ok is False
    missing = judge_policy_guess(None, results)
    assert missing.ok is None and "round_robin 30% and cache_aware 60%" in missing.message


def test_a_class_prediction_compares_students_within_target():
    one = ClassReport("1 replica", 1, 5.0, "", (StudentView(0, 3, 3, 1.0, True),), 3, 3, 9.0, 0.2, "")
    two = ClassReport("2 replicas + router", 2, 5.0, "", (StudentView(0, 3, 3, 6.0, False),), 3, 3, 9.0, 0.2, "")
    assert judge_class_guess("fewer", one, two).ok is True and judge_class_guess("more", one, two).ok is False
    assert judge_class_guess(None, one, two).ok is None


@pytest.mark.parametrize("typed", ["cache aware", "Cache_Aware", " cache_aware", "cache-aware\n"])
def test_a_policy_prediction_is_read_whatever_its_case_and_spacing(typed):
    results = [result("round_robin", [300, 300], 2000, [3, 3]), result("cache_aware", [1200, 0], 2000, [6, 0])]
    fb = judge_policy_guess(typed, results)
    assert fb.ok is True and "'cache_aware'" in fb.message
    assert judge_policy_guess("Round Robin", results).ok is False


@pytest.mark.parametrize("typed", ["Fewer", " fewer ", "FEWER"])
def test_a_class_prediction_is_read_whatever_its_case_and_spacing(typed):
    one = ClassReport("1 replica", 1, 5.0, "", (StudentView(0, 3, 3, 1.0, True),), 3, 3, 9.0, 0.2, "")
    two = ClassReport("2 replicas + router", 2, 5.0, "", (StudentView(0, 3, 3, 6.0, False),), 3, 3, 9.0, 0.2, "")
    assert judge_class_guess(typed, one, two).ok is True
    assert judge_class_guess("More", one, two).ok is False


def test_a_guess_that_is_not_an_option_is_named_as_such_not_as_no_prediction():
    results = [result("round_robin", [300, 300], 2000, [3, 3]), result("cache_aware", [1200, 0], 2000, [6, 0])]
    one = ClassReport("1 replica", 1, 5.0, "", (StudentView(0, 3, 3, 1.0, True),), 3, 3, 9.0, 0.2, "")
    for fb in (judge_policy_guess("least_loaded", results), judge_policy_guess(3, results),
               judge_class_guess("better", one, one)):
        assert fb.ok is None and "not one of" in fb.message and "no prediction" not in fb.message
    assert "no prediction" in judge_policy_guess(None, results).message
    assert "no prediction" in judge_class_guess(None, one, one).message


def test_the_graded_exercises_accept_the_worked_answers_and_refuse_others():
    assert grade_round_robin_finders(6) and not grade_round_robin_finders(9)
    assert grade_tp_weight_bytes(4_015_130_624) and not grade_tp_weight_bytes(8_030_261_248)
    assert grade_tp_kv_bytes(16_384) and not grade_tp_kv_bytes(65_536)
    assert grade_scheme("data parallel") and not grade_scheme("tensor parallel")
    assert grade_scheme(None).ok is None


def test_the_figures_are_titled_with_their_finding_and_label_their_axes():
    results = [result("round_robin", [300, 300], 2000, [3, 3]), result("cache_aware", [1200, 0], 2000, [6, 0])]
    assert routing_finding(results) == "cache_aware served 60% of prompt tokens from the prefix cache, round_robin 30%"
    fig = plot_routing(results)
    assert [ax.get_ylabel() for ax in fig.axes] == ["requests served", "prompt tokens from prefix cache (%)",
                                                     "time to first token, p50 (s)"]
    reports = [ClassReport("1 replica", 1, 5.0, "", (StudentView(0, 3, 3, 1.0, True),), 3, 3, 9.0, 0.2, ""),
               ClassReport("2 replicas", 2, 5.0, "", (StudentView(0, 3, 2, 6.0, False),), 2, 3, 9.0, 0.2, "")]
    assert class_finding(reports) == "Students within 5 s at their p95, 1 replica: 1 of 1; 2 replicas: 0 of 1"
    assert plot_class(reports).axes[0].get_xlabel() == "setup"


def test_slot_line_reads_the_peak_against_the_slots_and_old_files_still_load():
    from helpers.route.class_report import slot_line

    old = ClassReport("1 replica", 1, 5.0, "", (StudentView(0, 3, 3, 1.0, True),), 3, 3, 9.0, 0.2, "").to_dict()
    old.pop("peak_in_flight")  # files written before the field existed
    report = ClassReport.from_dict(old)
    assert report.peak_in_flight is None and "did not record" in slot_line(report, 8)
    busy = ClassReport.from_dict({**old, "peak_in_flight": 12})
    assert "at least 4 of them were not running" in slot_line(busy, 8)
    assert "none had to wait" in slot_line(busy, 12) and "vLLM's default" in slot_line(busy, None)
