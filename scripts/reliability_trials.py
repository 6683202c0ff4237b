"""Kill a course server's owner, or one of the server's own processes, in every way a learner can,
and count what is left behind. Run on demand, not in CI (each trial starts a real server):

    .venv/bin/python scripts/reliability_trials.py --rounds 2      # 11 kinds of trial x 2

Each trial runs a small "notebook" (a Python process, or a real Jupyter kernel through
jupyter_client) that starts a server with the course's helper, then hits it with one of:
SIGKILL during start-up, in the first quarter second, or during a load test; SIGINT or a
double SIGINT during start-up; SIGTERM; the kernel killed under Jupyter; or SIGKILL to one
process of the running server (the API server, its EngineCore, the resource tracker). Every
process the trial started carries a tag in its environment, so the count sees only this
script's processes. It prints, per trial, how long until no process of the server was left
(the cleanup time) and whether any was still alive 30 s after the blow (an orphan); then the
totals and the slowest case. Traffic goes to 127.0.0.1 only, 24 requests per load.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers.paths import course_pythonpath  # noqa: E402
from helpers.serve import group  # noqa: E402

ORPHAN_AFTER_S = 30.0
LOG_DIR = ROOT / "build" / "reliability"
SEEN: set[int] = set()  # the sessions of the current trial's servers
TAG = "VLLM_COURSE_TRIAL"
NOTEBOOK = """
import asyncio, sys, time
from helpers.serve.server import start_server
server = start_server(max_num_seqs=8, quiet=True)
print("ready", server.process.pid, flush=True)
if sys.argv[1] == "load":
    from helpers.load.run import run_load_test
    from helpers.load.workload import build_workload
    workload = build_workload(server, num_requests=24, output_tokens=64)
    print("loading", flush=True)
    asyncio.run(run_load_test(server, workload, progress=False))
time.sleep(900)
"""
TRIALS = ("kill during start-up", "kill in the first 0.25 s", "kill during a load test", "SIGINT during start-up",
          "double SIGINT during start-up", "SIGTERM", "kernel killed under Jupyter", "kill api_server",
          "kill VLLM::EngineCore", "kill resource_tracker", "stop() while serving")


def tagged(tag: str, sessions: set[int] | None = None) -> list[psutil.Process]:
    """Every live process of this trial: those carrying its tag in their environment (the notebook,
    the watchdog, the API server) and every member of a server session seen so far (``sessions``,
    updated here): vLLM's EngineCore retitles itself, which overwrites its environment as shown
    in /proc, so only its session says whose it is."""
    sessions = set() if sessions is None else sessions
    found = {}
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.environ().get(TAG) == tag:
                found[proc.pid] = proc
                if group.name_of(proc) == "api_server":
                    sessions.add(proc.pid)  # the helper starts each server as its session's leader
        except psutil.Error:
            continue
    for session in sessions:
        found.update({proc.pid: proc for proc in group.members(session)})
    return list(found.values())


def run_trial(kind: str) -> tuple[float | None, list[str]]:
    """One trial: (seconds until the server's last process was gone, names of orphans)."""
    SEEN.clear()
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG: tag, "PYTHONPATH": course_pythonpath(os.environ)}
    if kind == "kernel killed under Jupyter":
        return _kernel_trial(env, tag)
    mode = "load" if kind == "kill during a load test" else "idle"
    with open(LOG_DIR / f"{tag}.stderr", "w") as stderr:  # why a trial left an orphan, if one does
        notebook = subprocess.Popen([sys.executable, "-c", NOTEBOOK, mode], env=env, cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=stderr, preexec_fn=_interruptible)
    spared = {notebook.pid}
    if kind == "kill in the first 0.25 s":
        time.sleep(0.25)
        notebook.kill()
    elif kind in ("kill during start-up", "SIGINT during start-up", "double SIGINT during start-up"):
        _wait_for_api_server(tag)
        time.sleep(random.uniform(0.5, 20))  # vLLM is importing, loading weights or profiling memory
        if kind == "kill during start-up":
            notebook.kill()
        else:
            notebook.send_signal(signal.SIGINT)
            if kind.startswith("double"):
                time.sleep(0.1)
                notebook.send_signal(signal.SIGINT)
    else:
        line = notebook.stdout.readline().split()
        if not line or line[0] != "ready":
            return None, ["the server did not start"]
        session = int(line[1])
        SEEN.add(session)
        if kind == "kill during a load test":
            notebook.stdout.readline()
            time.sleep(random.uniform(1, 4))
            notebook.kill()
        elif kind == "SIGTERM":
            notebook.terminate()
        elif kind == "stop() while serving":
            notebook.send_signal(signal.SIGINT)  # KeyboardInterrupt in sleep: the interpreter's exit stops it
        else:
            victim = kind.removeprefix("kill ")
            (pid,) = [p.pid for p in group.members(session) if group.name_of(p) == victim]
            os.kill(pid, signal.SIGKILL)
    return _count_after(tag, spared, notebook)


