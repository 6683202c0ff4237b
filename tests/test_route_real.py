"""vLLM's router in front of two real CPU replicas on 127.0.0.1: requests reach both, a shared prefix stays on
one under the cache-aware policy (which refuses, before it starts, a replica that does not render prompts for it:
one plain server of that test's own, on a vLLM that gates the endpoint), the classroom key guards the router, and
a replica killed mid-run costs the requests it held, no more.

One pair of keyed replicas for the whole module (one core each on a 2-core machine, a small KV pool; 50-60 s
each to start on an AVX2 CPU), several routers (a second or two each) in front of them. The kill comes last:
it ends one of the pair. Loads are small (4-16 requests of a few output tokens).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import secrets
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from helpers.errors import ConfigError, ServerStartError
from helpers.load.run import run_load_test
from helpers.load.workload import build_workload
from helpers.route import replicas as replicas_module
from helpers.route.prefix_workload import grouped_prefix_workload
from helpers.route.render_check import NO_ROUTE, render_status
from helpers.route.replicas import ReplicaSet, render_gated, start_replicas
from helpers.route.router import VLLMRouter, start_router
from helpers.route.spread import describe_shares, replica_shares, scrape_replicas
from helpers.serve.classroom import SharedServerError, connect
from helpers.serve.server import start_server
from tests.conftest import finished_requests
from tests.real_server import QUICK_START

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]
KEY = "route-" + secrets.token_urlsafe(12)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def replicas():
    with start_replicas(2, max_num_seqs=4, max_model_len=1024, api_key=KEY, **QUICK_START,
                        quiet=True) as running:
        yield running


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def shares_during(replicas, load):
    """Run ``load`` (a coroutine) and return its result with each replica's share of it."""
    before = scrape_replicas(replicas)
    result = asyncio.run(asyncio.wait_for(load, 240))
    return result, replica_shares(replicas.urls, before, scrape_replicas(replicas))


def test_a_router_whose_replica_does_not_answer_fails_in_seconds_with_its_log_tail():
    began = time.monotonic()
    router = VLLMRouter([f"http://127.0.0.1:{free_port()}"], "round_robin", model_name="smollm2", startup_timeout_s=6)
    with pytest.raises(ServerStartError) as error:
        router.start(quiet=True)
    assert error.value.cause == "replica not healthy" and "to become healthy" in error.value.log_tail
    assert "check that every replica is running" in str(error.value)
    assert time.monotonic() - began < 20 and not router.is_running()


def test_round_robin_sends_requests_to_both_replicas_and_the_key_guards_the_router(replicas):
    with start_router(replicas, "round_robin", quiet=True) as router:
        assert router.startup_seconds < 30 and router.url.startswith("http://127.0.0.1:")
        workload = build_workload(replicas[0], num_requests=4, prompt_lens=[16], output_tokens=4)
        run, shares = shares_during(replicas, run_load_test(router, workload, concurrency=1, progress=False))
        assert run.summary.num_ok == 4
        print(f"router ready in {router.startup_seconds:.1f} s; round robin: {describe_shares(shares)}")
        assert [share.num_requests for share in shares] == [2, 2]
        for key in (None, "wrong-key-of-some-length"):  # the router checks the key itself, on every route
            for path in ("/v1/models", "/list_workers"):
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(urllib.request.Request(router.url + path, headers=headers), timeout=10)
                assert refused.value.code == 401
        process = psutil.Process(router.process.pid)
        assert KEY not in " ".join(process.cmdline()) + router.log_text()  # the environment only, as for vLLM
    assert not router.is_running()


def test_cache_aware_keeps_a_group_sharing_a_system_prompt_on_one_replica(replicas):
    with start_router(replicas, "cache_aware", quiet=True) as router:
        workload = grouped_prefix_workload(replicas[0], groups=1, per_group=4, system_tokens=512, output_tokens=4)
        run, shares = shares_during(replicas, run_load_test(router, workload, concurrency=1, progress=False))
    assert run.summary.num_ok == 4
    print(f"cache aware: {describe_shares(shares)}")
    busy = max(shares, key=lambda share: share.num_requests)
    assert sorted(share.num_requests for share in shares) == [0, 4]
    assert busy.prefix_cache_hits >= 3 * 384  # the later three found at least 3 of the prompt's 128-token blocks


def test_a_cache_aware_router_refuses_a_replica_that_does_not_render_prompts(replicas):
    # start_replicas' pair renders: with --enable-scale-out where this vLLM gates the endpoint
    assert render_status(replicas[0].url, replicas[0].model_name, KEY) == 200
    if not render_gated():
        pytest.skip("this vLLM serves the render endpoints on every server (0.26): no replica refuses")
    with start_server(max_num_seqs=2, max_model_len=512, quiet=True, **QUICK_START) as plain:
        assert render_status(plain.url, plain.model_name, None) == 403
        assert render_status(plain.url, plain.model_name, None, path="/v1/no-such-endpoint") == NO_ROUTE
        began = time.monotonic()
        with pytest.raises(ConfigError, match="--enable-scale-out") as refused:
            start_router([plain], "cache_aware", quiet=True)
        assert plain.url in str(refused.value) and time.monotonic() - began < 5
        with start_router([plain], "round_robin", quiet=True) as router:  # no other policy renders: not checked
            assert router.is_running()


