"""Servers started before the cell that uses them, and kept standing by until it asks for one.

On vLLM's CPU build a start is mostly one process importing vLLM on one core: the API server, then
the engine process it spawns. Two starts launched together keep both cores busy and take little
longer than one (``scripts/bench_start_together.py``: 27.1 s for two against 51.5 s one after the
other on a 2-core Xeon, ``results/cpu/start_together-2026-12-06.json``). A notebook that measures
one server after another (notebook 05's levers, lab 1's client check and then its experiment) can
therefore start the next one beside the current one. A server standing by is idle: measured beside
a busy one, it cost that one nothing measurable (the same file).

- :func:`start_ahead` starts, together, the servers of the given settings that are not standing by
  already, and keeps them standing by. On a GPU it starts none (vLLM checks the GPU's free memory at
  each start, and the course validated one start at a time): each server starts in its own cell.
  Where the memory holds fewer than all, the first ones start; where a start fails, none does, and it
  says so: the failing server then fails again in its own cell, with its own message there.
- ``VLLMServer.start`` and ``start_together`` hand each one over to the cell that asks for its settings
  (:mod:`helpers.serve.standby`, which also puts a running server back for a later cell): the cell reads
  as it would without this module, ``with start_server(**settings) as server:``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from helpers.errors import START_ERRORS, NotEnoughMemoryError
from helpers.hardware import detect_device
from helpers.serve.server import VLLMServer
from helpers.serve.standby import STANDING_BY, forget_stopped
from helpers.serve.together import start_together

_SAID_GPU = False  # the GPU's line is printed once a kernel


def start_ahead(servers: Mapping[str, Mapping[str, Any]], *, quiet: bool = False) -> list[str]:
    """Start the servers named in ``servers`` (label -> settings, as ``start_server`` takes them) at once on a
    CPU and keep them standing by; return the labels of those standing by now. Settings already standing by
    are not started again. Where the memory holds fewer than all, the first ones start (two at least: one alone
    gains nothing). Never raises for a start: it prints which it did not start, and why.

    >>> start_ahead({"baseline": {}, "small pool": {"kv_cache_space_gib": 0.025}})   # doctest: +SKIP
    """
    global _SAID_GPU
    if detect_device() != "cpu":
        if not (quiet or _SAID_GPU):
            print("On a GPU each server starts in its own cell (vLLM checks the GPU's free memory at every start).")
            _SAID_GPU = True
        return []
    forget_stopped()
    wanted = {label: VLLMServer(**settings) for label, settings in servers.items()}
    new = {label: server for label, server in wanted.items() if server.requested_config not in STANDING_BY}
    started, refusal = _start_as_many_as_fit(new, quiet)
    if refusal is not None:
        left = [label for label in new if label not in started]
        print(f"Not started ahead: {', '.join(left)} ({type(refusal).__name__}: {str(refusal).splitlines()[0]}); "
              "each starts in its own cell instead.", flush=True)
    standing = [label for label, server in wanted.items() if server.requested_config in STANDING_BY]
    if not quiet and len(standing) > len(started):
        print(f"already standing by: {', '.join(label for label in standing if label not in started)}", flush=True)
    return standing


def _start_as_many_as_fit(new: dict[str, Any], quiet: bool) -> tuple[list[str], BaseException | None]:
    """Start the first of ``new`` together, as many as the memory holds (at least two: one alone gains nothing),
    and stand them by; their labels, and why the others did not start (None where all did)."""
    refusal: BaseException | None = None
    for count in range(len(new), 1, -1):
        first = dict(list(new.items())[:count])
        try:
            start_together(list(first.values()), labels=list(first), quiet=quiet, ahead=True)
        except NotEnoughMemoryError as error:
            refusal = refusal or error
            continue
        except START_ERRORS as error:
            return [], error
        for server in first.values():
            STANDING_BY[server.requested_config] = server
        return list(first), refusal
    return [], refusal
