"""A tiny watchdog process: when the Python process that started a vLLM server is gone
(a kernel killed or restarted, a crashed script), it stops the server's whole process group.

A process started with its own session does not die with its parent, and a killed kernel
runs no clean-up code, so something outside the kernel has to notice. Started by
:func:`helpers.serve.process.start_orphan_guard`; run as ``python -m helpers.serve._orphan_guard OWNER_PID OWNER_START PGID``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil

POLL_S = 1.0  # how quickly an orphaned server is noticed
GRACE_S = 10.0  # vLLM reaps its engine processes in about 1.5 s after SIGTERM


def owner_alive(pid: int, create_time: float) -> bool:
    """True while the owner runs; a recycled pid belongs to a process started at another time."""
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - create_time) < 1.0 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_alive(pgid: int) -> bool:
    """True while any process of the group is left, zombies excluded."""
    for process in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def kill_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM the group, wait for a clean exit, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.2)
        if not group_alive(pgid):
            return


def main(argv: list[str]) -> int:
    owner_pid, owner_start, pgid = int(argv[0]), float(argv[1]), int(argv[2])
    while group_alive(pgid):
        if not owner_alive(owner_pid, owner_start):
            kill_group(pgid)
            return 0
        time.sleep(POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
