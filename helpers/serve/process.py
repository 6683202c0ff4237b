"""The operating-system side of a vLLM server: its process group, its watchdog, its port, its log file.

- :func:`spawn_server` starts the server in a session of its own (so one signal reaches every
  child) with its output in a log file and its temporary files in a folder of its own, in the
  environment :func:`server_env` builds;
  :func:`start_orphan_guard` starts the watchdog of :mod:`helpers.serve._orphan_guard`, which
  ends the server when the Python process that started it is gone (a killed kernel runs no
  clean-up code of its own) or when one of the server's own processes dies;
- :func:`stop_server_processes` ends every process of the session (:mod:`helpers.serve.group`)
  and removes the server's files; :func:`stop_started` is the whole stop (watchdog told, a second
  Ctrl-C honoured) that a server and a router both run; :func:`stop_each` stops several, none left
  behind by a Ctrl-C; :func:`interruptible` lets Ctrl-C reach a blocking wait in a cell with ``await``;
- :func:`listens_on` (through :func:`tcp_connections`) and :func:`loaded_kernel_libraries` look at
  the running processes.

Used by :class:`helpers.serve.server.VLLMServer` and :class:`helpers.route.router.VLLMRouter`.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from helpers.paths import build_dir, course_pythonpath
from helpers.serve import group
from helpers.serve._orphan_guard import start_ticks
from helpers.serve.config import KEY_VARIABLE, VLLM_KEY_VARIABLE, Launch
from helpers.serve.group import GroupEnd

# vLLM's CPU build loads one of these, chosen by the CPU's instruction sets
CPU_KERNEL_LIBRARIES = ("_C.abi3.so", "_C_AVX512.abi3.so", "_C_AVX2.abi3.so")


def spawn_server(launch: Launch, log_path: Path, temp_dir: Path) -> subprocess.Popen[bytes]:
    """Start the server in a session of its own (one signal then reaches every child, and the
    session id finds them all later), its output going to ``log_path``, its temporary files in
    ``temp_dir`` (removed with the server: vLLM leaves a ``vllm_dist_*`` file there at each start)."""
    env = server_env(launch, temp_dir)
    try:
        with open(log_path, "wb") as log:
            return subprocess.Popen(launch.argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    except BaseException:  # nothing started, so no stop() will remove the folder
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise


def server_env(launch: Launch, temp_dir: Path, inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's whole environment: ``inherited`` (default this process's), the launch's variables
    on top, its own temporary folder, and the course on PYTHONPATH (for the key guard middleware)."""
    env = dict(os.environ if inherited is None else inherited)
    # The course's server's key comes only from api_key=. vLLM reads VLLM_API_KEY whenever it has no
    # --api-key, so a key left in the kernel's environment would make it refuse the helper's own keyless
    # requests (the readiness check would see 401s until the start-up timeout), and vLLM 0.26 would write
    # it into its compile cache (helpers.serve.config.build_launch). A stray guard key would do the former.
    env.pop(VLLM_KEY_VARIABLE, None)
    if KEY_VARIABLE not in launch.env:
        env.pop(KEY_VARIABLE, None)
    env.update({**launch.env, **private_temp_env(temp_dir)})
    env["PYTHONPATH"] = course_pythonpath(env)
    return env


def new_temp_dir(port: int) -> Path:
    """A fresh folder for one server's temporary files."""
    return Path(tempfile.mkdtemp(prefix=f"vllm-course-port{port}-"))


def private_temp_env(temp_dir: Path) -> dict[str, str]:
    """TMPDIR for one server; torch's compile cache stays where it was, shared between starts."""
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    return {"TMPDIR": str(temp_dir), "TORCHINDUCTOR_CACHE_DIR": inductor}


def start_orphan_guard(server_pid: int, log_path: Path, temp_dir: Path) -> subprocess.Popen[bytes]:
    """Start the watchdog of :mod:`helpers.serve._orphan_guard` for the server ``server_pid``."""
    me = os.getpid()
    argv = [sys.executable, "-m", "helpers.serve._orphan_guard", str(me), str(start_ticks(me)),
            str(server_pid), str(log_path), str(temp_dir)]
    # SIGUSR1 (a stop on purpose) would kill the watchdog until it has installed its handler, a few tenths of a
    # second in: it starts with the signal blocked (the mask outlives exec), so one sent early waits for the handler.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        return subprocess.Popen(
            argv, env={**os.environ, "PYTHONPATH": course_pythonpath(os.environ)},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # survives the kernel's own process group being killed
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def stop_server_processes(process: subprocess.Popen[bytes], timeout: float, temp_dir: Path | None) -> GroupEnd:
    """End every process of the server's session, bounded, and remove its files; see :mod:`helpers.serve.group`."""
    ended = group.end_session(process.pid, grace_s=timeout, leader=process)
    try:
        process.wait(timeout=1)  # reap the API server if nobody did
    except subprocess.TimeoutExpired:
        pass
    if temp_dir is not None and not ended.left:
        shutil.rmtree(temp_dir, ignore_errors=True)
    return ended


