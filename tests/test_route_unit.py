"""The route room without a server: every refusal says what to do, and the key never reaches the router's command.

Nothing here starts vLLM or the router: each check fails before a process would be launched.
The real router in front of real replicas: tests/test_route_real.py.
"""

from __future__ import annotations

import socket

import pytest

from helpers.errors import ConfigError, NotEnoughMemoryError, PortInUseError, RouterNotInstalledError
from helpers.load.prometheus import MetricsSample
from helpers.route import router as router_module
from helpers.route.command import POLICIES, build_router_launch, check_policy
from helpers.route.replicas import check_replica_memory, replica_cores, start_replicas
from helpers.route.router import VLLMRouter
from helpers.route.spread import _page, describe_shares, replica_shares
from helpers.serve.config import ServerConfig, build_launch

URL = "http://127.0.0.1:8000"
KEY = "s3cret-classroom-key-123"


def test_a_policy_vllm_router_does_not_have_is_refused_naming_the_ones_it_has():
    with pytest.raises(ConfigError) as error:
        VLLMRouter([URL], policy="least_loaded", model_name="smollm2")
    assert "least_loaded" in str(error.value) and "round_robin, random, cache_aware" in str(error.value)


def test_kv_aware_is_refused_with_the_reason_the_course_cannot_serve_it():
    with pytest.raises(ConfigError, match="KV-cache events over ZMQ"):
        check_policy("kv_aware")


def test_the_offered_policies_are_named_as_vllm_router_names_them():
    from vllm_router.router import policy_from_str  # the installed router's own table

    for name in POLICIES:
        assert policy_from_str(name) is not None


def test_an_empty_replica_list_is_refused_saying_how_to_start_replicas():
    with pytest.raises(ConfigError, match=r"at least one replica.*start_replicas\(2\)"):
        VLLMRouter([], model_name="smollm2")


def test_a_replica_that_is_not_a_url_is_refused():
    with pytest.raises(ConfigError, match="is not a replica URL"):
        VLLMRouter(["127.0.0.1:8000"], model_name="smollm2")


def test_a_router_open_to_the_network_without_a_key_is_refused():
    with pytest.raises(ConfigError, match="expose the router beyond this machine"):
        VLLMRouter([URL], host="0.0.0.0", model_name="smollm2")


def test_replicas_given_as_urls_need_the_model_name():
    with pytest.raises(ConfigError, match="model_name="):
        VLLMRouter([URL])


def test_a_missing_vllm_router_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(router_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RouterNotInstalledError, match=r"pip install vllm-router==0\.1\.17"):
        VLLMRouter([URL], model_name="smollm2").start(quiet=True)


def test_a_port_in_use_is_refused_before_the_router_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        router = VLLMRouter([URL], model_name="smollm2", port=port)
        with pytest.raises(PortInUseError, match=f"Port {port} on 127.0.0.1 is already in use"):
            router.start(quiet=True)
    assert router.process is None


def test_the_key_goes_to_the_router_through_its_environment_never_its_command_line():
    launch = build_router_launch([URL], "cache_aware", host="0.0.0.0", port=30000, metrics_port=30001, api_key=KEY)
    assert launch.env == {"VLLM_COURSE_ROUTER_API_KEY": KEY}
    assert not any(KEY in word for word in launch.argv) and KEY not in repr(launch)
    router = VLLMRouter([URL], model_name="smollm2", api_key=KEY)
    assert KEY not in repr(router) and router.api_key == KEY


def test_two_replicas_on_two_cores_get_one_core_each_and_more_replicas_than_cores_are_refused():
    assert replica_cores(2, [0, 1]) == ["0", "1"]
    assert replica_cores(3, [0, 1, 2, 3, 4, 5, 6]) == ["0-1", "2-3", "4-5"]
    with pytest.raises(ConfigError, match="3 replicas need at least 3 cores"):
        replica_cores(3, [0, 1])


