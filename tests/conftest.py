import os
import uuid

import psutil
import pytest

# Every process the tests start inherits this tag, so leak checks see only this session's
# servers, never another program's vLLM running on the same machine.
SESSION_TAG = uuid.uuid4().hex
os.environ["VLLM_COURSE_TEST_SESSION"] = SESSION_TAG
# Every kernel the tests start (nbval's, the lab copies') fails an exercise whose answer a cell above printed.
os.environ["VLLM_COURSE_AUDIT_ANSWERS"] = "1"


def vllm_processes() -> list[psutil.Process]:
    """vLLM processes (api_server and its engine children, and vllm-router as helpers.route runs it)
    started by this test session.

    The engine retitles itself (VLLM::EngineCore), which overwrites its environment as /proc shows
    it: it is found as a member of its API server's session instead."""
    from helpers.serve.group import members

    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if not any(mark in cmdline for mark in ("vllm.entrypoints.openai.api_server", "VLLM", "helpers.route._launch")):
            continue
        try:
            if proc.environ().get("VLLM_COURSE_TEST_SESSION") == SESSION_TAG:
                found.append(proc)
        except psutil.Error:
            continue
    by_pid = {proc.pid: proc for proc in found}
    for leader in found:
        by_pid.update({proc.pid: proc for proc in members(leader.pid)})
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


@pytest.fixture
def no_server_left_behind():
    """Fails the test if it leaves a vLLM process of this session running."""
    before = {p.pid for p in vllm_processes()}
    yield
    leftovers = [p.pid for p in vllm_processes() if p.pid not in before]
    assert wait_until_gone(leftovers, timeout=20) == [], "a vLLM process survived the test"


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
