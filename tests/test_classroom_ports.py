"""The classroom script's router and its replicas never want the same port: the router's port is chosen and
checked before the replicas start, and the replicas keep off it. Nothing here starts vLLM (tests/conftest.py
fails a test not marked server that reaches a vLLM launch)."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from helpers.errors import CourseError
from helpers.paths import COURSE_ROOT
from helpers.route import replicas as replicas_module
from helpers.serve import preflight
from helpers.serve.classroom import API_KEY_ENV
from helpers.serve.config import ServerConfig

pytestmark = pytest.mark.usefixtures("no_server_left_behind")


def _script():
    spec = importlib.util.spec_from_file_location("classroom_server", COURSE_ROOT / "scripts" / "classroom_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_reserved_port_is_given_to_no_server():
    first = preflight.choose_port(ServerConfig())  # the port a replica would take now, from 8000 up
    with preflight.reserving({first}):
        assert preflight.choose_port(ServerConfig()) != first
    assert preflight.choose_port(ServerConfig()) == first  # released with the block


def test_an_explicit_port_is_not_affected_by_a_reservation():
    # A reservation steers only servers that choose their port; one told its port gets it (if free).
    port = preflight.choose_port(ServerConfig())
    with preflight.reserving({port}):
        assert preflight.choose_port(ServerConfig(port=port)) == port


def test_the_router_port_in_use_is_refused_before_any_replica_starts(monkeypatch, capsys):
    def no_replicas(*args, **kwargs):
        raise AssertionError("the replicas started before the router's port was checked")

    monkeypatch.setattr(replicas_module, "start_replicas", no_replicas)
    monkeypatch.setenv(API_KEY_ENV, "classroom-key-for-tests")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert _script().main(["--replicas", "2", "--port", str(port)]) == 1
    assert f"Port {port} on 127.0.0.1 is already in use" in capsys.readouterr().err


def test_the_classroom_script_asks_the_replicas_to_keep_off_its_port(monkeypatch, capsys):
    # What the script passes; the test below shows start_replicas then keeps off that port.
    seen = {}

    def record(n, config, **kwargs):
        seen.update(n=n, port=config.port, host=config.host, **kwargs)
        raise CourseError("stopped here: the test starts no replica")

    monkeypatch.setattr(replicas_module, "start_replicas", record)
    monkeypatch.setenv(API_KEY_ENV, "classroom-key-for-tests")
    router_port = preflight.choose_port(ServerConfig())  # free now: the port a first replica would have taken
    assert _script().main(["--replicas", "2", "--port", str(router_port)]) == 1
    assert seen == {"n": 2, "port": None, "host": "127.0.0.1", "avoid_ports": {router_port}}
    assert "stopped here" in capsys.readouterr().err


def test_the_replicas_are_kept_off_the_routers_port(monkeypatch):
    # --port 8000 --replicas N: without the reservation replica 1 took 127.0.0.1:8000 and the router then failed.
    chosen = []

    def record_ports(servers, **kwargs):
        # The port each replica's launch would choose (launch_on_free_port: none another of them holds), no vLLM.
        for server in servers:
            chosen.append(preflight.choose_port(server.config, taken=set(chosen)))
        return servers

    # The device only decides each replica's share (CPU cores and memory, or GPU memory), not its port: a GPU keeps
    # this test off this machine's free memory and core count.
    monkeypatch.setattr(replicas_module, "choose_device", lambda config: "cuda")
    monkeypatch.setattr(replicas_module, "start_together", record_ports)
    router_port = preflight.choose_port(ServerConfig())  # free now: the port a first replica would have taken
    replicas = replicas_module.start_replicas(2, avoid_ports={router_port}, quiet=True)
    assert len(replicas) == 2 and len(chosen) == 2 and len(set(chosen)) == 2
    assert router_port not in chosen, f"a replica would take the router's port {router_port}: {chosen}"
    assert preflight.choose_port(ServerConfig()) == router_port  # the reservation ends with the start
