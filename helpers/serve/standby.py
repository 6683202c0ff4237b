"""The servers standing by: started before the cell that uses them (:mod:`helpers.serve.ahead`), running, held by
no cell yet.

:func:`hand_over` is what ``VLLMServer.start`` and ``start_together`` ask first: a server about to start takes
over the standing-by server of the same settings instead, so the cell that uses a server reads as it would without
any of this (``with start_server(**settings) as server:``). :func:`stand_by` puts a running server back for a later
cell. Standing-by servers are ordinary live servers (:data:`helpers.serve.live.LIVE`): stopped at exit, and by
their watchdog when the kernel dies.

Under the course's tests (``VLLM_COURSE_AUDIT_AHEAD=1``, set by ``tests/conftest.py`` for every kernel nbval starts),
:func:`check_none_passed_over` refuses a fresh start while servers started ahead stand by unused: a notebook whose
``start_ahead`` entry drifted from the settings of the cell that was to use it would otherwise pay a start it
planned to save, and hold a second server's memory, without a word. After a notebook's last cell the tests ask
:func:`unclaimed` too: a server started ahead that no cell took over held its memory for nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from helpers.errors import StartedAheadUnusedError
from helpers.serve.config import ServerConfig
from helpers.serve.live import LIVE

STANDING_BY: dict[ServerConfig, Any] = {}  # settings as asked for -> a running VLLMServer nobody holds yet
AUDIT_VARIABLE = "VLLM_COURSE_AUDIT_AHEAD"


def hand_over(server: Any, say: Any) -> bool:
    """If a server of ``server``'s settings stands by, ``server`` (created, not started) becomes it: True.
    False where none does (the caller starts ``server``); a standing-by server that died is stopped first."""
    forget_stopped()
    ready = STANDING_BY.pop(server.requested_config, None)
    if ready is None:
        return False
    LIVE.discard(ready)
    server.__dict__.update(ready.__dict__)  # the process, its watchdog and its log: one server, now this object
    LIVE.add(server)
    ago = time.monotonic() - server._began
    say(f"started ahead {ago:.0f} s ago, ready in {server.startup_seconds:.1f} s: {server.base_url} "
        f"serves {server.model_name!r}")
    return True


def stand_by(server: Any) -> None:
    """Keep ``server`` running for a later cell that asks for its settings; a server no longer running is stopped."""
    if server.is_running():
        STANDING_BY[server.requested_config] = server
    else:
        server.stop()


def standing_by_pids() -> set[int]:
    """The API server process ids of the servers standing by: idle, so not 'other servers' to a measurement."""
    return {server.process.pid for server in STANDING_BY.values() if server.process is not None}


def forget_stopped() -> None:
    """Stop and drop the standing-by servers that are no longer running (a process of theirs died)."""
    for config, server in list(STANDING_BY.items()):
        if not server.is_running():
            server.stop()
            del STANDING_BY[config]


def check_none_passed_over(servers: Sequence[Any]) -> None:
    """Under the course's tests (``VLLM_COURSE_AUDIT_AHEAD=1``), raise :class:`~helpers.errors.StartedAheadUnusedError`
    where some of ``servers`` (about to start: each is handed the standing-by server of its settings, or starts
    afresh) would start afresh while servers started ahead (or put back by :func:`stand_by`) stand by unused,
    naming the settings that differ; elsewhere nothing (a learner may start what they like). Asked before any
    hand-over or launch, so a refusal stops nothing."""
    if os.environ.get(AUDIT_VARIABLE) != "1":
        return
    forget_stopped()
    if not STANDING_BY:
        return
    asked = {server.requested_config for server in servers}
    fresh = [server for server in servers if server.requested_config not in STANDING_BY]
    unused = [config for config in STANDING_BY if config not in asked]
    if not fresh or not unused:
        return
    lines = [f"  {_differences(server.requested_config, ahead)}" for server in fresh for ahead in unused]
    raise StartedAheadUnusedError(
        f"{len(fresh)} server(s) start afresh while {len(unused)} started ahead (or put back by stand_by) stand(s) "
        "by unused; settings here against those standing by:\n" + "\n".join(lines) + "\nMake the start_ahead "
        "entry equal to the settings of the cell that uses it (this check runs under the course's tests).")


def unclaimed() -> list[str]:
    """The servers standing by now, each as its settings (those not at their defaults) and its URL: at the end of
    a notebook, the ones started ahead (or put back by :func:`stand_by`) that no later cell took over. Empty where
    none; a server that died is dropped first. The course's tests ask it after a notebook's last cell.

    >>> unclaimed()
    []
    """
    forget_stopped()
    return [f"{_settings(config)} at {server.base_url}" for config, server in STANDING_BY.items()]


def _settings(config: ServerConfig) -> str:
    """e.g. ``max_num_seqs=8, kv_cache_space_gib=0.5``: the settings not at their defaults (a key only named).

    >>> _settings(ServerConfig(max_num_seqs=8, api_key="k")), _settings(ServerConfig())
    ('max_num_seqs=8, api_key set', 'the default settings')
    """
    found = [_shown(field, getattr(config, field.name)) for field in _differing(config, ServerConfig())]
    return ", ".join(found) or "the default settings"


def _shown(field: Any, value: Any) -> str:
    """``name=value``, or for a field kept out of reprs (the API key) only that it is set."""
    return f"{field.name}={value!r}" if field.repr else f"{field.name} set"


def _differences(here: ServerConfig, ahead: ServerConfig) -> str:
    """e.g. ``kv_cache_space_gib 0.5 here, 1.0 ahead``; the settings that differ, or "the same settings". A field
    kept out of reprs (the API key) is named, never shown.

    >>> _differences(ServerConfig(max_num_seqs=8), ServerConfig(max_num_seqs=64))
    'max_num_seqs 8 here, 64 ahead'
    >>> _differences(ServerConfig(api_key="a-secret-key-1"), ServerConfig(api_key="a-secret-key-2"))
    'api_key differs'
    """
    found = [f"{field.name} {getattr(here, field.name)!r} here, {getattr(ahead, field.name)!r} ahead" if field.repr
             else f"{field.name} differs"
             for field in _differing(here, ahead)]
    return "; ".join(found) or "the same settings"


def _differing(one: ServerConfig, other: ServerConfig) -> list[Any]:
    """The fields whose values differ between two settings, in the order ``ServerConfig`` declares them."""
    return [field for field in fields(one) if getattr(one, field.name) != getattr(other, field.name)]
