import os
import shutil
import subprocess
import uuid
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest

# Every process the tests start inherits this tag, so leak checks see only this session's
# servers, never another program's vLLM running on the same machine.
SESSION_TAG = uuid.uuid4().hex
os.environ["VLLM_COURSE_TEST_SESSION"] = SESSION_TAG
# Every kernel the tests start (nbval's, the lab copies') fails an exercise whose answer a cell above printed.
os.environ["VLLM_COURSE_AUDIT_ANSWERS"] = "1"
# ... and refuses a fresh start while a server started ahead stands by unused (helpers.serve.standby).
os.environ["VLLM_COURSE_AUDIT_AHEAD"] = "1"

# What a vLLM process's command line holds: the API server, the engine and workers vLLM retitles
# (VLLM::EngineCore, VLLM::Worker_...), vllm-router as helpers.route runs it.
API_SERVER_MARK, ROUTER_MARK = "vllm.entrypoints.openai.api_server", "helpers.route._launch"
MARKS = (API_SERVER_MARK, "VLLM", ROUTER_MARK)
TEST_WAIT_S = 20.0  # how long a test's leftovers get to go (a watchdog ends an orphaned server within ~15 s)
MODULE_WAIT_S = 30.0  # the same once a test file's module-scoped fixtures are torn down

# The sessions of this test session's servers, session id -> its leader's start time (None: gone when recorded).
# A server runs in a session of its own (helpers.serve.process.spawn_server), and its engine retitles itself
# (setproctitle), which overwrites the environment /proc shows: once the API server is gone, the engine carries
# no tag, and only the session it was seen in still finds it. Filled by every look (vllm_processes) and by
# every spawn_server call of this process; a session is dropped once a look finds it empty.
SERVER_SESSIONS: dict[int, float | None] = {}
REPORTED: set[int] = set()  # leftovers a check already failed on: each is reported once
REAL_POPEN = subprocess.Popen
CURRENT_ITEM: pytest.Item | None = None  # the test being run (its setup, call and teardown)


def tagged_processes() -> list[psutil.Process]:
    """Live vLLM processes, by command line, whose environment carries this test session's tag."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] == psutil.STATUS_ZOMBIE or not any(mark in cmdline for mark in MARKS):
            continue
        try:
            if proc.environ().get("VLLM_COURSE_TEST_SESSION") == SESSION_TAG:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def session_of(pid: int) -> int | None:
    """The session id of a live process (field 6 of /proc/PID/stat); None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]  # after "pid (comm)": comm may hold spaces
    return None if state == "Z" else int(session)


def session_members(sessions: Iterable[int]) -> list[psutil.Process]:
    """Every live process (zombies aside) in one of ``sessions``, read from /proc/*/stat."""
    wanted, found = set(sessions), []
    if not wanted:
        return found
    for entry in os.listdir("/proc"):
        if entry.isdigit() and session_of(int(entry)) in wanted:
            try:
                found.append(psutil.Process(int(entry)))
            except psutil.Error:
                continue
    return found


def remember_session(leader_pid: int) -> None:
    """Record the session ``leader_pid`` leads, with its leader's start time (to tell a reused pid apart)."""
    try:
        SERVER_SESSIONS[leader_pid] = psutil.Process(leader_pid).create_time()
    except psutil.Error:
        SERVER_SESSIONS.setdefault(leader_pid, None)


def _known_sessions() -> set[int]:
    """The recorded sessions that are still the ones recorded: a session whose leader's pid now belongs to a process
    started later is another program's (no pid is reused while its session has a member, so a gone leader is fine)."""
    known = set()
    for session, born in SERVER_SESSIONS.items():
        try:
            now_born = psutil.Process(session).create_time()
        except psutil.NoSuchProcess:
            known.add(session)
            continue
        except psutil.Error:
            continue
        if born is not None and now_born == born:
            known.add(session)
    return known


def vllm_processes(sessions: Iterable[int] = ()) -> list[psutil.Process]:
    """vLLM processes (api_server and its engine children, and vllm-router as helpers.route runs it)
    started by this test session: the tagged ones, and every live process of a session that a tagged
    one leads, led when an earlier look saw it, or got from spawn_server (and of ``sessions``).

    The engine retitles itself (VLLM::EngineCore), which overwrites its environment as /proc shows
    it: it is found as a member of its API server's session instead, also after the API server died."""
    tagged = tagged_processes()
    for proc in tagged:
        if session_of(proc.pid) == proc.pid:  # a server launched in a session of its own
            remember_session(proc.pid)
    known = _known_sessions()
    members = session_members((known | set(sessions)) - {os.getsid(0)})  # never this pytest's own session
    for session in known - {session_of(proc.pid) for proc in members}:
        SERVER_SESSIONS.pop(session, None)  # empty: its pid may be handed out again
    by_pid = {proc.pid: proc for proc in tagged}
    by_pid.update({proc.pid: proc for proc in members})
    return list(by_pid.values())


