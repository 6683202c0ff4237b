"""helpers.load.run and helpers.load.workload: what they refuse up front, and the run's overall bound.

A URL or None where the server object belongs is refused in words before anything is sent; a run has a cap on
its requests and an overall time limit, past which what is left is cancelled and kept as failed records that
say so. Against the fake server of tests/test_loadtest.py: seconds, no vLLM.
"""

from __future__ import annotations

import re
import time

import pytest

from helpers.errors import InvalidArgumentError
from helpers.load import run as load_run
from helpers.load.client import Endpoint, RequestSpec
from helpers.load.run import run_load_test
from helpers.load.workload import Workload, build_workload
from tests.test_loadtest import FakeServer, run, toy_workload

URL = "http://127.0.0.1:8000"


@pytest.mark.parametrize("given, says", [(URL, "is the text 'http://127.0.0.1:8000'"), (b"http://x", "is the text"),
                                         (None, "is None, not a server")], ids=repr)
def test_a_workload_for_a_url_or_none_is_refused_in_a_sentence_that_says_what_to_pass(given, says):
    with pytest.raises(InvalidArgumentError, match=f"build_workload's first argument {says}") as refused:
        build_workload(given, num_requests=2)
    message = str(refused.value)
    assert len(message) < 300  # not the course's 60,000 characters of text, sent to a URL to tokenize
    assert "start_server(...) or connect(url)" in message


@pytest.mark.parametrize("given, says", [
    (URL, "pass the server object (start_server(...) or connect(url)), not its URL"),
    (None, "run the cell that starts the server again")], ids=repr)
def test_a_run_against_a_url_or_none_is_refused_before_sending(given, says):
    with pytest.raises(InvalidArgumentError, match=r"^target is .*" + re.escape(says)):
        run(run_load_test(given, toy_workload(2), progress=False))


def test_a_run_of_more_requests_than_the_bound_is_refused_before_sending(monkeypatch):
    monkeypatch.setattr(load_run, "MAX_REQUESTS", 5)
    with FakeServer() as fake, pytest.raises(InvalidArgumentError, match=r"6 requests is more than a run's bound of 5"):
        run(run_load_test(fake.endpoint("ok"), toy_workload(6), progress=False))
    assert fake.peak_in_flight == 0


def test_the_run_limit_cancels_a_hung_load_and_keeps_each_request_as_failed_with_its_reason():
    with FakeServer() as fake:
        began = time.monotonic()
        result = run(run_load_test(fake.endpoint("stall"), toy_workload(3), concurrency=1, timeout_s=60,
                                   time_limit_s=1.0, progress=False))
        took = time.monotonic() - began
    assert took < 10  # not 3 x 60 s of per-request timeouts one after another
    first, *rest = result.records
    assert [r.index for r in result.records] == [0, 1, 2] and not any(r.ok for r in result.records)
    assert first.error == "time limit: no complete answer within the run's time_limit_s=1 s"
    assert all(r.error == "time limit: not sent within the run's time_limit_s=1 s" for r in rest)
    assert result.settings["time_limit_s"] == 1.0 and 1.0 <= result.wall_s < 10
    assert result.summary.num_errors == 3


def test_requests_done_before_the_limit_keep_their_measurements():
    with FakeServer(ttft_s=0.05, gap_s=0.01) as fake:
        result = run(run_load_test(fake.endpoint("ok"), toy_workload(40), concurrency=1, time_limit_s=1.0,
                                   progress=False))
    done = [r for r in result.records if r.ok]
    assert done and len(done) < 40  # some finished, the rest were cut by the limit
    assert all(r.output_tokens == 5 and r.e2e_s > r.ttft_s > 0 for r in done)
    assert all(r.error.startswith("time limit:") for r in result.records if not r.ok)


def test_the_default_limit_is_generous_and_recorded():
    with FakeServer() as fake:
        result = run(run_load_test(fake.endpoint("ok"), toy_workload(2), progress=False))
    assert result.settings["time_limit_s"] == load_run.RUN_TIME_LIMIT_S >= 3600
    assert all(r.ok for r in result.records)


@pytest.mark.parametrize("limit, says", [(0, "time_limit_s must be a positive"), (True, "time_limit_s must be"),
                                         (2.0, "the workload's last request arrives 3 s after the start")], ids=repr)
def test_a_limit_that_cannot_hold_the_workload_is_refused_before_sending(limit, says):
    specs = tuple(RequestSpec(i, "a b c", 3, 2, arrival_s=1.5 * i) for i in range(3))
    with pytest.raises(InvalidArgumentError, match=says):
        run(run_load_test(Endpoint("http://127.0.0.1:9", "x"), Workload(specs, (3,), 2, 0, "t"),
                          time_limit_s=limit, progress=False))
