"""The servers this Python process launched and has not stopped: listed, and stopped at exit.

A :class:`helpers.serve.server.VLLMServer` joins :data:`LIVE` when it launches and leaves when it
stops; :func:`stop_all_servers` runs at interpreter exit, so a script that forgets ``stop()``
leaves nothing behind (a killed kernel is the watchdog's, :mod:`helpers.serve._orphan_guard`).
"""

from __future__ import annotations

import atexit
from typing import Any

from helpers.serve.process import stop_each

LIVE: set[Any] = set()  # VLLMServer objects (not imported: server.py imports this module)


def running_servers() -> list[Any]:
    """The servers this Python process started and has not stopped; a server that lost one of
    its processes is ended here (what is left of it cannot serve) and not listed."""
    whole = []
    for server in list(LIVE):
        if server.is_running():
            whole.append(server)
        else:  # every server in LIVE was spawned; stop() ends what is left of it, if anything
            server.stop()
    return whole


def stop_all_servers() -> None:
    """Stop every server this Python process started (also run at interpreter exit); a Ctrl-C during
    one stop stops the rest at once (:func:`helpers.serve.process.stop_each`)."""
    stop_each(LIVE)


def ports_taken() -> set[int]:
    """The ports of the servers in :data:`LIVE`: one just launched binds its port seconds later."""
    return {server.port for server in LIVE}


atexit.register(stop_all_servers)
