"""A tiny watchdog process beside every server the course starts. It ends the whole server when

- the Python process that started it is gone (a kernel killed or restarted, a crashed script):
  a server started in a session of its own does not die with its parent, and a killed kernel
  runs no clean-up code, so something outside the kernel has to notice;
- one of the server's own processes dies (the API server, its ``VLLM::EngineCore`` or a
  ``VLLM::Worker``): what is left can no longer serve, and would hold the CPU or the GPU's
  memory until someone noticed. The watchdog writes what died at the end of the server's log
  (:data:`NOTE_PREFIX`), where :class:`helpers.serve.server.VLLMServer` reads it back.

It leaves the server alone while ``stop()`` ends it on purpose (the helper sends it SIGUSR1
first), and exits once no process of the server is left, removing the server's temporary
folder and any shared memory it saw the server hold. Started by
:func:`helpers.serve.process.start_orphan_guard`; run as
``python -m helpers.serve._orphan_guard OWNER_PID OWNER_START_TICKS SESSION LOG_PATH TEMP_DIR``.
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
from pathlib import Path

from helpers.serve import group

POLL_S = 0.5  # how quickly a dead process or an orphaned server is noticed
MAPS_EVERY_S = 5.0  # how often the server's shared memory is listed (reading maps costs CPU)
ORPHAN_GRACE_S = 5.0  # vLLM reaps its engine processes in about 1.5 s after SIGTERM
BROKEN_GRACE_S = 2.0  # a server missing a process has nothing left to finish
NOTE_PREFIX = "[vllm-course watchdog]"


def start_ticks(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``, field 22).

    This, not psutil's ``create_time()``, identifies the owner: ``create_time()`` adds the boot
    time, which Linux derives from the wall clock, so a stepped clock (an NTP step, a virtual
    machine resumed from a snapshot) moves it, and a watchdog comparing it would take a live
    kernel for a dead one and end its server. Ticks since boot do not move.

    >>> import os; start_ticks(os.getpid()) == start_ticks(os.getpid()) > 0
    True
    """
    return int(_stat_fields(pid)[19])


def owner_alive(pid: int, ticks: int) -> bool:
    """True while the owner runs; a recycled pid belongs to a process started at another tick."""
    try:
        fields = _stat_fields(pid)
        return fields[0] != b"Z" and int(fields[19]) == ticks  # a zombie has exited
    except (OSError, ValueError, IndexError):
        return False


def _stat_fields(pid: int) -> list[bytes]:
    """``/proc/PID/stat`` from field 3 (the state) on: the name before it may hold spaces and ")"."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()


def death_note(lost: dict[int, str], left: list[str]) -> str:
    """The line the watchdog adds to the log when a process of the server died.

    >>> death_note({812: "VLLM::EngineCore"}, ["api_server"])
    '[vllm-course watchdog] VLLM::EngineCore (pid 812) died; the watchdog ended the rest of the server (api_server).'
    """
    what = ", ".join(f"{name} (pid {pid})" for pid, name in sorted(lost.items()))
    rest = f" ({', '.join(left)})" if left else ""
    return f"{NOTE_PREFIX} {what} died; the watchdog ended the rest of the server{rest}."


def orphan_note(owner_pid: int) -> str:
    """The line the watchdog adds to the log when the process that started the server is gone.

    >>> orphan_note(4242)
    '[vllm-course watchdog] the Python process that started this server (pid 4242) is gone; the watchdog ended the server.'
    """
    return f"{NOTE_PREFIX} the Python process that started this server (pid {owner_pid}) is gone; the watchdog ended the server."


def main(argv: list[str]) -> int:
    owner_pid, owner_start, session = int(argv[0]), int(argv[1]), int(argv[2])
    log_path, temp_dir = Path(argv[3]), Path(argv[4])
    stopping = []
    signal.signal(signal.SIGUSR1, lambda *_: stopping.append(True))
    # start_orphan_guard starts this process with SIGUSR1 blocked (its default action would kill it before the
    # line above ran): a stop sent in the meantime was kept pending and arrives now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    cores: dict[int, str] = {}
    shared: set[str] = set()
    last_maps = 0.0
    while procs := group.members(session):
        try:
            live = {proc.pid for proc in procs}
            if time.monotonic() - last_maps > MAPS_EVERY_S:
                shared |= group.shared_memory_files(procs)
                last_maps = time.monotonic()
            if not owner_alive(owner_pid, owner_start):
                _append(log_path, orphan_note(owner_pid))  # first, so a reader learns why at once; it cannot fail
                group.end_session(session, ORPHAN_GRACE_S, shared)
                break
            lost = {pid: name for pid, name in cores.items() if pid not in live}
            if lost and not stopping:
                names = sorted(group.name_of(proc) for proc in procs)
                ended = group.end_session(session, BROKEN_GRACE_S, shared)
                _append(log_path, f"{death_note(lost, names)} ({ended})")
                break
            cores.update(group.core_processes(procs, session))
        except Exception:  # a look that failed is tried again: once this process exits, nothing ends the server
            pass
        time.sleep(POLL_S)
    group.remove_files(shared)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


def _append(log_path: Path, note: str) -> None:
    """Add ``note`` to the log; a log that is gone (``make clean`` removes build/) or unwritable is skipped."""
    try:
        with open(log_path, "a") as log:
            log.write("\n" + note + "\n")
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