def wait_until_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still alive (not zombies) after waiting up to timeout seconds."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p.pid for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def describe(pids: Iterable[int]) -> str:
    """``pid 123 (VLLM::EngineCore)``, ... for a failure message."""
    described = []
    for pid in pids:
        try:
            cmdline = " ".join(" ".join(psutil.Process(pid).cmdline()).split())  # a retitled one pads with spaces
        except psutil.Error:
            cmdline = "gone"
        described.append(f"pid {pid} ({cmdline[:80]})")
    return ", ".join(described)


def leftovers_since(before: set[int], timeout: float) -> list[int]:
    """This session's vLLM processes not in ``before`` still alive after waiting up to ``timeout`` s for them to go
    (reported once: a later check leaves them out)."""
    left = wait_until_gone([p.pid for p in vllm_processes() if p.pid not in before | REPORTED], timeout=timeout)
    REPORTED.update(left)
    return left


def pytest_configure(config):
    # After each notebook nbval runs, no server started ahead may stand by unclaimed (a plugin: see its docstring)
    config.pluginmanager.import_plugin("tests.standby_audit")


@pytest.fixture
def no_server_left_behind():
    """Fails the test if it leaves a vLLM process of this session running."""
    before = {p.pid for p in vllm_processes()}
    yield
    left = leftovers_since(before, TEST_WAIT_S)
    assert left == [], f"a vLLM process survived the test: {describe(left)}"


def _last_of_its_file(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    return nextitem is None or nextitem.getparent(pytest.File) is not item.getparent(pytest.File)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global CURRENT_ITEM
    CURRENT_ITEM = item
    try:
        return (yield)
    finally:
        CURRENT_ITEM = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of a file, once its module-scoped fixtures (a shared server) are torn down: an error on
    that test if a vLLM process of this session is still running. ``no_server_left_behind`` runs inside the
    module's fixtures, so it never sees what they leave."""
    try:
        return (yield)
    finally:
        if _last_of_its_file(item, nextitem):
            left = leftovers_since(set(), MODULE_WAIT_S)
            if left:
                where = item.getparent(pytest.File)
                raise AssertionError(f"a vLLM process outlived the tests and fixtures of {where.nodeid if where else item.nodeid}: "
                                     f"{describe(left)}")


def _watched(spawn_server):
    """helpers.serve.process.spawn_server, which records each server's session, and refuses a real vLLM launch
    (not one a test replaced Popen for) from a test not marked ``server``: ``-m "not server"`` must start none."""

    def spawn_watched(launch, log_path, temp_dir):
        from helpers.serve import process

        item, command = CURRENT_ITEM, " ".join(map(str, launch.argv))
        real = process.subprocess.Popen is REAL_POPEN
        if real and item is not None and item.get_closest_marker("server") is None and (
                API_SERVER_MARK in command or ROUTER_MARK in command):
            shutil.rmtree(temp_dir, ignore_errors=True)  # what spawn_server does when nothing starts
            pytest.fail(f"{item.nodeid} starts a real vLLM server or router but is not marked server: add "
                        "@pytest.mark.server (or pytestmark) so that -m 'not server' leaves it out.", pytrace=False)
        started = spawn_server(launch, log_path, temp_dir)
        if real:
            remember_session(started.pid)  # spawn_server starts it in a session of its own
        return started

    spawn_watched.__wrapped__ = spawn_server
    return spawn_watched


@pytest.fixture(scope="session", autouse=True)
def servers_are_watched():
    """Every server this process starts goes through :func:`_watched` for the whole test session."""
    from helpers.serve import process

    original = process.spawn_server
    process.spawn_server = _watched(original)
    yield
    process.spawn_server = original


def finished_requests(server) -> float:
    """Requests the server has answered in full since it started (0 when /metrics does not answer)."""
    from helpers.load.poller import metrics_text
    from helpers.load.prometheus import parse_metrics

    try:
        return parse_metrics(metrics_text(server, timeout=2)).get("request_success", 0.0)
    except OSError:
        return 0.0


def warm_up_requests(server, num_requests: int) -> int:
    """The requests of the untimed warm-up burst a GPU server gets before a timed load of ``num_requests``
    (:mod:`helpers.load.warmup`): a killer counting finished requests waits past them. None on a CPU."""
    from helpers.load.warmup import needs_warm_up

    return num_requests if needs_warm_up(server) else 0


def tokens_to_catch_mid_run(device: str, cpu_tokens: int) -> int:
    """Output tokens a request needs for a killer to catch it in the engine: ``cpu_tokens`` on a CPU; 1,024 on a
    GPU, which serves a few tokens in milliseconds, before the killer's next look at /metrics."""
    return cpu_tokens if device == "cpu" else 1024
