"""A vLLM server's processes as one unit: find them, end them all, remove what they leave behind.

A server is several processes: the API server the helper launched, its ``VLLM::EngineCore``
(and ``VLLM::Worker`` processes with the multiprocessing executor), and multiprocessing's
resource tracker. The helper launches the API server in a new session, so they all share its
session id, even after the API server died and its children were handed to ``init``: the
session, not the parent-child tree, says which processes belong to the server.

Ending a server (:func:`end_session`) is: SIGTERM to all, wait; SIGKILL to whatever is left,
wait; then give the resource tracker a moment to exit by itself (it ignores SIGTERM and, once
the others are gone, unlinks the semaphores they registered), SIGKILL it if it does not; and
last, unlink any shared-memory object the server's processes had open. Bounded throughout.
Used by :mod:`helpers.serve.process` (``stop()``) and the watchdog :mod:`helpers.serve._orphan_guard`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

CORE_TITLE = "VLLM::"  # vLLM titles its engine and worker processes VLLM::EngineCore, VLLM::Worker_...
TRACKER_MARK = "multiprocessing.resource_tracker"
ROUTER_MARK = "helpers.route._launch"  # vLLM's router as the course runs it (helpers.route.router)
TRACKER_S = 3.0  # the resource tracker exits within a second of the last holder's exit
KILL_WAIT_S = 5.0


@dataclass(repr=False)
class GroupEnd:
    """What ending a server took: how long, which processes, which had to be killed. A notebook
    cell ending in ``server.stop()`` shows it as one sentence."""

    seconds: float
    ended: list[str] = field(default_factory=list)  # every process found, by name
    killed: list[str] = field(default_factory=list)  # those that needed SIGKILL
    left: list[str] = field(default_factory=list)  # still alive at the end (should stay empty)
    removed_files: int = 0  # shared-memory objects unlinked

    def __str__(self) -> str:
        forced = f"{len(self.killed)} had to be killed ({', '.join(self.killed)})" if self.killed else "none killed"
        alive = f"; STILL ALIVE: {', '.join(self.left)}" if self.left else ""
        return f"stopped {len(self.ended)} process(es) in {self.seconds:.1f} s, {forced}{alive}"

    __repr__ = __str__


def members(session: int) -> list[psutil.Process]:
    """The live processes of a session (zombies excluded: they hold nothing but a table slot)."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) == session:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def name_of(proc: psutil.Process) -> str:
    """``api_server``, ``VLLM::EngineCore``, ``resource_tracker``, ``vllm-router``, or the program's name."""
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return f"pid {proc.pid}"
    text = " ".join(cmdline)
    if text.startswith(CORE_TITLE):
        return text.split()[0]
    if "vllm.entrypoints.openai.api_server" in text:
        return "api_server"
    if TRACKER_MARK in text:
        return "resource_tracker"
    if ROUTER_MARK in text:
        return "vllm-router"
    return Path(cmdline[0]).name if cmdline else f"pid {proc.pid}"


def core_processes(procs: list[psutil.Process], session: int) -> dict[int, str]:
    """Which of a session's processes the server cannot lose: pid -> name. The API server, vLLM's
    titled ones, and the resource tracker, which lives as long as they do (a compile worker or
    a passing subprocess is not one of them). A process forked by a titled one keeps its title until it
    runs something else: a child named like its parent is such a passing copy, not a second engine."""
    core = {}
    for proc in procs:
        name = name_of(proc)
        titled = name.startswith(CORE_TITLE) and not _parent_named(proc, name)
        if proc.pid == session or titled or name == "resource_tracker":
            core[proc.pid] = name
    return core


def _parent_named(proc: psutil.Process, name: str) -> bool:
    try:
        parent = proc.parent()
    except psutil.Error:
        return False
    return parent is not None and name_of(parent) == name


def shared_memory_files(procs: list[psutil.Process]) -> set[str]:
    """The ``/dev/shm`` objects (segments, named semaphores) these processes have mapped.

    Matched by inode, not by the name in ``/proc/PID/maps``: glibc creates a named semaphore
    under a temporary name, maps it, then renames it, so the maps show the old name as deleted."""
    inodes = set()
    for proc in procs:
        try:
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/"):
                inodes.add(int(fields[4]))
    found = set()
    for entry in _shm_entries():
        try:
            if entry.stat().st_ino in inodes:
                found.add(str(entry))
        except OSError:
            continue
    return found


def _shm_entries() -> list[Path]:
    try:
        return list(Path("/dev/shm").iterdir())
    except OSError:  # no /dev/shm (macOS): nothing to find
        return []


def end_session(session: int, grace_s: float, extra_files: set[str] | frozenset[str] = frozenset(),
                leader: subprocess.Popen[bytes] | None = None) -> GroupEnd:
    """End every process of the session and unlink its shared memory; see the module docstring.

    ``leader``: the API server's Popen where the caller is its parent, so its exit code is kept
    (reaped through Popen, not behind its back)."""
    began = time.monotonic()
    procs = members(session)
    names = {proc.pid: name_of(proc) for proc in procs}
    files = shared_memory_files(procs) | set(extra_files)
    trackers = {p.pid for p in procs if names[p.pid] == "resource_tracker"}
    killed: list[str] = []
    _signal_all([p for p in procs if p.pid not in trackers], signal.SIGTERM)
    alive = _wait_gone(session, trackers, grace_s, leader)
    if alive:
        killed += [names.get(p.pid) or name_of(p) for p in alive]
        _signal_all(alive, signal.SIGKILL)
        _wait_gone(session, trackers, KILL_WAIT_S, leader)
    stubborn = _wait_gone(session, set(), TRACKER_S, leader)
    if stubborn:
        killed += [names.get(p.pid) or name_of(p) for p in stubborn]
        _signal_all(stubborn, signal.SIGKILL)
        _wait_gone(session, set(), KILL_WAIT_S, leader)
    left = members(session)
    removed = remove_files(files) if not left else 0
    return GroupEnd(time.monotonic() - began, sorted(names.values()), killed, [name_of(p) for p in left], removed)


def _wait_gone(session: int, spared: set[int], timeout: float,
               leader: subprocess.Popen[bytes] | None) -> list[psutil.Process]:
    """Wait until no process of the session is left but the ``spared`` pids; return those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        if leader is not None:
            leader.poll()  # reaps our own child, so it stops counting as alive
        alive = [p for p in members(session) if p.pid not in spared]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def remove_files(paths: set[str]) -> int:
    """Unlink the shared-memory objects of a server that is gone; returns how many it unlinked."""
    removed = 0
    for path in paths:
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            continue  # the resource tracker already did it
        except OSError:
            continue  # another user's, or read-only: not ours to force
    return removed


def _signal_all(procs: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            continue
