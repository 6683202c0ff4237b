"""helpers.traffic: a sweep or `vllm bench serve` asked of no server, its URL, or a stopped one is refused in words.

Lab 2's benchmark cell stops its server in a ``finally`` and sets it to None, so running that cell again passes
None; before, that was an AttributeError about ``.url``. Servers here are VLLMServer objects whose process is a
Python that has already exited: no vLLM is started.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest

from helpers.errors import InvalidArgumentError
from helpers.serve.group import GroupEnd
from helpers.serve.server import VLLMServer
from helpers.traffic.sweep import sweep_rates
from helpers.traffic.vllm_bench import bench_at_rate


def ended(*, stopped: bool) -> VLLMServer:
    """A server whose process has exited: by ``server.stop()`` (``stopped``) or on its own (it died)."""
    server = VLLMServer()
    with socket.socket() as probe:  # a free port, closed again: nothing answers there
        probe.bind(("127.0.0.1", 0))
        server.port = probe.getsockname()[1]
    server.model_name = "smollm2"
    server.process = subprocess.Popen([sys.executable, "-c", "pass"])
    server.process.wait()
    if stopped:
        server.last_stop = GroupEnd(seconds=0.1)
    return server


def bench(server, folder):
    return asyncio.run(bench_at_rate(server, 1.0, num_requests=4, folder=folder))


def test_the_benchmark_cell_run_again_after_it_stopped_its_server_says_to_start_it_again(tmp_path):
    for server in (None, ended(stopped=True)):
        with pytest.raises(InvalidArgumentError, match="this cell stopped its server when it finished") as refused:
            bench(server, tmp_path)
        assert "run the cell that starts the server again" in str(refused.value)
        assert "section 2's sweep" in str(refused.value)  # lab 2's cell that starts the server this one uses
    assert not any(tmp_path.iterdir())  # nothing written, no tool started


def test_the_benchmark_refuses_a_url_and_a_dead_server_before_the_tool_starts(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"pass the server object \(start_server\(...\) or connect\(url\)\)"):
        bench("http://127.0.0.1:8000", tmp_path)
    with pytest.raises(RuntimeError, match="server died: exit code 0: run the cell that starts the server again"):
        bench(ended(stopped=False), tmp_path)
    assert not any(tmp_path.iterdir())


def sweep(server):
    return asyncio.run(sweep_rates(server, [1.0], num_requests=3, quiet=True))


def test_a_sweep_of_no_server_a_url_or_a_stopped_one_is_refused_but_a_dead_one_is_still_reported():
    with pytest.raises(InvalidArgumentError, match="server is None, not a server: .*run the cell that starts"):
        sweep(None)
    with pytest.raises(InvalidArgumentError, match="not its URL"):
        sweep("http://127.0.0.1:8000")
    with pytest.raises(InvalidArgumentError, match=r"<VLLMServer stopped .*> was stopped \(server.stop\(\)\)"):
        sweep(ended(stopped=True))
    with pytest.raises(InvalidArgumentError, match="has not been started: call server.start()"):
        sweep(VLLMServer())
    # one that died is the sweep's to report, as before: every rate not run, with the reason
    (point,) = sweep(ended(stopped=False))
    assert point.status == "not run: server died: exit code 0"
