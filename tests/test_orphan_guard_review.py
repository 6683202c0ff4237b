"""The watchdog (helpers.serve._orphan_guard) on stand-in servers (``sleep`` in a session of its own): it ends the
server even when it cannot write its note, a failed look does not end the watch, and a stop sent in its first
moments neither kills it nor is lost."""

import os
import signal
import subprocess
import sys
import time

import psutil

from helpers.paths import COURSE_ROOT
from helpers.serve import _orphan_guard, group, process
from helpers.serve._orphan_guard import NOTE_PREFIX
from tests.conftest import wait_until_gone

# Starts the watchdog for the session given, then exits: the watchdog's owner is gone.
OWNER = """
import sys, time
from pathlib import Path
from helpers.serve import process
process.start_orphan_guard(int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
time.sleep(0.5)
"""
# A leader whose child outlives it in the same session: the leader is the process the server cannot lose.
LEADER = "import subprocess; subprocess.Popen(['sleep', '60']); print('ready', flush=True); import time; time.sleep(60)"
# The same with a child that ignores SIGTERM: a stop leaves it for a moment after the leader is gone.
STUBBORN = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.write(1, b'up\\n'); "
            "time.sleep(60)")
STUBBORN_LEADER = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {STUBBORN!r}]); " \
                  "time.sleep(60)"


def _wait_gone(path, timeout=15.0):
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not path.exists()


def _handles_sigusr1(pid):
    """Whether process ``pid`` has its SIGUSR1 handler in and the signal unblocked: the watchdog's loop is next."""
    bit = 1 << (signal.SIGUSR1 - 1)
    try:
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
    except OSError:
        return False
    return bool(int(status["SigCgt"], 16) & bit) and not int(status["SigBlk"], 16) & bit


def _wait_watching(guard, timeout=20.0):
    """Until the watchdog has looked at its server a few times (bounded): its handler is in, then some POLL_S."""
    deadline = time.monotonic() + timeout
    while not _handles_sigusr1(guard.pid):
        assert guard.poll() is None and time.monotonic() < deadline, "the watchdog did not start watching"
        time.sleep(0.05)
    time.sleep(3 * _orphan_guard.POLL_S)


def test_the_server_of_a_gone_kernel_is_ended_though_its_log_folder_was_deleted(tmp_path):
    server = subprocess.Popen(["sleep", "60"], start_new_session=True)
    log, temp_dir = tmp_path / "deleted-by-make-clean" / "server.log", tmp_path / "server-tmp"
    temp_dir.mkdir()  # the log's folder is never made: as if `make clean` removed build/
    try:
        owner = subprocess.Popen([sys.executable, "-c", OWNER, str(server.pid), str(log), str(temp_dir)],
                                 cwd=COURSE_ROOT)
        assert owner.wait(timeout=30) == 0
        assert wait_until_gone([server.pid], timeout=15) == [], "the watchdog left the server of a gone kernel running"
        assert _wait_gone(temp_dir)
    finally:
        server.kill()
        server.wait()


def test_a_dead_engine_still_gets_its_clean_up_when_the_log_cannot_be_written(tmp_path):
    leader = subprocess.Popen([sys.executable, "-c", LEADER], start_new_session=True, stdout=subprocess.PIPE)
    assert leader.stdout.readline().strip() == b"ready"
    pids = [proc.pid for proc in group.members(leader.pid)]
    log, temp_dir = tmp_path / "gone" / "server.log", tmp_path / "server-tmp"
    temp_dir.mkdir()
    guard = process.start_orphan_guard(leader.pid, log, temp_dir)
    try:
        _wait_watching(guard)  # the watchdog has seen the leader, a process the server cannot lose
        leader.kill()
        assert guard.wait(timeout=20) == 0  # not a traceback from the note it could not write
        assert wait_until_gone(pids, timeout=0) == [] and not temp_dir.exists()
    finally:
        guard.kill()
        group.end_session(leader.pid, grace_s=0.5, leader=leader)


def test_a_look_that_fails_does_not_end_the_watch(tmp_path, monkeypatch):
    """The watchdog run in this process with its world faked: the first look raises, the owner is gone at the second."""
    looks, ended = [], []
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the watchdog's own SIGUSR1 handler: not in pytest
    monkeypatch.setattr(_orphan_guard.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(group, "members", lambda session: [] if ended else [psutil.Process()])
    monkeypatch.setattr(group, "shared_memory_files", lambda procs: set())

    def core_processes(procs, session):
        looks.append(session)
        raise RuntimeError("a process changed under the look")

    monkeypatch.setattr(group, "core_processes", core_processes)
    monkeypatch.setattr(_orphan_guard, "owner_alive", lambda pid, ticks: not looks)
    monkeypatch.setattr(group, "end_session", lambda session, grace_s, files: ended.append(session))
    temp_dir = tmp_path / "server-tmp"
    temp_dir.mkdir()
    assert _orphan_guard.main(["1", "1", "4242", str(tmp_path / "server.log"), str(temp_dir)]) == 0
    assert looks == [4242] and ended == [4242] and not temp_dir.exists()
    assert (tmp_path / "server.log").read_text().strip().startswith(NOTE_PREFIX)


def test_a_stop_sent_as_the_watchdog_starts_neither_kills_it_nor_is_lost(tmp_path):
    server = subprocess.Popen([sys.executable, "-c", STUBBORN_LEADER], start_new_session=True, stdout=subprocess.PIPE)
    assert server.stdout.readline().strip() == b"up"
    log, temp_dir = tmp_path / "server.log", tmp_path / "server-tmp"
    log.write_text("")
    temp_dir.mkdir()
    guard = process.start_orphan_guard(server.pid, log, temp_dir)
    try:
        # A Ctrl-C right after launch: stop() tells the watchdog before it has installed its handler.
        guard.send_signal(signal.SIGUSR1)
        time.sleep(1.5)
        assert guard.poll() is None, f"SIGUSR1 killed the watchdog (exit {guard.returncode})"
        # The leader goes at SIGTERM, its child only at SIGKILL a second later: a watchdog that missed the
        # stop would take that second for a server that lost a process.
        process.stop_server_processes(server, timeout=1.0, temp_dir=temp_dir)
        assert guard.wait(timeout=10) == 0
        assert NOTE_PREFIX not in log.read_text()  # it knew the stop was on purpose: no death note
    finally:
        guard.kill()
        group.end_session(server.pid, grace_s=0.5, leader=server)


def test_starting_the_watchdog_leaves_the_callers_signal_mask(tmp_path, monkeypatch):
    """SIGUSR1 is blocked only while the watchdog is launched: left blocked, a stop's signal would never reach
    anything this process starts later, nor a handler of its own."""
    monkeypatch.setattr(subprocess, "Popen", lambda *args, **kwargs: None)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert signal.SIGUSR1 not in before
    process.start_orphan_guard(1, tmp_path / "server.log", tmp_path)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before


def test_the_watchdog_keeps_the_packages_its_caller_reaches_through_pythonpath(tmp_path, monkeypatch):
    """The watchdog imports psutil: where packages come through PYTHONPATH (the staged GPU device), a PYTHONPATH of
    the course alone would leave it dying at import, silently, and the server without its watchdog."""
    launched = {}
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kwargs: launched.update(kwargs))
    monkeypatch.setenv("PYTHONPATH", "/staged/site")
    process.start_orphan_guard(1, tmp_path / "server.log", tmp_path)
    assert launched["env"]["PYTHONPATH"].split(os.pathsep) == [str(COURSE_ROOT), "/staged/site"]