def test_the_classroom_script_puts_a_keyed_router_in_front_of_replicas(replicas, monkeypatch, capsys):
    """The script's own replica start is replaced by the module's running pair (a minute saved); its router,
    key, output and stop are real."""
    spec = importlib.util.spec_from_file_location("classroom_server_replicas", ROOT / "scripts" / "classroom_server.py")
    classroom_server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(classroom_server)
    asked = []

    serving = threading.Event()

    class Borrowed(ReplicaSet):
        def stop(self) -> None:  # the module's replicas outlive the script
            pass

        def is_running(self) -> list[bool]:  # first asked by the script's serving loop, after all it prints
            serving.set()
            return super().is_running()

    def borrow(n, config, **settings):
        asked.append((n, config.host, config.port, config.api_key == KEY))
        return Borrowed(list(replicas))

    monkeypatch.setattr(replicas_module, "start_replicas", borrow)
    monkeypatch.setenv("VLLM_COURSE_API_KEY", KEY)
    port, seen, main_running = free_port(), {}, threading.Event()

    def student() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "server" not in seen:
            try:
                seen["server"] = connect(f"http://127.0.0.1:{port}", KEY, timeout_s=5)
            except SharedServerError:
                time.sleep(0.5)
        try:
            connect(f"http://127.0.0.1:{port}", "not-the-class-key", timeout_s=5)
        except SharedServerError as error:
            seen["refused"] = str(error)
        if "server" in seen:
            reply = seen["server"].client().chat.completions.create(
                model=seen["server"].model_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
            seen["reply"] = reply.choices[0].message.content
        # CI caught a student done before the router's start had returned: the stop then cut the script short
        if serving.wait(timeout=120) and main_running.is_set():
            os.kill(os.getpid(), signal.SIGTERM)  # the script turns SIGTERM into Ctrl-C

    previous = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=student, daemon=True)
    try:
        main_running.set()
        thread.start()
        code = classroom_server.main(["--replicas", "2", "--port", str(port), "--max-num-seqs", "4",
                                      "--kv-cache-space-gib", "0.25", "--max-model-len", "1024",
                                      "--policy", "round_robin"])
        main_running.clear()
    finally:
        signal.signal(signal.SIGTERM, previous)
    thread.join(timeout=30)
    out = capsys.readouterr()
    assert code == 0, out
    assert asked == [(2, "127.0.0.1", None, True)]
    assert f"classroom server ready: http://127.0.0.1:{port} serves 'smollm2'" in out.out
    assert "vllm-router (round_robin) in front of 2 replicas" in out.out  # --policy reached the router
    assert "refused the API key (HTTP 401)" in seen["refused"] and seen["reply"] is not None
    assert KEY not in out.out + out.err
    assert all(replicas.is_running())


def test_a_replica_killed_mid_run_costs_its_requests_and_the_router_sends_the_rest_to_the_other(replicas):
    with start_router(replicas, "round_robin", quiet=True) as router:
        victim, survivor = replicas[1], replicas[0]
        target = finished_requests(victim) + 2
        killed = []

        def kill_when_busy() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and finished_requests(victim) < target:
                time.sleep(0.1)
            os.kill(victim.process.pid, signal.SIGKILL)
            killed.append(time.monotonic())

        workload = build_workload(survivor, num_requests=12, prompt_lens=[64], output_tokens=16)
        threading.Thread(target=kill_when_busy, daemon=True).start()
        run = asyncio.run(asyncio.wait_for(run_load_test(router, workload, concurrency=4, progress=False,
                                                          timeout_s=120), 240))
        assert killed, "the replica was not killed"
        print(f"replica killed mid-run: {run.summary.num_ok} ok, {run.summary.num_errors} failed of 12; "
              f"{run.wall_s:.1f} s in all")
        assert len(run.records) == 12 and run.summary.num_ok >= 2 and run.summary.num_errors >= 1
        assert all(record.error for record in run.records if not record.ok)
        # the next load goes to the survivor only, and all of it is served
        served_before = finished_requests(survivor)
        after = asyncio.run(run_load_test(router, build_workload(survivor, num_requests=4, prompt_lens=[16],
                                                                  output_tokens=4), progress=False, timeout_s=120))
        assert after.summary.num_ok == 4 and finished_requests(survivor) - served_before == 4
        assert router.is_running() and not victim.is_running() and survivor.is_running()
