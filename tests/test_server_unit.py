"""A server is one unit, for real: killing any one of its processes ends the rest within 5 s
and says what died; stop() returns only once every process is gone, with what it took; the
server's temporary files and shared memory go with it. One CPU server per case."""

import os
import signal
import time

import pytest

from tests.conftest import wait_until_gone
from tests.real_server import QUICK_START
from helpers.serve import group
from helpers.serve.server import running_servers, start_server

pytestmark = pytest.mark.usefixtures("no_server_left_behind")


def _names(server) -> dict[int, str]:
    return {proc.pid: group.name_of(proc) for proc in group.members(server.process.pid)}


@pytest.mark.server
@pytest.mark.parametrize("victim", ["api_server", "VLLM::EngineCore", "resource_tracker"])
def test_killing_any_one_process_ends_the_whole_server_within_5_s_and_says_what_died(victim):
    server = start_server(max_num_seqs=4, quiet=True, **QUICK_START)
    try:
        names = _names(server)
        assert set(names.values()) >= {"api_server", "VLLM::EngineCore", "resource_tracker"}
        temp_dir = server._temp_dir
        if server.device == "cpu":  # vLLM's file store (a GPU server rendezvous over TCP): here, not in /tmp
            assert any(name.startswith("vllm_dist_") for name in os.listdir(temp_dir))
        shared = group.shared_memory_files(group.members(server.process.pid))
        if server.device == "cpu":  # the API server's multiprocessing semaphores; a GPU server's vary
            assert shared, "no shared memory found: this test would check nothing"
        (pid,) = [p for p, name in names.items() if name == victim]
        os.kill(pid, signal.SIGKILL)
        assert wait_until_gone(list(names), timeout=5) == [], f"killing {victim} left part of the server running"
        assert not server.is_running()
        assert server not in running_servers()
        deadline = time.monotonic() + 5
        while server.death_note is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the watchdog writes its note once the rest is gone
        # Others may have followed it before the watchdog looked: the note names every one missing.
        assert server.death_note is not None and f"{victim} (pid {pid})" in server.death_note
        assert "died" in repr(server)
        deadline = time.monotonic() + 5
        while temp_dir.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not temp_dir.exists(), "the server's temporary folder outlived it"
        assert [path for path in shared if os.path.exists(path)] == [], "shared memory outlived the server"
    finally:
        server.stop()


@pytest.mark.server
def test_stop_returns_once_every_process_is_gone_and_says_how_long_it_took():
    server = start_server(max_num_seqs=4, quiet=True, **QUICK_START)
    names = _names(server)
    temp_dir = server._temp_dir
    ended = server.stop()
    assert sorted(ended.ended) == sorted(names.values()) and ended.left == []
    assert [pid for pid in names if _alive(pid)] == [], "stop() returned before the last process was gone"
    assert 0 < ended.seconds < 30 and "process(es) in" in str(ended)
    assert server.last_stop is ended and not temp_dir.exists()
    assert server.stop() is None  # a second stop has nothing left to do


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_launch_that_cannot_start_leaves_no_temporary_folder(monkeypatch):  # starts nothing: Popen fails
    import subprocess
    import types

    import helpers.serve.process as process
    from helpers.serve.server import VLLMServer

    made = []
    real_new_temp_dir = process.new_temp_dir
    monkeypatch.setattr(process, "new_temp_dir", lambda port: made.append(real_new_temp_dir(port)) or made[-1])

    def cannot_start(*_, **__):
        raise FileNotFoundError("no such interpreter")

    monkeypatch.setattr(process, "subprocess", types.SimpleNamespace(
        Popen=cannot_start, DEVNULL=subprocess.DEVNULL, STDOUT=subprocess.STDOUT))
    with pytest.raises(FileNotFoundError):
        VLLMServer(max_num_seqs=2).start(quiet=True)
    assert made and not made[0].exists()