def _interruptible() -> None:
    # A shell that starts this script in the background (`cmd &`, nohup) ignores SIGINT in it, and
    # an ignored signal stays ignored in children: Python would then never raise KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_api_server(tag: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(group.name_of(p) == "api_server" for p in tagged(tag, SEEN)):
        time.sleep(0.2)


def _count_after(tag: str, spared: set[int], notebook: subprocess.Popen | None) -> tuple[float, list[str]]:
    blow = time.monotonic()
    cleanup = None
    while time.monotonic() - blow < ORPHAN_AFTER_S:
        if notebook is not None:
            notebook.poll()
        if not [p for p in tagged(tag, SEEN) if p.pid not in spared]:
            cleanup = time.monotonic() - blow
            break
        time.sleep(0.1)
    orphans = [] if cleanup is not None else [group.name_of(p) for p in tagged(tag, SEEN) if p.pid not in spared]
    for proc in tagged(tag, SEEN):  # end the trial, orphans and the notebook alike, before the next
        proc.kill()
    if notebook is not None:
        notebook.wait()
    return (cleanup if cleanup is not None else ORPHAN_AFTER_S), orphans


def _kernel_trial(env: dict[str, str], tag: str) -> tuple[float | None, list[str]]:
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=env, cwd=str(ROOT))
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    client.execute("from helpers.serve.server import start_server\nserver = start_server(max_num_seqs=8, quiet=True)")
    kernel_pid = manager.provisioner.process.pid
    _wait_for_api_server(tag)
    time.sleep(random.uniform(1, 10))  # somewhere in start-up or just after
    os.kill(kernel_pid, signal.SIGKILL)
    result = _count_after(tag, set(), None)
    client.stop_channels()
    manager.cleanup_resources()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="how many times to run each kind of trial")
    parser.add_argument("--only", nargs="*", choices=TRIALS, help="run only these kinds")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    kinds = [kind for _ in range(args.rounds) for kind in (args.only or TRIALS)]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    results = []
    for number, kind in enumerate(kinds, 1):
        seconds, orphans = run_trial(kind)
        results.append((kind, seconds, orphans))
        shown = "no server" if seconds is None else f"cleanup {seconds:5.1f} s"
        print(f"{number:3d}/{len(kinds)} {kind:32s} {shown}  orphans: {', '.join(orphans) or 'none'}", flush=True)
    print(f"(each trial's notebook output: {LOG_DIR})")
    timed = [(s, k) for k, s, o in results if s is not None]
    orphaned = sum(len(o) for _, _, o in results)
    print(f"\n{len(results)} trials on {os.cpu_count()} cores: {orphaned} orphan(s); cleanup median "
          f"{statistics.median(s for s, _ in timed):.1f} s, slowest {max(timed)[0]:.1f} s ({max(timed)[1]})")
    return 1 if orphaned else 0


if __name__ == "__main__":
    sys.exit(main())
