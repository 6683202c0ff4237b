"""Ctrl-C reaches a router's start where another SIGINT handler is in place (a notebook cell with ``await``,
helpers.serve.process.interruptible), stops what was launched and puts the handler back. Nothing is launched:
the launch, the watchdog and the wait are stand-ins, and SIGINT goes to this process."""

import os
import shutil
import signal
import time

import pytest

from helpers.route import router as router_module
from helpers.route.router import VLLMRouter
from helpers.serve import process

URL = "http://127.0.0.1:8000"


class Running:
    pid = 1

    def poll(self):
        return None


def test_ctrl_c_during_a_routers_start_stops_it_and_restores_the_handler(monkeypatch, tmp_path):
    seen, stops = [], []

    def cell_handler(signum, frame):  # like ipykernel's for a cell with ``await``: records, raises nothing
        seen.append(signum)

    def wait_until_ready(self, began):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the router starts
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise AssertionError("Ctrl-C did not reach the router's wait")

    monkeypatch.setattr(process, "spawn_server", lambda launch, log_path, temp_dir: Running())
    monkeypatch.setattr(process, "start_orphan_guard", lambda pid, log_path, temp_dir: None)
    monkeypatch.setattr(VLLMRouter, "_wait_until_ready", wait_until_ready)
    monkeypatch.setattr(VLLMRouter, "stop", lambda self, timeout=5.0: stops.append(timeout))
    monkeypatch.setattr(router_module, "_LIVE", set())
    router = VLLMRouter([URL], model_name="smollm2", log_dir=tmp_path)
    previous = signal.signal(signal.SIGINT, cell_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            router.start(quiet=True)
        assert signal.getsignal(signal.SIGINT) is cell_handler
    finally:
        signal.signal(signal.SIGINT, previous)
        if router._temp_dir is not None:  # the stand-in stop() leaves it
            shutil.rmtree(router._temp_dir, ignore_errors=True)
    assert stops and seen == []
