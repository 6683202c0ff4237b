"""The test suite's own leak checks (tests/conftest.py), on plain Python processes dressed as a vLLM server: fast,
no vLLM. A stand-in API server (its command line names vLLM's server module, its environment carries this test
session's tag) runs in a session of its own and starts a stand-in engine that retitles itself with setproctitle, as
vLLM's EngineCore does, which wipes the environment /proc shows: the tag is gone from the engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from helpers.paths import course_pythonpath
from helpers.serve import process
from helpers.serve.config import Launch
from tests import conftest

pytest.importorskip("setproctitle")  # a dependency of vLLM, so in the course's venv


ENGINE = """
import os, time
import setproctitle
setproctitle.setproctitle("VLLM::EngineCore")
os.write(1, b"up\\n")
time.sleep(120)
"""
API_SERVER = """
import subprocess, sys, time
engine = subprocess.Popen([sys.executable, "-c", sys.argv[2]], stdout=subprocess.PIPE)
engine.stdout.readline()
print(engine.pid, flush=True)
time.sleep(120)
"""


def start_fake_server() -> tuple[subprocess.Popen, int]:
    """A stand-in API server in a session of its own, and the pid of its retitled engine."""
    leader = subprocess.Popen([sys.executable, "-c", API_SERVER, conftest.API_SERVER_MARK, ENGINE],
                              start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return leader, int(leader.stdout.readline())


def spawn_fake_server(folder: Path) -> tuple[subprocess.Popen, int]:
    """The same stand-in, launched as the course launches a server: through helpers.serve.process.spawn_server
    (which starts it in a session of its own, its output in a log). Only a test marked server may call it."""
    log, temp_dir = folder / "fake-server.log", folder / "fake-server-tmp"
    temp_dir.mkdir()
    leader = process.spawn_server(Launch([sys.executable, "-c", API_SERVER, conftest.API_SERVER_MARK, ENGINE], {}),
                                  log, temp_dir)
    deadline = time.monotonic() + 30
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    return leader, int(log.read_text())


def end(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def pids_of(procs: list[psutil.Process]) -> set[int]:
    return {proc.pid for proc in procs}


def test_an_engine_whose_api_server_died_is_still_found_through_the_session_it_was_seen_in(monkeypatch):
    leader, engine = start_fake_server()
    try:
        # The premise: retitled, the engine carries no tag; only its session ties it to the test session.
        assert psutil.Process(engine).cmdline()[0] == "VLLM::EngineCore"
        assert "VLLM_COURSE_TEST_SESSION" not in psutil.Process(engine).environ()
        assert conftest.session_of(engine) == leader.pid
        assert pids_of(conftest.vllm_processes()) >= {leader.pid, engine}  # the look that records the session
        leader.kill()
        leader.wait()
        assert psutil.Process(engine).is_running()  # orphaned, as an engine whose API server was killed
        assert engine in pids_of(conftest.vllm_processes())
        # The former look: tagged processes and the sessions tagged ones lead now, nothing remembered.
        monkeypatch.setattr(conftest, "SERVER_SESSIONS", {})
        assert engine not in pids_of(conftest.vllm_processes())
    finally:
        end(engine, leader.pid)
        leader.wait()


def test_a_session_is_forgotten_once_empty_and_a_reused_leader_pid_is_not_taken_for_it():
    leader, engine = start_fake_server()
    try:
        assert engine in pids_of(conftest.vllm_processes()) and leader.pid in conftest.SERVER_SESSIONS
    finally:
        end(engine, leader.pid)
        leader.wait()
    assert conftest.wait_until_gone([engine], timeout=10) == []
    conftest.vllm_processes()
    assert leader.pid not in conftest.SERVER_SESSIONS  # empty: its pid may go to another process now
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:  # a session led by a process started after the server recorded under its pid (as after pid reuse)
        born = psutil.Process(stranger.pid).create_time()
        conftest.SERVER_SESSIONS[stranger.pid] = born - 100
        assert stranger.pid not in pids_of(conftest.vllm_processes())
        conftest.SERVER_SESSIONS[stranger.pid] = born  # the same leader: its session's processes are listed
        assert stranger.pid in pids_of(conftest.vllm_processes())
    finally:
        conftest.SERVER_SESSIONS.pop(stranger.pid, None)
        stranger.kill()
        stranger.wait()


def test_a_test_not_marked_server_cannot_launch_a_vllm_server_and_a_marked_one_gets_its_session_recorded(
        tmp_path, request):
    # Harmless even if the refusal failed: "python -c pass", whose command line merely names vLLM's server module.
    launch = Launch([sys.executable, "-c", "pass", conftest.API_SERVER_MARK], {})
    temp_dir = tmp_path / "server-tmp"
    temp_dir.mkdir()
    with pytest.raises(pytest.fail.Exception, match="starts a real vLLM server or router but is not marked server"):
        process.spawn_server(launch, tmp_path / "server.log", temp_dir)
    assert not temp_dir.exists()
    request.node.add_marker(pytest.mark.server)
    temp_dir.mkdir()
    started = process.spawn_server(launch, tmp_path / "server.log", temp_dir)
    assert started.wait(timeout=30) == 0 and started.pid in conftest.SERVER_SESSIONS


INNER_CONFTEST = """
pytest_plugins = ["tests.conftest"]