def test_a_replicas_cores_become_vllms_omp_binding():
    launch = build_launch(ServerConfig(port=8000, cpu_cores="1"), device="cpu", model="m", served_name="m")
    assert launch.env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    with pytest.raises(ConfigError, match="cpu_cores is a list of cores"):
        ServerConfig(cpu_cores="one")


def test_more_replicas_than_memory_holds_are_refused_before_any_starts():
    with pytest.raises(NotEnoughMemoryError, match="at most 2 fit"):
        check_replica_memory(3, 2.0, 10.0)
    with pytest.raises(NotEnoughMemoryError, match="replicas need about"):
        start_replicas(2, kv_cache_space_gib=4096, quiet=True)  # this machine's real free memory


def test_kv_pools_larger_than_the_gpu_are_refused_before_anything_launches(monkeypatch):
    from helpers.hardware import GPUInfo
    from helpers.route import replicas as replicas_module
    from helpers.serve import preflight

    # measured on the H200: vLLM's own refusal of a 4 TiB pool came after a 133 s start-up
    monkeypatch.setattr(preflight, "detect_gpus", lambda: [GPUInfo("NVIDIA H200", 143771, (9, 0))])
    monkeypatch.setattr(replicas_module, "choose_device", lambda config: "cuda")
    with pytest.raises(NotEnoughMemoryError, match=r"^2 replicas need about 160 GiB of KV cache \(80 GiB each\)"):
        start_replicas(2, kv_cache_space_gib=80, quiet=True)
    with pytest.raises(NotEnoughMemoryError, match=r"^A 4096 GiB KV cache does not fit in this GPU's 140 GiB"):
        preflight.check_memory(ServerConfig(kv_cache_space_gib=4096), "cuda")
    preflight.check_memory(ServerConfig(kv_cache_space_gib=60), "cuda")  # fits: vLLM decides the rest


def test_replicas_choose_their_own_ports_and_listen_on_loopback_only():
    with pytest.raises(ConfigError, match="leave port unset"):
        start_replicas(2, port=8000)
    with pytest.raises(ConfigError, match="through the router"):
        start_replicas(2, host="0.0.0.0", api_key=KEY)
    with pytest.raises(ConfigError, match="positive integer"):
        start_replicas(0)


def test_the_spread_counts_each_replicas_requests_and_prefix_hits_between_two_scrapes():
    before = [MetricsSample.from_text(_page(3, 100, 0)), MetricsSample.from_text(_page(0, 0, 0))]
    after = [MetricsSample.from_text(_page(9, 3172, 2560)), MetricsSample.from_text(_page(0, 0, 0))]
    busy, idle = replica_shares(["http://a", "http://b"], before, after)
    assert (busy.num_requests, busy.prefix_cache_queries, busy.prefix_cache_hits) == (6, 3072, 2560)
    assert busy.hit_rate == pytest.approx(2560 / 3072) and idle.hit_rate is None
    assert describe_shares([busy, idle]).splitlines()[1] == "http://b: 0 requests (0%), prefix cache 0 of 0 prompt tokens"


class Replica:
    """What the router reads of a running replica: its URL and its key."""

    def __init__(self, url: str, key: str | None) -> None:
        self.url, self.config, self.model_name = url, ServerConfig(api_key=key), "smollm2"


def test_a_router_open_to_the_network_refuses_replicas_that_do_not_demand_its_key():
    for replicas, problem in (([Replica(URL, None)], "has no API key"),
                              ([Replica(URL, "another-key-1234567")], "has a different API key")):
        router = VLLMRouter(replicas, host="0.0.0.0", api_key=KEY)
        with pytest.raises(ConfigError, match=rf"{URL} {problem}, so any key would be let in"):
            router.start(quiet=True)
        assert router.process is None


def test_a_router_open_to_the_network_asks_url_replicas_with_a_wrong_key(monkeypatch):
    from helpers.route import command

    asked = []
    monkeypatch.setattr(command, "_accepts", lambda url, key: asked.append((url, key)) or True)
    router = VLLMRouter([URL], host="0.0.0.0", api_key=KEY, model_name="smollm2")
    with pytest.raises(ConfigError, match=rf"{URL} accepts any key"):
        router.start(quiet=True)
    assert asked[0][0] == f"{URL}/v1/models" and asked[0][1] != KEY


