"""A start's time limit is its device's (ServerConfig.startup_timeout): 600 s on a GPU, 300 s on a CPU, read by
the start's wait on each look. The server here is a stand-in that stays alive and never answers."""

import time

import pytest

from helpers.errors import StartupTimeoutError
from helpers.serve import process
from helpers.serve.server import VLLMServer


class Alive:
    pid = 1

    def poll(self):
        return None


@pytest.mark.parametrize(("device", "waited", "times_out"), [("cuda", 400, False), ("cuda", 601, True),
                                                             ("cpu", 301, True), ("cpu", 200, False)])
def test_a_start_times_out_after_its_devices_limit(monkeypatch, device, waited, times_out):
    stops = []
    server = VLLMServer()
    server.process, server.device = Alive(), device
    monkeypatch.setattr(VLLMServer, "log_text", lambda self: "")
    monkeypatch.setattr(VLLMServer, "stop", lambda self, timeout=15.0: stops.append(timeout))
    monkeypatch.setattr(process, "answers_as_ours", lambda server: False)
    monkeypatch.setattr(process, "port_held_by_another", lambda server: False)
    server._began = time.monotonic() - waited
    server._launched = server._last_news = time.monotonic()  # news just came: no "still starting..."
    if times_out:
        with pytest.raises(StartupTimeoutError, match=f"not ready after {waited - 1:.0f} s"):
            server.poll_start(lambda text: None)
        assert stops
    else:
        assert server.poll_start(lambda text: None) is False and not stops
