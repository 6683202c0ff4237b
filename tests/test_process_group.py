"""Ending a server's session and the watchdog, on plain Python processes (fast; the same code
on a real vLLM server is tested in test_server_unit.py)."""

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import wait_until_gone
from helpers.serve import group, process
from helpers.serve._orphan_guard import NOTE_PREFIX, orphan_note, owner_alive, start_ticks
from helpers.serve.log import diagnose
from helpers.paths import COURSE_ROOT

# A leader with two children: one that ignores SIGTERM, one named like the resource tracker
# (which ignores SIGTERM too and leaves once the others are gone).
LEADER = """
import signal, subprocess, sys, time
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); import os; os.write(1, b'up\\\\n'); time.sleep(120)"
tracker = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); parent = os.getppid()\\n"
           "os.write(1, b'up\\\\n')\\n"
           "# multiprocessing." "resource_tracker\\n"  # the marker only in the child's command line
           "while os.getppid() == parent: time.sleep(0.05)")
subprocess.Popen([sys.executable, "-c", stubborn]); subprocess.Popen([sys.executable, "-c", tracker])
print("ready", flush=True); time.sleep(120)
"""


def _session(tmp_path):
    leader = subprocess.Popen([sys.executable, "-c", LEADER], start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    # Each child says "up" once its SIGTERM is ignored: a signal sent earlier would still kill it.
    assert sorted(leader.stdout.readline().strip() for _ in range(3)) == [b"ready", b"up", b"up"]
    return leader


def test_end_session_ends_every_member_and_waits_for_the_last(tmp_path):
    leader = _session(tmp_path)
    pids = [p.pid for p in group.members(leader.pid)]
    shm = tmp_path / "pretend-shm-object"
    shm.write_text("x")
    ended = group.end_session(leader.pid, grace_s=1.0, extra_files={str(shm)}, leader=leader)
    assert len(ended.ended) == 3 and ended.left == [] and "resource_tracker" in ended.ended
    assert "python3" in " ".join(ended.killed) or "python" in " ".join(ended.killed)  # the stubborn child
    assert "resource_tracker" not in ended.killed  # it left by itself once the others were gone
    assert wait_until_gone(pids, timeout=0) == [] and leader.returncode is not None
    assert not shm.exists() and ended.removed_files == 1
    assert f"in {ended.seconds:.1f} s" in str(ended)


def _server_files(tmp_path, log_text):
    """A server's log (holding ``log_text``) and its temporary folder, as the helper makes them."""
    log, temp_dir = tmp_path / "server.log", tmp_path / "server-tmp"
    log.write_text(log_text)
    temp_dir.mkdir()
    return log, temp_dir


def test_the_watchdog_ends_the_rest_when_the_leader_dies_and_says_so(tmp_path):
    leader = _session(tmp_path)
    pids = [p.pid for p in group.members(leader.pid)]
    log, temp_dir = _server_files(tmp_path, "vLLM's own lines\n")
    guard = process.start_orphan_guard(leader.pid, log, temp_dir)
    try:
        time.sleep(1.5)  # the watchdog has seen the processes it must not lose
        os.kill(leader.pid, signal.SIGKILL)
        assert wait_until_gone(pids, timeout=5) == [], "the watchdog left part of the session alive"
        guard.wait(timeout=10)
        note = [line for line in log.read_text().splitlines() if line.startswith(NOTE_PREFIX)]
        assert len(note) == 1 and f"(pid {leader.pid})" in note[0] and "watchdog ended the rest" in note[0]
        assert not temp_dir.exists()
    finally:
        guard.kill()
        group.end_session(leader.pid, grace_s=0.5, leader=leader)


def test_a_stop_on_purpose_leaves_no_death_note(tmp_path):
    leader = _session(tmp_path)
    log, temp_dir = _server_files(tmp_path, "")
    guard = process.start_orphan_guard(leader.pid, log, temp_dir)
    time.sleep(1.5)
    guard.send_signal(signal.SIGUSR1)
    time.sleep(0.2)
    process.stop_server_processes(leader, timeout=1.0, temp_dir=temp_dir)
    guard.wait(timeout=10)
    assert NOTE_PREFIX not in log.read_text() and not temp_dir.exists()


def test_the_watchdog_knows_its_owner_by_start_tick_not_by_the_wall_clock(monkeypatch):
    # CI lost every server started during a few minutes to watchdogs that took a live pytest for
    # a dead one: psutil's create_time() adds the boot time, which Linux derives from the wall
    # clock, and the virtual machine's clock was stepped. Ticks since boot stay put.
    me = os.getpid()
    ticks = start_ticks(me)
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: time.time() + 3600.0)
    assert owner_alive(me, ticks)
    assert not owner_alive(me, ticks + 1)  # a recycled pid: same number, another start
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child_ticks = start_ticks(child.pid)
    child.wait()
    assert not owner_alive(child.pid, child_ticks)  # gone


OWNER_CODE = """
import sys, time
from pathlib import Path
from helpers.serve import process
process.start_orphan_guard(int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
time.sleep(1.5)
"""


