"""helpers.lab.client_exercise without a server: a learner's record of the wrong type is that record's error.

The learner's send_one may return anything; a value that is not a number (``time.perf_counter`` without its
parentheses, a time or a count as text) must fail that one request with words that say what to fix, and the check
goes on with the others. Nothing listens on the target: /metrics is unreadable, so the records stand alone.
"""

from __future__ import annotations

import asyncio
import socket
import time
from types import SimpleNamespace

import pytest

from helpers.lab.client_exercise import compare_clients, run_learner_client
from helpers.load.client import RequestSpec
from helpers.load.workload import Workload

MAX_TOKENS = 4


def nowhere() -> SimpleNamespace:
    with socket.socket() as probe:  # a free port, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    return SimpleNamespace(url=url, base_url=f"{url}/v1", model_name="m", api_key="k")


def learner(spoil: dict[int, dict]):
    """A send_one that times its request right, except that request ``i`` gets ``spoil[i]`` over its record."""

    async def send_one(client, model, prompt, max_tokens):
        send = time.perf_counter()
        await asyncio.sleep(0.01)
        first = time.perf_counter()
        await asyncio.sleep(0.01)
        record = {"send": send, "first_token": first, "end": time.perf_counter(), "tokens": max_tokens, "error": None}
        index = int(prompt.split()[-1])
        return {**record, **spoil.get(index, {})}

    return send_one


def check(spoil: dict[int, dict], requests: int = 3):
    workload = Workload(tuple(RequestSpec(i, f"request {i}", 2, MAX_TOKENS) for i in range(requests)),
                        (2,), MAX_TOKENS, 0, "t")
    return asyncio.run(run_learner_client(learner(spoil), nowhere(), workload, timeout_s=30)).run.records


@pytest.mark.parametrize("key", ["send", "first_token", "end"])
def test_a_clock_function_instead_of_its_time_fails_that_request_and_says_call_it(key):
    records = check({1: {key: time.perf_counter}})
    assert not records[1].ok
    assert records[1].error.startswith(f"`{key}` is a function, not a number: call time.perf_counter()")
    assert records[0].ok and records[2].ok  # the others are still checked


@pytest.mark.parametrize("value", ["12.5", [1.0], True], ids=repr)
def test_a_time_that_is_not_a_number_fails_that_request_and_names_what_it_is(value):
    records = check({0: {"end": value}})
    assert not records[0].ok and records[0].error.startswith(f"`end` is a {type(value).__name__}")
    assert "not a number" in records[0].error
    assert records[0].e2e_s is None and records[0].done_s is None  # nothing computed from it
    assert records[1].ok and records[2].ok


@pytest.mark.parametrize("tokens", [str(MAX_TOKENS), float(MAX_TOKENS), True], ids=repr)
def test_a_token_count_that_is_not_an_int_is_named_not_read_as_a_different_count(tokens):
    records = check({2: {"tokens": tokens}})
    assert not records[2].ok
    assert records[2].error.startswith(f"`tokens` is a {type(tokens).__name__}") and "not an int" in records[2].error
    assert "the record says" not in records[2].error  # not "asked for 4 tokens, the record says 4"
    assert records[2].output_tokens is None  # kept out of the sums


def test_the_check_of_a_run_with_a_malformed_record_reads_not_yet():
    records_run = asyncio.run(run_learner_client(
        learner({0: {"end": time.perf_counter}}), nowhere(),
        Workload(tuple(RequestSpec(i, f"request {i}", 2, MAX_TOKENS) for i in range(2)), (2,), MAX_TOKENS, 0, "t"),
        timeout_s=30))
    described = compare_clients(records_run).describe()
    assert described.startswith("Not yet") and "look at the errors" in described



def test_not_yet_names_the_failed_records_reasons_counted():
    workload = Workload(tuple(RequestSpec(i, f"request {i}", 2, MAX_TOKENS) for i in range(4)), (2,), MAX_TOKENS, 0,
                        "t")
    spoil = {0: {"tokens": 2}, 1: {"tokens": 2}, 2: {"end": time.perf_counter}}
    learner_run = asyncio.run(run_learner_client(learner(spoil), nowhere(), workload, timeout_s=30))
    described = compare_clients(learner_run).describe()
    assert described.startswith("Not yet") and "look at the errors" in described
    assert f"3 of 4 requests failed: asked for {MAX_TOKENS} tokens, the record says 2 (fewer: did the request pass " \
           "extra_body={'ignore_eos': True}, so the model cannot stop early?) (2)" in described
    assert "`end` is a function, not a number" in described and "(1)" in described
    assert "small.learner.run.records" in described  # where to read every record's error


def test_more_tokens_than_asked_is_an_error_without_the_ignore_eos_hint():
    records = check({0: {"tokens": MAX_TOKENS + 2}, 1: {"tokens": MAX_TOKENS - 2}})
    assert records[0].error == f"asked for {MAX_TOKENS} tokens, the record says {MAX_TOKENS + 2}"  # not "fewer"
    assert "fewer" in records[1].error and "ignore_eos" in records[1].error
    assert records[2].ok


def test_the_learners_run_is_stamped_in_utc_with_the_machine_it_ran_on():
    workload = Workload((RequestSpec(0, "request 0", 2, MAX_TOKENS),), (2,), MAX_TOKENS, 0, "t")
    run = asyncio.run(run_learner_client(learner({}), nowhere(), workload, timeout_s=30)).run
    assert run.started_at.endswith("+00:00")  # ISO 8601, UTC, as LoadTestRun documents
    assert run.hardware and run.cpu_cores
