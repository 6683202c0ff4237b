"""helpers.lab.client_exercise: the learner's asyncio client, run and held against the course's load tester."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from helpers.lab.client_exercise import THROUGHPUT_TOLERANCE, compare_clients, run_learner_client
from tests.real_server import server_fixture

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]


def solution():
    spec = importlib.util.spec_from_file_location("lab_client", ROOT / "docs" / "solutions" / "lab_client.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.send_one


async def serialized(client, model, prompt, max_tokens, _lock=asyncio.Lock()):
    """A client that waits for each request before sending the next: the mistake the check must catch."""
    async with _lock:
        return await solution()(client, model, prompt, max_tokens)


async def wrong_clock(client, model, prompt, max_tokens):
    record = await solution()(client, model, prompt, max_tokens)
    return {**record, "first_token": record["end"]}  # the last token taken for the first


async def raises(client, model, prompt, max_tokens):
    raise RuntimeError("not written yet")


server = server_fixture(max_num_seqs=4)


SHAPE = dict(num_requests=4, output_tokens=8)


@pytest.fixture(scope="module")
def course(server):
    from helpers.load.run import run_load_test
    from helpers.load.workload import build_workload

    return asyncio.run(run_load_test(server, build_workload(server, **SHAPE), progress=False, timeout_s=300))


def runs(server, course, send_one):
    from helpers.load.workload import build_workload

    return asyncio.run(run_learner_client(send_one, server, build_workload(server, **SHAPE))), course


def test_the_solution_is_accounted_for_and_measures_what_the_course_does(server, course):
    learner, course = runs(server, course, solution())
    check = compare_clients(learner, course)
    # held against its own run (vLLM's metrics, the harness's clock), not the course's: it passes under load too
    assert check.passed, (check.describe(), [r.error for r in learner.run.records])
    assert learner.server_tokens == sum(r.output_tokens for r in learner.run.records)
    assert all(0 < r.ttft_s < r.e2e_s for r in learner.run.records)
    assert "Beside the course's tester" in check.describe()


def test_a_client_that_sends_one_request_at_a_time_does_not_pass(server, course):
    check = compare_clients(*runs(server, course, serialized))
    # named from the records' times, not from a throughput that a prefill-bound CPU barely changes
    assert check.accounted and check.one_at_a_time and not check.passed
    assert "one after another" in check.describe()


def test_a_client_that_times_the_first_token_after_the_stream_does_not_pass(server, course):
    check = compare_clients(*runs(server, course, wrong_clock))
    assert check.first_is_last and not check.passed
    assert "inside the loop over the stream" in check.describe()


async def ends_at_the_first_token(client, model, prompt, max_tokens):
    record = await solution()(client, model, prompt, max_tokens)
    return {**record, "end": record["first_token"] + 1e-3}  # the clock stopped a moment after the first token


def test_a_client_that_stops_its_clock_early_does_not_pass(server):
    from helpers.load.workload import build_workload

    # 32 tokens: enough decode after the first token that stopping there shortens the run well past the tolerance
    workload = build_workload(server, num_requests=4, output_tokens=32)
    check = compare_clients(asyncio.run(run_learner_client(ends_at_the_first_token, server, workload)))
    assert check.accounted and check.throughput_ratio > 1 + THROUGHPUT_TOLERANCE and not check.passed
    assert check.describe().startswith("Not yet")


async def ttft_from_the_response(client, model, prompt, max_tokens):
    record = await solution()(client, model, prompt, max_tokens)
    return {**record, "first_token": record["send"] + 0.1 * (record["first_token"] - record["send"])}


def test_a_client_whose_first_token_time_is_not_the_first_token_does_not_pass(server, course):
    check = compare_clients(*runs(server, course, ttft_from_the_response))
    assert check.ttft_mean_s < check.server_ttft_mean_s and not check.ttft_agrees and not check.passed


def test_a_client_that_raises_becomes_failed_records_that_say_why(server, course):
    learner, course = runs(server, course, raises)
    assert all(not r.ok and "send_one raised RuntimeError: not written yet" in r.error for r in learner.run.records)
    assert compare_clients(learner, course).describe().startswith("Not yet")
