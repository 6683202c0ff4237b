"""A simulated class and a routing policy measured against a real CPU replica behind vLLM's real router.

One replica for the module (a small KV pool; 20-60 s to start), a router a test (a second or two). The loads are tiny
(6 requests of 4 output tokens, 3 requests sharing a 512-token system prompt): what is checked is the plumbing the
notebook relies on (arrival times kept, records read per student, each replica's counters read around a policy's
run), not speed.
"""

from __future__ import annotations

import asyncio

import pytest

from helpers.route.class_report import class_report
from helpers.route.class_sim import class_plan, class_workload, run_class, run_class_pinned
from helpers.route.policies import measure_policy
from helpers.route.prefix_workload import grouped_prefix_workload
from helpers.route.replicas import start_replicas
from helpers.route.router import start_router
from tests.real_server import QUICK_START

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]


@pytest.fixture(scope="module")
def replicas():
    with start_replicas(1, max_num_seqs=4, max_model_len=1024, quiet=True, **QUICK_START) as running:
        yield running


def test_a_small_class_through_the_router_is_reported_per_student_from_its_own_records(replicas):
    plan = class_plan(3, requests_each=2, gap_s=1.0, start_within_s=1.0, seed=0)
    lesson = class_workload(replicas[0], plan, prompt_lens=(16,), output_tokens=4)
    with start_router(replicas, "round_robin", quiet=True) as router:
        ran = asyncio.run(asyncio.wait_for(run_class(router, lesson, label="router", num_replicas=1), 180))
    assert not router.is_running()
    for record in ran.run.records:  # open loop: nothing left before its planned arrival
        assert record.ok and record.send_s >= plan.times[record.index] - 0.05
    report = class_report(ran, target_s=60.0)
    print(report.describe())
    assert report.num_ok == 6 and [view.num_requests for view in report.views] == [2, 2, 2]
    assert report.num_within == 3 and all(view.p95_e2e_s < 60 for view in report.views)


def test_a_class_pinned_to_servers_without_a_router_keeps_every_students_records(replicas):
    plan = class_plan(2, requests_each=2, gap_s=0.5, start_within_s=0.5, seed=1)
    lesson = class_workload(replicas[0], plan, prompt_lens=(16,), output_tokens=4)
    ran = asyncio.run(asyncio.wait_for(run_class_pinned(list(replicas), lesson, label="pinned"), 180))
    assert sorted(record.index for record in ran.run.records) == [0, 1, 2, 3]
    report = class_report(ran, target_s=60.0)
    assert report.num_ok == 4 and [view.num_requests for view in report.views] == [2, 2]


def test_a_policy_measured_through_a_real_router_counts_the_replicas_prefix_hits(replicas):
    workload = grouped_prefix_workload(replicas[0], groups=1, per_group=3, system_tokens=512, output_tokens=4)
    result = asyncio.run(asyncio.wait_for(measure_policy(replicas, "cache_aware", workload), 180))
    print(result.describe())
    assert result.requests_per_replica == [3] and result.run.summary.num_ok == 3
    assert result.shares[0].prefix_cache_hits >= 2 * 384  # the later two found at least 3 blocks of 128 each
    assert result.to_dict()["hit_rate"] == result.hit_rate > 0


def test_a_policy_measured_with_requests_in_flight_says_so_and_accounts_for_every_request(replicas):
    workload = grouped_prefix_workload(replicas[0], groups=2, per_group=2, system_tokens=256, output_tokens=4)
    result = asyncio.run(asyncio.wait_for(measure_policy(replicas, "round_robin", workload, concurrency=2), 180))
    assert result.policy == "round_robin, 2 at a time" and result.describe().startswith("round_robin, 2 at a time:")
    assert result.requests_per_replica == [4] and result.run.summary.num_ok == 4