def stop_started(running: subprocess.Popen[bytes] | None, guard: subprocess.Popen[bytes] | None, timeout: float,
                 temp_dir: Path | None) -> GroupEnd | None:
    """Stop a process this kernel started (SIGTERM, ``timeout`` s, SIGKILL) and its watchdog ``guard``;
    None when nothing was left to stop. A second Ctrl-C during the wait kills what is left at once,
    then goes through: a learner who presses it twice wants the cell back, not a process left behind."""
    ended = None
    if running is not None and (running.poll() is None or group.members(running.pid)):
        if guard is not None and guard.poll() is None:
            guard.send_signal(signal.SIGUSR1)  # a stop on purpose: no death note
        try:
            with interruptible():
                ended = stop_server_processes(running, timeout, temp_dir)
        except KeyboardInterrupt:
            stop_server_processes(running, 0.0, temp_dir)
            raise
    if guard is not None and not (ended and ended.left):
        try:  # with processes left, the watchdog stays: it ends them once this kernel is gone
            guard.wait(timeout=5)  # it leaves once the process's last child is gone
        except subprocess.TimeoutExpired:
            guard.kill()
            guard.wait()
    return ended


def stop_each(owners: Iterable[Any], timeout: float | None = None) -> None:
    """``stop()`` each of ``owners`` (servers or routers), with ``timeout`` where given. A Ctrl-C during one stop
    (which kills that one at once) stops the others at once too, then goes through: none is left running."""
    interrupted: KeyboardInterrupt | None = None
    for owner in list(owners):
        try:
            if interrupted is not None:
                owner.stop(timeout=0.0)
            elif timeout is None:
                owner.stop()
            else:
                owner.stop(timeout=timeout)
        except KeyboardInterrupt as error:  # a further Ctrl-C too: each one left still gets its stop
            interrupted = interrupted or error
    if interrupted is not None:
        raise interrupted


@contextmanager
def interruptible() -> Iterator[None]:
    """Inside the block, Ctrl-C raises KeyboardInterrupt at once, in a blocking wait too.

    In a notebook cell that contains ``await``, ipykernel (7.x, ``IPythonKernel._cancel_on_sigint``) swaps
    in a SIGINT handler that only schedules the cancelling of the cell's task on the event loop, which runs it
    at the cell's next ``await``: a start waiting in ``time.sleep`` would not see Ctrl-C before its timeout.
    Python's own handler is put in for the block, and the one before restored after it. Only in the main
    thread (no other may set handlers), and not where SIGINT is ignored or left to the system.
    """
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if in_main else None
    if not callable(previous) or previous is signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def death_of(server: Any, wait_s: float = 3.0) -> str | None:
    """``"server died: exit code N"`` (with what the watchdog saw, where it wrote it) once the
    server's API process has exited, or exits within ``wait_s``; None while it runs, or for a
    server this kernel did not start (a shared one). The wait covers the watchdog's ending of an
    API server whose engine died first (about 2 s)."""
    api = getattr(server, "process", None)
    if api is None:
        return None
    try:
        code = api.wait(timeout=wait_s) if wait_s > 0 else api.poll()
    except subprocess.TimeoutExpired:
        return None
    if code is None:
        return None
    note = getattr(server, "death_note", None)
    return f"server died: exit code {code}" + (f" ({note})" if note else "")


def answers_as_ours(server: Any) -> bool:
    """Healthy, serving the server's model name, and the listening socket belongs to its process
    (another server on the same port cannot pass for it)."""
    try:
        if server.get("/health", timeout=2) is None:
            return False
        models = json.loads(server.get("/v1/models", timeout=5))
    except (OSError, ValueError):
        return False
    names = {entry.get("id") for entry in models.get("data", [])}
    return server.model_name in names and listens_on(server.process.pid, server.port)


def port_held_by_another(server: Any) -> bool:
    """True when something listens on the server's port and it is not the server's process."""
    try:
        socket.create_connection((server.client_host, server.port), timeout=1).close()
    except OSError:
        return False
    return not listens_on(server.process.pid, server.port)


def listens_on(pid: int, port: int) -> bool:
    """Whether the process ``pid`` or one of its children listens on ``port``.

    True also where sockets cannot be inspected (e.g. macOS without root): the caller's other
    checks (health, model name) then decide alone.
    """
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            for conn in tcp_connections(proc):
                if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port:
                    return True
    except psutil.AccessDenied:
        return True
    except psutil.NoSuchProcess:
        return False
    return False


def tcp_connections(proc: psutil.Process) -> list[Any]:
    """The TCP sockets of one process. psutil 6 renamed ``Process.connections`` to
    ``net_connections`` (the old name warns there); Colab's image has psutil 5.9.5, which has
    only the old name, so take whichever this psutil has."""
    read = getattr(proc, "net_connections", None) or proc.connections
    return read(kind="tcp")


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


def new_log_path(log_dir: Path | None, port: int, name: str = "vllm") -> Path:
    """A fresh log file's path in ``log_dir`` (default ``build/server-logs``), named after ``name`` and ``port``."""
    folder = Path(log_dir) if log_dir else build_dir("server-logs")
    folder.mkdir(parents=True, exist_ok=True)
    # Microseconds keep two servers started in the same second (two kernels) from sharing a log.
    return folder / f"{name}-{datetime.now():%Y%m%d-%H%M%S-%f}-port{port}.log"
