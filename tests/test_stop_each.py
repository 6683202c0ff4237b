"""A Ctrl-C during the stop of one of several servers or routers stops the others at once, then goes through:
helpers.serve.process.stop_each and the four places that stop several (on stubs; no process is started)."""

import pytest

from helpers.route import router as router_module
from helpers.route.replicas import ReplicaSet
from helpers.serve import live, process
from helpers.serve.server import STARTING_GRACE_S
from helpers.serve.together import start_together


class Stub:
    """Stands in for a VLLMServer or a VLLMRouter; ``interrupts``: how many of its stops raise KeyboardInterrupt
    (a Ctrl-C pressed while it waits), after being recorded, as ``process.stop_started`` does once it killed
    the rest."""

    def __init__(self, name, calls, interrupts=0):
        self.name, self.calls, self.interrupts = name, calls, interrupts
        self.device = "cuda"  # start_together then starts them one after the other

    def stop(self, timeout=15.0):
        self.calls.append((self.name, timeout))
        if self.interrupts:
            self.interrupts -= 1
            raise KeyboardInterrupt

    # what start_together calls before the stops
    def check_not_started(self):
        pass

    def check_before_launch(self, say, starting_with_gib=0.0):
        pass

    def launch_on_free_port(self, say):
        pass

    def poll_start(self, say):
        raise KeyboardInterrupt  # the first Ctrl-C, while the first server starts


def _stubs(calls, interrupts=(1, 0, 0)):
    return [Stub(name, calls, n) for name, n in zip("abc", interrupts)]


def test_a_ctrl_c_during_one_stop_stops_the_rest_at_once_and_goes_through():
    calls = []
    with pytest.raises(KeyboardInterrupt):
        process.stop_each(_stubs(calls), timeout=7.0)
    assert calls == [("a", 7.0), ("b", 0.0), ("c", 0.0)]


def test_a_third_ctrl_c_leaves_none_running_either():
    calls = []
    with pytest.raises(KeyboardInterrupt):
        process.stop_each(_stubs(calls, interrupts=(1, 1, 0)))
    assert calls == [("a", 15.0), ("b", 0.0), ("c", 0.0)]


def test_without_a_ctrl_c_each_gets_its_full_grace():
    calls = []
    process.stop_each(_stubs(calls, interrupts=(0, 0, 0)))
    assert calls == [("a", 15.0), ("b", 15.0), ("c", 15.0)]


def test_a_replica_set_stops_every_replica():
    calls = []
    with pytest.raises(KeyboardInterrupt):
        ReplicaSet(_stubs(calls)).stop()
    assert calls == [("a", 15.0), ("b", 0.0), ("c", 0.0)]


def test_an_interrupted_start_together_stops_every_server():
    calls = []
    with pytest.raises(KeyboardInterrupt):
        start_together(_stubs(calls), quiet=True)
    assert calls == [("a", STARTING_GRACE_S), ("b", 0.0), ("c", 0.0)]


@pytest.mark.parametrize("where", ["servers", "routers"])
def test_stopping_all_of_this_kernels_servers_or_routers(where, monkeypatch):
    calls = []
    stubs = _stubs(calls)  # a list for a set: the interrupted stop comes first, whatever the set's order would be
    if where == "servers":
        monkeypatch.setattr(live, "LIVE", stubs)
        stop_all = live.stop_all_servers
    else:
        monkeypatch.setattr(router_module, "_LIVE", stubs)
        stop_all = router_module.stop_all_routers
    with pytest.raises(KeyboardInterrupt):
        stop_all()
    assert calls == [("a", 15.0), ("b", 0.0), ("c", 0.0)]
