"""Ctrl-C reaches a start's blocking wait where another SIGINT handler is in place: in a notebook cell that contains
``await``, ipykernel's handler only schedules a cancellation that waits for the cell's next ``await``
(helpers.serve.process.interruptible). SIGINT is sent to this process with a stand-in handler installed, so a
signal that does not become KeyboardInterrupt is recorded, never lets pytest itself be interrupted."""

import os
import signal
import threading
import time

import pytest

from helpers.serve import process
from helpers.serve.server import VLLMServer


@pytest.fixture
def cell_handler():
    """A SIGINT handler like ipykernel's for a cell with ``await``: it records the signal and raises nothing."""
    seen = []

    def handler(signum, frame):
        seen.append(signum)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield handler, seen
    finally:
        signal.signal(signal.SIGINT, previous)


def _wait_for_interrupt(seconds=3.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


def test_ctrl_c_interrupts_a_blocking_wait_and_the_old_handler_comes_back(cell_handler):
    handler, seen = cell_handler
    with pytest.raises(KeyboardInterrupt), process.interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for_interrupt()
    assert seen == [] and signal.getsignal(signal.SIGINT) is handler


def _starts_interrupted(monkeypatch, device: str | None = None) -> list[float]:
    """VLLMServer's start stubbed so that its first look at a server sends Ctrl-C (``device``: what the checks
    set); returns the timeouts its stops get."""
    looks, stops = [], []

    def check_before_launch(self, say, starting_with_gib=0.0):
        self.device = device

    def poll_start(self, say):
        looks.append(1)
        if len(looks) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the server starts
        assert len(looks) < 6, "Ctrl-C did not reach the start's wait"
        return False

    monkeypatch.setattr(VLLMServer, "check_before_launch", check_before_launch)
    monkeypatch.setattr(VLLMServer, "launch_on_free_port", lambda self, say: None)
    monkeypatch.setattr(VLLMServer, "poll_start", poll_start)
    monkeypatch.setattr(VLLMServer, "stop", lambda self, timeout=15.0: stops.append(timeout))
    return stops


def test_an_interrupted_start_stops_its_server_and_restores_the_handler(cell_handler, monkeypatch):
    handler, seen = cell_handler
    stops = _starts_interrupted(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        VLLMServer().start(quiet=True)
    assert stops and seen == [] and signal.getsignal(signal.SIGINT) is handler


def test_outside_the_main_thread_and_where_sigint_is_ignored_nothing_changes(cell_handler):
    """In a thread (a handler can only be set in the main one) a custom handler stays, and nothing is raised."""
    handler, seen = cell_handler
    found, errors = [], []

    def in_thread():
        try:
            with process.interruptible():
                found.append(signal.getsignal(signal.SIGINT))
        except Exception as error:  # a thread would lose it: record it for the assert
            errors.append(error)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert errors == [] and found == [handler] and signal.getsignal(signal.SIGINT) is handler
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with process.interruptible():
            found.append(signal.getsignal(signal.SIGINT))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert found == [handler, signal.SIG_IGN] and seen == []


def test_an_interrupted_start_together_stops_them_all(cell_handler, monkeypatch):
    from helpers.serve.together import start_together

    handler, seen = cell_handler
    stops = _starts_interrupted(monkeypatch, device="cuda")  # on a GPU: one after the other, no memory sums
    with pytest.raises(KeyboardInterrupt):
        start_together([VLLMServer(), VLLMServer()], quiet=True)
    assert len(stops) == 2 and seen == [] and signal.getsignal(signal.SIGINT) is handler


def test_a_ctrl_c_during_a_stop_kills_at_once_where_another_handler_is_in(cell_handler, monkeypatch, tmp_path):
    import subprocess

    from helpers.serve import group

    handler, seen = cell_handler
    server = subprocess.Popen(["sleep", "60"], start_new_session=True)
    real_wait, graces = group._wait_gone, []

    def wait_gone(session, spared, timeout, leader):
        graces.append(timeout)
        if len(graces) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while stop() waits out its grace
        return real_wait(session, spared, timeout, leader)

    monkeypatch.setattr(group, "_wait_gone", wait_gone)
    try:
        with pytest.raises(KeyboardInterrupt):
            process.stop_started(server, None, 60.0, tmp_path / "server-tmp")
        assert server.poll() is not None and seen == [] and signal.getsignal(signal.SIGINT) is handler
    finally:
        server.kill()
        server.wait()
