"""The operating-system side of a vLLM server: its process group, its watchdog, its port, its log file.

- :func:`spawn_server` starts the server in its own process group (so one signal reaches every
  child) with its output in a log file; :func:`start_orphan_guard` starts the watchdog of
  :mod:`helpers.serve._orphan_guard`, which stops that group when the Python process that
  started it is gone (a killed kernel runs no clean-up code of its own);
- :func:`stop_process_group` stops the group: SIGTERM, then SIGKILL, then any straggler;
- :func:`listens_on` and :func:`loaded_kernel_libraries` look at the running processes.

Used by :class:`helpers.serve.server.VLLMServer`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import psutil

from helpers.paths import COURSE_ROOT, build_dir
from helpers.serve.config import Launch

# vLLM's CPU build loads one of these, chosen by the CPU's instruction sets
CPU_KERNEL_LIBRARIES = ("_C.abi3.so", "_C_AVX512.abi3.so", "_C_AVX2.abi3.so")


def spawn_server(launch: Launch, log_path: Path) -> subprocess.Popen[bytes]:
    """Start the server in its own process group (one signal then reaches every child), its
    output going to ``log_path``."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            launch.argv,
            env={**os.environ, **launch.env},
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_orphan_guard(server_pid: int) -> subprocess.Popen[bytes]:
    """Start the watchdog that stops the server's group once this Python process is gone."""
    me = psutil.Process()
    return subprocess.Popen(
        [sys.executable, "-m", "helpers.serve._orphan_guard", str(me.pid), repr(me.create_time()), str(server_pid)],
        env={**os.environ, "PYTHONPATH": str(COURSE_ROOT)},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives the kernel's own process group being killed
    )


def stop_process_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Stop the process's group: SIGTERM lets vLLM reap its engine; SIGKILL if it hangs."""
    try:
        members = [process.pid, *(child.pid for child in psutil.Process(process.pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        members = [process.pid]
    for sig, wait_s in ((15, timeout), (9, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        _, alive = psutil.wait_procs(_existing(members), timeout=wait_s)
        if not alive:
            return
    for straggler in _existing(members):  # children that left the group, if any
        straggler.kill()


def _existing(pids: list[int]) -> list[psutil.Process]:
    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def listens_on(pid: int, port: int) -> bool:
    """Whether the process ``pid`` or one of its children listens on ``port``.

    True also where sockets cannot be inspected (e.g. macOS without root): the caller's other
    checks (health, model name) then decide alone.
    """
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port:
                    return True
    except psutil.AccessDenied:
        return True
    except psutil.NoSuchProcess:
        return False
    return False


def loaded_kernel_libraries(pid: int) -> set[str]:
    """Which of vLLM's CPU kernel libraries the process ``pid`` and its children loaded;
    read from ``/proc/PID/maps``, so empty off Linux."""
    root = psutil.Process(pid)
    found = set()
    for proc in [root, *root.children(recursive=True)]:
        try:
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
        except OSError:
            continue
        found.update(name for name in CPU_KERNEL_LIBRARIES if f"/vllm/{name}" in maps)
    return found


def new_log_path(log_dir: Path | None, port: int) -> Path:
    """A fresh log file's path in ``log_dir`` (default ``build/server-logs``)."""
    folder = Path(log_dir) if log_dir else build_dir("server-logs")
    folder.mkdir(parents=True, exist_ok=True)
    # Microseconds keep two servers started in the same second (two kernels) from sharing a log.
    return folder / f"vllm-{datetime.now():%Y%m%d-%H%M%S-%f}-port{port}.log"