def test_the_watchdog_ends_a_server_whose_owner_exited_and_says_why_in_its_log(tmp_path):
    leader = _session(tmp_path)
    pids = [p.pid for p in group.members(leader.pid)]
    log, temp_dir = _server_files(tmp_path, "vLLM's own lines\n")
    owner = subprocess.Popen([sys.executable, "-c", OWNER_CODE, str(leader.pid), str(log), str(temp_dir)],
                             cwd=COURSE_ROOT)
    try:
        assert owner.wait(timeout=30) == 0
        assert wait_until_gone(pids, timeout=15) == [], "the watchdog left an orphaned server running"
        note = [line for line in log.read_text().splitlines() if line.startswith(NOTE_PREFIX)]
        assert note == [orphan_note(owner.pid)]
        assert diagnose(log.read_text(), -15).cause == "watchdog"  # what a failed start would report
    finally:
        group.end_session(leader.pid, grace_s=0.5, leader=leader)


def test_members_skips_zombies_and_other_sessions():
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    time.sleep(0.5)  # exited, not reaped: a zombie holds nothing
    assert group.members(child.pid) == []
    child.wait()
    assert psutil.Process().pid in {p.pid for p in group.members(os.getsid(0))}


def test_a_second_interrupt_during_stop_kills_the_rest_at_once_and_goes_through(tmp_path, monkeypatch):
    from helpers.serve.server import VLLMServer

    leader = _session(tmp_path)
    pids = [p.pid for p in group.members(leader.pid)]
    server = VLLMServer()
    server.process, server._temp_dir = leader, tmp_path / "server-tmp"
    server._temp_dir.mkdir()
    calls = []
    real_wait = group._wait_gone

    def interrupted_once(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt  # Ctrl-C again while stop() waits for SIGTERM to work
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(group, "_wait_gone", interrupted_once)
    began = time.monotonic()
    try:
        server.stop()
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt was swallowed")
    assert time.monotonic() - began < 10  # SIGKILL at once, not a second full grace
    assert wait_until_gone(pids, timeout=0) == [] and not server._temp_dir.exists()


# Listens on a free port and prints it: a plain process with a server socket.
LISTENER = """
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)
"""


def test_listens_on_sees_a_childs_listening_socket_and_nothing_else():
    child = subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        port = int(child.stdout.readline())
        with socket.socket() as idle:  # bound, not listening: a port nobody serves on
            idle.bind(("127.0.0.1", 0))
            assert process.listens_on(os.getpid(), port)  # the child's socket counts as ours
            assert process.listens_on(child.pid, port)
            assert not process.listens_on(child.pid, idle.getsockname()[1])
    finally:
        child.kill()
        child.wait()
    assert not process.listens_on(child.pid, port)  # gone: nothing listens


# A process titled like vLLM's engine that forks a copy of itself (the copy keeps the title, as a
# multiprocessing fork or a passing helper does): only the first is a process the server cannot lose.
# The title is the child's argv[0] (what setproctitle writes), so the test needs only the standard library.
TITLED = """
import os, time
if os.fork() == 0:
    time.sleep(120)
print("ready", flush=True); time.sleep(120)
"""


def test_a_fork_that_keeps_its_parents_vllm_title_is_not_a_core_process():
    leader = subprocess.Popen(["VLLM::EngineCore", "-c", TITLED], executable=sys.executable, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert leader.stdout.readline().strip() == b"ready"
        procs = group.members(leader.pid)
        names = sorted(group.name_of(proc) for proc in procs)
        assert names == ["VLLM::EngineCore", "VLLM::EngineCore"]            # the copy carries the title
        assert group.core_processes(procs, leader.pid) == {leader.pid: "VLLM::EngineCore"}
    finally:
        group.end_session(leader.pid, 1.0)
        leader.wait(timeout=10)


@pytest.mark.parametrize("kind", ["router", "server"])
def test_a_second_ctrl_c_during_a_stop_kills_what_is_left_at_once(kind, tmp_path, monkeypatch):
    """Ctrl-C while stop() waits out the grace: the router, like the server, kills the rest at once, then re-raises."""
    from helpers.route.router import VLLMRouter
    from helpers.serve.server import VLLMServer

    leader = _session(tmp_path)  # its stubborn child ignores SIGTERM: only SIGKILL ends it
    pids = [p.pid for p in group.members(leader.pid)]
    _, temp_dir = _server_files(tmp_path, "")
    owner = VLLMRouter(["http://127.0.0.1:8000"], model_name="smollm2") if kind == "router" else VLLMServer()
    owner.process, owner._temp_dir = leader, temp_dir
    real, graces = group.end_session, []

    def interrupted(session, grace_s, extra_files=frozenset(), leader=None):
        graces.append(grace_s)
        if len(graces) == 1:
            raise KeyboardInterrupt  # pressed while the first stop waits
        return real(session, grace_s, extra_files, leader)

    monkeypatch.setattr(group, "end_session", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            owner.stop(timeout=60.0)
        assert graces == [60.0, 0.0]
        assert wait_until_gone(pids, timeout=2) == [] and not temp_dir.exists()
    finally:
        real(leader.pid, grace_s=0.5, leader=leader)
