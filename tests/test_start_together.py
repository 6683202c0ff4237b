"""Several servers started together: both ready on ports of their own, each answering; the memory of all of them
checked before any launch; an interrupted start leaves none behind. Real CPU servers (a GPU starts them one after
the other, the path ``start()`` takes; ``helpers.serve.together``)."""

import psutil
import pytest

from helpers.errors import NotEnoughMemoryError
from helpers.hardware import detect_device
from helpers.serve import live
from helpers.serve.preflight import SERVER_RSS_GIB
from helpers.serve.server import VLLMServer
from helpers.serve.together import start_together, starts_at_once
from tests.real_server import QUICK_START

pytestmark = pytest.mark.usefixtures("no_server_left_behind")


@pytest.mark.server
def test_two_servers_start_together_on_ports_of_their_own_and_both_answer(capsys):
    servers = [VLLMServer(max_num_seqs=n, **QUICK_START) for n in (2, 4)]
    try:
        start_together(servers, labels=["slots 2", "slots 4"])
        assert [s.is_running() for s in servers] == [True, True]
        assert servers[0].port != servers[1].port
        for server in servers:
            reply = server.client().chat.completions.create(
                model=server.model_name, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4)
            assert reply.usage.completion_tokens >= 1
            assert server.startup_timeline[-1][1] == "ready" and server.startup_seconds > 0
        printed = capsys.readouterr().out
        assert "slots 2: ready in" in printed and "slots 4: ready in" in printed
        if servers[0].device == "cpu":  # launched together: the second launched before the first was ready
            first_ready = servers[0].startup_timeline[-1][0] + servers[0]._launched
            assert servers[1]._launched < first_ready
    finally:
        for server in servers:
            server.stop()


def test_servers_that_fit_one_at_a_time_but_not_together_are_refused_before_any_launch():
    free_gib = psutil.virtual_memory().available / 2**30
    if detect_device() != "cpu" or free_gib < 5:
        pytest.skip("the CPU memory check, on a CPU with room for one server of at least 0.25 GiB of pool")
    each = round(max(0.25, 0.6 * free_gib - SERVER_RSS_GIB), 2)  # one fits, two do not
    servers = [VLLMServer(device="cpu", kv_cache_space_gib=each) for _ in range(2)]
    before = set(live.LIVE)
    with pytest.raises(NotEnoughMemoryError, match="beside .* GiB for the servers starting with it"):
        start_together(servers, quiet=True)
    assert set(live.LIVE) == before and all(s.process is None for s in servers)


def test_one_label_per_server():
    with pytest.raises(ValueError, match="one label per server"):
        start_together([VLLMServer(), VLLMServer()], labels=["only one"])


def test_servers_not_yet_launched_are_judged_by_the_device_they_will_choose():
    # notebook 06 says how its replicas will start before they are launched; it once said "one after the other"
    # on a CPU, because a server learns its device only in its checks before launch
    servers = [VLLMServer(max_num_seqs=2) for _ in range(2)]
    assert all(server.device is None for server in servers)
    assert starts_at_once(servers) is (detect_device() == "cpu")


@pytest.mark.server
def test_an_interrupted_start_together_leaves_no_server_behind(monkeypatch):
    looks = {"n": 0}
    original = VLLMServer.poll_start

    def interrupted(self, say):
        looks["n"] += 1
        if looks["n"] == 6:  # launched, not ready: Ctrl-C in the cell
            raise KeyboardInterrupt
        return original(self, say)

    monkeypatch.setattr(VLLMServer, "poll_start", interrupted)
    servers = [VLLMServer(max_num_seqs=2, **QUICK_START) for _ in range(2)]
    with pytest.raises(KeyboardInterrupt):
        start_together(servers, quiet=True)
    # a CPU launches both at once; a GPU launches the second only once the first is ready
    launched = servers if starts_at_once(servers) else servers[:1]
    assert all(s.process is not None for s in launched)
    assert not any(s.is_running() for s in servers)
    assert not any(s in live.LIVE for s in servers)


@pytest.mark.server
def test_a_second_start_is_refused_and_leaves_the_running_server_running():
    server = VLLMServer(max_num_seqs=2, **QUICK_START)
    with server:
        for again in (server.start, lambda: start_together([server], quiet=True)):
            with pytest.raises(RuntimeError, match="already started"):
                again()
            assert server.is_running()
