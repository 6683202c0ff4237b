"""Servers started ahead (``helpers.serve.ahead``, ``helpers.serve.standby``): two real CPU servers started together, then taken over by
``start_server`` and by ``start_together`` without a second start, put back with ``stand_by``, and not counted as
other servers while they stand by; on a GPU nothing starts ahead; a failed start ahead leaves nothing standing by;
a standing-by server that died is stopped, not handed over; under the tests, a fresh start beside an unused server
started ahead is refused."""

import time

import pytest

from helpers.errors import NotEnoughMemoryError, StartedAheadUnusedError
from helpers.hardware import detect_device, other_vllm_servers
from helpers.serve import ahead, standby
from helpers.serve.server import VLLMServer, start_server
from helpers.serve.together import start_together
from tests.real_server import QUICK_START

pytestmark = pytest.mark.usefixtures("no_server_left_behind")


@pytest.fixture(autouse=True)
def nothing_standing_by():
    standby.STANDING_BY.clear()
    yield
    for server in list(standby.STANDING_BY.values()):
        server.stop()
    standby.STANDING_BY.clear()


@pytest.mark.server
def test_servers_started_ahead_are_taken_over_without_a_second_start(capsys):
    if detect_device() != "cpu":
        pytest.skip("on a GPU nothing starts ahead")
    small, smaller = {"max_num_seqs": 4, **QUICK_START}, {"max_num_seqs": 2, **QUICK_START}
    assert ahead.start_ahead({"small": small, "smaller": smaller}) == ["small", "smaller"]
    pids = standby.standing_by_pids()
    assert len(pids) == 2 and other_vllm_servers(exclude_pids=pids) == other_vllm_servers() - 2
    assert ahead.start_ahead({"small": small}) == ["small"]  # standing by already: nothing starts
    assert "already standing by: small" in capsys.readouterr().out
    began, other = time.monotonic(), None
    server = start_server(**small)
    try:
        assert time.monotonic() - began < 5 and server.process.pid in pids
        assert "started ahead" in capsys.readouterr().out
        reply = server.client().chat.completions.create(
            model=server.model_name, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4)
        assert reply.usage.completion_tokens >= 1
        standby.stand_by(server)  # back for a later cell
        other = VLLMServer(**smaller)
        assert start_together([other], quiet=True) == [other] and other.process.pid in pids
        assert list(standby.STANDING_BY) == [server.requested_config]
        again = start_server(**small, quiet=True)
        assert again.process.pid == server.process.pid and not standby.STANDING_BY
    finally:
        server.stop()
        if other is not None:
            other.stop()


def test_on_a_gpu_nothing_starts_ahead_and_it_says_so_once(monkeypatch, capsys):
    monkeypatch.setattr(ahead, "detect_device", lambda: "cuda")
    monkeypatch.setattr(ahead, "_SAID_GPU", False)
    assert ahead.start_ahead({"a": {"max_num_seqs": 8}}) == []
    assert ahead.start_ahead({"b": {"max_num_seqs": 4}}) == []
    assert capsys.readouterr().out.count("On a GPU each server starts in its own cell") == 1
    assert not standby.STANDING_BY


def test_a_failed_start_ahead_starts_none_and_says_why(monkeypatch, capsys):
    def refuse(servers, **kwargs):
        raise NotEnoughMemoryError("not enough free memory for both")

    monkeypatch.setattr(ahead, "detect_device", lambda: "cpu")
    monkeypatch.setattr(ahead, "start_together", refuse)
    assert ahead.start_ahead({"a": {"max_num_seqs": 8}, "b": {"max_num_seqs": 4}}) == []
    assert ("Not started ahead: a, b (NotEnoughMemoryError: not enough free memory for both); each starts in its "
            "own cell instead.") in capsys.readouterr().out
    assert not standby.STANDING_BY


def test_where_the_memory_holds_two_of_three_the_first_two_start_ahead(monkeypatch, capsys):
    tried = []

    def two_at_most(servers, labels, **kwargs):
        tried.append(labels)
        if len(servers) > 2:
            raise NotEnoughMemoryError("not enough free memory for three")
        return servers

    monkeypatch.setattr(ahead, "detect_device", lambda: "cpu")
    monkeypatch.setattr(ahead, "start_together", two_at_most)
    monkeypatch.setattr(ahead, "forget_stopped", lambda: None)  # these servers were never launched
    settings = {"a": {"max_num_seqs": 8}, "b": {"max_num_seqs": 4}, "c": {"max_num_seqs": 2}}
    assert ahead.start_ahead(settings) == ["a", "b"]
    assert tried == [["a", "b", "c"], ["a", "b"]]
    assert "Not started ahead: c (NotEnoughMemoryError: not enough free memory for three)" in capsys.readouterr().out
    standby.STANDING_BY.clear()


class _Stopped:
    """A server whose processes ended while it stood by."""

    def __init__(self):
        self.stops = 0

    def is_running(self):
        return False

    def stop(self):
        self.stops += 1


def test_a_standing_by_server_that_died_is_stopped_not_handed_over():
    dead = _Stopped()
    wanted = VLLMServer(max_num_seqs=8)
    standby.STANDING_BY[wanted.requested_config] = dead
    assert standby.hand_over(wanted, print) is False
    assert dead.stops == 1 and not standby.STANDING_BY and wanted.process is None
    standby.stand_by(dead)  # a stopped server is not kept either
    assert dead.stops == 2 and not standby.STANDING_BY


class _Running(_Stopped):
    """A server standing by, alive."""

    def is_running(self):
        return True


def test_under_the_tests_a_fresh_start_beside_an_unused_server_started_ahead_is_refused(monkeypatch):
    standby.STANDING_BY[VLLMServer(max_num_seqs=8).requested_config] = _Running()
    fresh = VLLMServer(max_num_seqs=4)
    with pytest.raises(StartedAheadUnusedError, match="max_num_seqs 4 here, 8 ahead"):
        fresh.start(quiet=True)
    with pytest.raises(StartedAheadUnusedError, match="start_ahead entry"):
        start_together([VLLMServer(max_num_seqs=4)], quiet=True)
    assert fresh.process is None and len(standby.STANDING_BY) == 1  # refused before any launch
    monkeypatch.delenv(standby.AUDIT_VARIABLE)
    standby.check_none_passed_over([fresh])  # a learner may start what they like


def test_a_call_that_claims_every_server_standing_by_may_start_others_beside_them():
    standby.STANDING_BY[VLLMServer(max_num_seqs=8).requested_config] = _Running()
    standby.check_none_passed_over([VLLMServer(max_num_seqs=8), VLLMServer(max_num_seqs=4)])  # 8 claimed: no refusal
    with pytest.raises(StartedAheadUnusedError, match="put back by stand_by"):
        standby.check_none_passed_over([VLLMServer(max_num_seqs=4)])