import tests.conftest

tests.conftest.TEST_WAIT_S = tests.conftest.MODULE_WAIT_S = 1.0
"""
INNER_HELPERS = """
import os, signal
from pathlib import Path
from tests.test_leak_check import spawn_fake_server, start_fake_server

def note(leader, engine):
    with open(Path(__file__).with_name("pids.txt"), "a") as pids:
        pids.write(f"{leader.pid} {engine}\\n")
    return leader, engine

def fake_server():
    return note(*start_fake_server())

def spawned_fake_server(folder):
    return note(*spawn_fake_server(folder))

def kill_api_server_only(leader):
    leader.kill()
    leader.wait()

def stop_whole_server(leader, engine):
    os.kill(engine, signal.SIGKILL)
    kill_api_server_only(leader)
"""
# A server shared by a file's tests: alive while they run, stopped whole at the end. Nothing to report.
INNER_CLEAN = """
import pytest
from inner_helpers import fake_server, stop_whole_server

@pytest.fixture(scope="module")
def server():
    leader, engine = fake_server()
    yield
    stop_whole_server(leader, engine)

@pytest.mark.usefixtures("server", "no_server_left_behind")
def test_first():
    pass

@pytest.mark.usefixtures("server", "no_server_left_behind")
def test_second():
    pass
"""
# A shared server whose fixture ends only the API server: its engine lives on after the file.
INNER_MODULE_LEAK = """
import pytest
from inner_helpers import fake_server, kill_api_server_only

@pytest.fixture(scope="module")
def server():
    leader, engine = fake_server()
    yield
    kill_api_server_only(leader)

@pytest.mark.usefixtures("server", "no_server_left_behind")
def test_uses_the_server():
    pass

@pytest.mark.usefixtures("server", "no_server_left_behind")
def test_uses_it_too():
    pass
"""
# A test that starts its own server, as the course does (spawn_server), and ends only the API server.
INNER_TEST_LEAK = """
import pytest
from inner_helpers import kill_api_server_only, spawned_fake_server

@pytest.mark.server
@pytest.mark.usefixtures("no_server_left_behind")
def test_leaks_an_engine(tmp_path):
    leader, _ = spawned_fake_server(tmp_path)
    kill_api_server_only(leader)

def test_after_it():
    pass
"""


def test_a_leak_is_reported_after_a_files_module_fixtures_and_after_a_test_and_a_clean_file_passes(tmp_path):
    files = {"conftest.py": INNER_CONFTEST, "inner_helpers.py": INNER_HELPERS, "test_a_clean.py": INNER_CLEAN,
             "test_b_module_leak.py": INNER_MODULE_LEAK, "test_c_test_leak.py": INNER_TEST_LEAK,
             "pytest.ini": "[pytest]\nmarkers =\n    server: starts a (stand-in) server\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), course_pythonpath(os.environ)])}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-c",
                               str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    finally:
        for line in (tmp_path / "pids.txt").read_text().splitlines() if (tmp_path / "pids.txt").exists() else []:
            end(*map(int, line.split()))
    summary = [line for line in done.stdout.splitlines() if line.startswith(("PASSED ", "ERROR ", "FAILED "))]
    outcomes = sorted(" ".join(line.split(" - ")[0].split()[:2]) for line in summary)
    assert outcomes == [
        "ERROR test_b_module_leak.py::test_uses_it_too",  # at teardown, after the module's fixture
        "ERROR test_c_test_leak.py::test_leaks_an_engine",  # at teardown, no_server_left_behind
        "PASSED test_a_clean.py::test_first",
        "PASSED test_a_clean.py::test_second",
        "PASSED test_b_module_leak.py::test_uses_it_too",
        "PASSED test_b_module_leak.py::test_uses_the_server",
        "PASSED test_c_test_leak.py::test_after_it",
        "PASSED test_c_test_leak.py::test_leaks_an_engine",
    ], done.stdout[-4000:]
    assert "a vLLM process outlived the tests and fixtures of test_b_module_leak.py" in done.stdout
    assert "VLLM::EngineCore" in done.stdout and "a vLLM process survived the test" in done.stdout
    assert "outlived the tests and fixtures of test_c_test_leak.py" not in done.stdout  # reported once
