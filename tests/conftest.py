import psutil
import pytest


def vllm_processes() -> list[psutil.Process]:
    """vLLM api_server processes and their engine children that exist right now."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and (
            "vllm.entrypoints.openai.api_server" in cmdline or "VLLM::" in cmdline
        ):
            found.append(proc)
    return found


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
    """Fails the test if it leaves a vLLM process running that was not there before."""
    before = {p.pid for p in vllm_processes()}
    yield
    leftovers = [p.pid for p in vllm_processes() if p.pid not in before]
    assert wait_until_gone(leftovers, timeout=20) == [], "a vLLM process survived the test"