def test_replicas_that_demand_the_key_pass_the_check_and_loopback_needs_none():
    from helpers.route.command import check_replicas_demand_key

    check_replicas_demand_key("0.0.0.0", KEY, [Replica(URL, KEY)])
    check_replicas_demand_key("127.0.0.1", KEY, [Replica(URL, None), URL])


def test_the_probe_tells_a_replica_that_refuses_a_wrong_key_from_one_that_does_not():
    import http.server
    import threading

    from helpers.route.command import _accepts

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # a keyed server on port 1, a keyless one on port 2
            keyed = self.server.server_port == servers[0].server_port
            self.send_response(401 if keyed and self.headers["Authorization"] != f"Bearer {KEY}" else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    servers = [http.server.HTTPServer(("127.0.0.1", 0), Models) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        keyed, keyless = (f"http://127.0.0.1:{server.server_port}/v1/models" for server in servers)
        assert not _accepts(keyed, "wrong") and _accepts(keyed, KEY) and _accepts(keyless, "wrong")
    finally:
        for server in servers:
            server.shutdown()


def test_a_replica_that_cannot_be_reached_stops_a_router_open_to_the_network():
    """Only a 401 (or 403) proves a replica demands the key: a closed port or a server error proves nothing."""
    import http.server
    import socket
    import threading

    from helpers.route.command import check_replicas_demand_key

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(statuses[self.server.server_port])
            self.end_headers()

        def log_message(self, *args):
            pass

    servers = [http.server.HTTPServer(("127.0.0.1", 0), Models) for _ in range(3)]
    refusing, accepting, broken = (f"http://127.0.0.1:{server.server_port}" for server in servers)
    statuses = dict(zip((server.server_port for server in servers), (401, 200, 500)))
    with socket.socket() as probe:  # a port nothing listens on, once this socket closes
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check_replicas_demand_key("0.0.0.0", KEY, [refusing])
        with pytest.raises(ConfigError, match=rf"{accepting} accepts any key"):
            check_replicas_demand_key("0.0.0.0", KEY, [refusing, accepting])
        for url in (closed, broken):
            with pytest.raises(ConfigError, match=rf"cannot reach replica {url}/v1/models to check that it demands "
                                                  r"the key .*start it first, then the router"):
                check_replicas_demand_key("0.0.0.0", KEY, [refusing, url])
        check_replicas_demand_key("127.0.0.1", KEY, [closed])  # loopback asks nothing
    finally:
        for server in servers:
            server.shutdown()


def test_a_router_open_to_the_network_needs_a_classroom_strength_key_and_ipv4():
    with pytest.raises(ConfigError, match="use at least 12: a guessable key"):
        VLLMRouter([URL], host="0.0.0.0", api_key="short", model_name="smollm2")
    with pytest.raises(ConfigError, match="IPv6 addresses are not supported"):
        VLLMRouter([URL], host="::1", model_name="smollm2")


def test_a_router_start_up_timeout_that_is_not_a_finite_number_is_refused():
    from helpers.validate import InvalidArgumentError

    for bad in (float("nan"), float("inf"), "60", 0):
        with pytest.raises(InvalidArgumentError, match="startup_timeout_s"):
            VLLMRouter([URL], model_name="smollm2", startup_timeout_s=bad)


def test_start_replicas_refuses_a_setting_the_server_lacks_with_the_servers_own_words():
    with pytest.raises(ConfigError, match="max_num_seq is not a server setting; the settings are model, port"):
        start_replicas(2, max_num_seq=8, quiet=True)


def test_no_free_router_port_says_what_to_stop_or_pass(monkeypatch):
    from helpers.serve import preflight

    monkeypatch.setattr(preflight, "port_free", lambda host, port, strict: False)
    with pytest.raises(PortInUseError, match=r"Ports 30000-30099 are all in use on 127.0.0.1 .*earlier kernels.*"
                                             r"stop_all_routers\(\).*port=\.\.\."):
        router_module.choose_router_port("127.0.0.1", None)


def test_a_router_log_is_named_as_before_through_the_servers_log_path(tmp_path):
    from helpers.serve.process import new_log_path

    path = new_log_path(tmp_path, 30000, name="vllm-router")
    assert path.parent == tmp_path and path.name.startswith("vllm-router-") and path.name.endswith("-port30000.log")
    assert new_log_path(tmp_path, 8000).name.startswith("vllm-2")  # a server's, unchanged


def test_a_server_and_a_router_choose_ports_alike_each_naming_what_to_stop(monkeypatch):
    from helpers.serve import preflight

    monkeypatch.setattr(preflight, "port_free", lambda host, port, strict: port % 2 == 1)  # odd ports free
    assert router_module.choose_router_port("127.0.0.1", None) == 30001
    assert router_module.choose_router_port("127.0.0.1", None, after=30001) == 30003
    with preflight.reserving({8001}):  # a router's port promised before its replicas start: a server skips it
        assert preflight.choose_port(ServerConfig(), taken={8003}) == 8005
    monkeypatch.setattr(preflight, "port_free", lambda host, port, strict: False)
    with pytest.raises(PortInUseError, match=r"Ports 8000-8099 .*servers from earlier kernels.*stop_all_servers\(\)"):
        preflight.choose_port(ServerConfig())


def test_a_policy_is_not_measured_with_no_request_in_flight():
    import asyncio

    from helpers.route.policies import measure_policy

    with pytest.raises(ValueError, match="concurrency must be a positive integer, got 0"):  # before any router starts
        asyncio.run(measure_policy([], "cache_aware", None, concurrency=0))


def test_the_router_probe_counts_only_trials_whose_long_request_kept_a_replica_busy():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from probe_router_affinity import kept_where_served

    trials = [{"endpoint": "chat", "x_first": [1, 0], "x_again": [1, 0], "long_still_in_flight": True},
              {"endpoint": "chat", "x_first": [1, 0], "x_again": [0, 1], "long_still_in_flight": True},
              {"endpoint": "chat", "x_first": [1, 0], "x_again": [1, 1], "long_still_in_flight": False},
              {"endpoint": "completions", "x_first": [0, 1], "x_again": [0, 1], "long_still_in_flight": True}]
    assert kept_where_served(trials, "chat") == {"kept": 1, "of": 2}
    assert kept_where_served(trials, "completions") == {"kept": 1, "of": 1}


def test_replicas_serve_the_render_endpoints_where_this_vllm_gates_them(tmp_path, monkeypatch):
    from dataclasses import replace

    from helpers.route import replicas as replicas_module

    factories = tmp_path / "entrypoints" / "scale_out" / "factories.py"
    assert not replicas_module.render_gated(tmp_path)  # a vLLM without the scale-out module: nothing to open
    factories.parent.mkdir(parents=True)
    factories.write_text("app.include_router(render_render)\n")  # 0.26: the render routes are always there
    assert not replicas_module.render_gated(tmp_path)
    factories.write_text('enabled = getattr(args, "enable_scale_out", False)\n')  # 0.32: 403 without the flag
    assert replicas_module.render_gated(tmp_path)
    monkeypatch.setattr(replicas_module, "render_gated", lambda: True)
    once = replicas_module.with_render_endpoints(ServerConfig(extra_args=("--seed", "1")))
    assert once.extra_args == ("--seed", "1", "--enable-scale-out")
    assert replicas_module.with_render_endpoints(once).extra_args == once.extra_args  # added once, not twice
    assert "--enable-scale-out" in build_launch(replace(once, port=8000), device="cpu", model="m", served_name="m").argv
    monkeypatch.setattr(replicas_module, "render_gated", lambda: False)
    assert replicas_module.with_render_endpoints(ServerConfig()).extra_args == ()
