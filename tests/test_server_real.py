"""helpers.serve.server against the real vLLM server (CPU build on CI). Each test that starts a
server costs 10-40 s, so one running server is shared where a test only reads from it."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from helpers.errors import (
    ConfigError,
    NoGPUError,
    NotEnoughMemoryError,
    PortInUseError,
    ServerStartError,
    StartupTimeoutError,
)
from helpers.hardware import detect_device
from helpers.serve import process
from helpers.serve.server import VLLMServer, running_servers, start_server
from tests.conftest import vllm_processes, wait_until_gone
from tests.real_server import QUICK_START

pytestmark = [pytest.mark.server, pytest.mark.usefixtures("no_server_left_behind")]


@pytest.fixture(scope="module")
def server():
    with start_server(max_num_seqs=4, quiet=True, **QUICK_START) as running:
        yield running


def test_server_answers_a_chat_with_the_openai_client(server):
    reply = server.client().chat.completions.create(
        model=server.model_name,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12, temperature=0,
    )
    assert reply.choices[0].message.content.strip()
    assert reply.usage.completion_tokens <= 12 and reply.usage.prompt_tokens > 5


def test_server_reports_its_kv_cache_as_numbers(server):
    kv = server.kv_cache
    assert kv is not None and kv.max_model_len == 2048
    assert kv.num_tokens == kv.num_blocks * kv.block_size
    assert kv.max_concurrency == pytest.approx(kv.num_tokens / 2048, abs=0.01)


def test_server_binds_loopback_only(server):
    listening = [c for p in [psutil.Process(server.process.pid)] for c in p.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == server.port]
    assert [c.laddr.ip for c in listening] == ["127.0.0.1"]


def test_port_in_use_is_refused_before_launch(server):
    began = time.monotonic()
    with pytest.raises(PortInUseError, match=f"Port {server.port} on 127.0.0.1 is already in use"):
        start_server(port=server.port, quiet=True)
    assert time.monotonic() - began < 5


def test_next_server_without_a_port_takes_the_next_free_one(server):
    probe = VLLMServer()
    from helpers.serve.preflight import choose_port

    assert choose_port(probe.config) != server.port


def test_another_server_on_the_port_does_not_count_as_ours(server):
    """A process answering /health and /v1/models like vLLM, but not ours, is not 'ready'."""
    impostor = VLLMServer(port=server.port)
    impostor.port, impostor.model_name = server.port, server.model_name
    impostor.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process.answers_as_ours(impostor) is False
        assert process.port_held_by_another(impostor) is True  # so its start fails fast
    finally:
        impostor.process.kill()
        impostor.process.wait()
    assert process.answers_as_ours(server) is True
    assert process.port_held_by_another(server) is False


def test_choosing_a_port_skips_one_that_is_bound_but_not_yet_listening():
    """A starting vLLM binds its port about a minute before it listens on it."""
    from helpers.serve.config import ServerConfig
    from helpers.serve.preflight import FIRST_PORT, choose_port

    first = choose_port(ServerConfig())
    with socket.socket() as early:
        early.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        early.bind(("127.0.0.1", first))  # bound like vLLM's socket, no listen() yet
        assert choose_port(ServerConfig()) != first
    assert first >= FIRST_PORT


def test_stop_leaves_no_process_behind():
    running = start_server(max_num_seqs=2, quiet=True, **QUICK_START)
    family = [running.process.pid, *(c.pid for c in psutil.Process(running.process.pid).children(recursive=True))]
    assert len(family) >= 2  # the API server and its engine core
    running.stop()
    assert wait_until_gone(family, timeout=5) == []
    assert running not in running_servers()
    running.stop()  # a second stop is harmless


def test_gpu_device_on_a_machine_without_gpu_is_refused():
    if detect_device() == "cuda":
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoGPUError, match="no NVIDIA GPU is visible"):
        start_server(device="cuda", quiet=True)


def test_gpu_only_quantization_on_cpu_is_refused():
    if detect_device() == "cuda":
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoGPUError, match="vLLM's CPU build has no FP8 weight"):
        start_server(quantization="fp8", quiet=True)


def test_kv_cache_larger_than_free_memory_is_refused():
    if detect_device() == "cuda":
        pytest.skip("GPU memory is checked by vLLM itself")
    huge = psutil.virtual_memory().total / 2**30 + 1
    with pytest.raises(NotEnoughMemoryError, match="of memory is free"):
        start_server(kv_cache_space_gib=huge, quiet=True)


def test_invalid_flag_value_is_reported_with_vllms_words():
    with pytest.raises(ServerStartError) as caught:
        # --seed: a flag the helper leaves to extra_args (--max-num-seqs is now refused before launch)
        start_server(extra_args=("--seed", "zero"), quiet=True)
    assert caught.value.cause == "invalid flag"
    assert "invalid int value: 'zero'" in str(caught.value)


def test_max_model_len_beyond_the_kv_cache_is_diagnosed():
    with pytest.raises(ServerStartError) as caught:
        start_server(kv_cache_space_gib=0.05, max_model_len=8192, eager=True, quiet=True)
    assert caught.value.cause == "max model length exceeds KV cache"
    assert "lower max_model_len" in str(caught.value) and "last lines" in str(caught.value)
    assert "max_model_len=8192 tokens needs" in str(caught.value)  # with both sizes, from vLLM's words


def test_server_killed_during_start_up_is_reported_as_killed():
    server = VLLMServer()
    threading.Thread(target=_kill_when_started, args=(server,), daemon=True).start()
    with pytest.raises(ServerStartError) as caught:
        server.start(quiet=True)
    assert caught.value.cause == "process killed"
    assert "SIGKILL" in str(caught.value)


def _kill_when_started(server):
    for _ in range(200):
        if server.process is not None:
            time.sleep(2)
            server.process.send_signal(signal.SIGKILL)
            return
        time.sleep(0.1)


def test_start_up_timeout_stops_the_server():
    with pytest.raises(StartupTimeoutError, match="was not ready after 5 s") as caught:
        start_server(startup_timeout_s=5, quiet=True)
    assert caught.value.cause == "timeout"


def test_invalid_settings_never_launch_anything():
    before = len(vllm_processes())
    with pytest.raises(ConfigError):
        start_server(max_num_seqs=0)
    assert len(vllm_processes()) == before


KERNEL_CODE = ("from helpers.serve.server import start_server\n"
               f"server = start_server(max_num_seqs=2, **{QUICK_START!r})\n")


def _kernel():
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=os.getcwd())
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return manager, client


def _execute_reply(client, msg_id: str, timeout: float) -> dict:
    """The reply to one execute request. wait_for_ready may leave a kernel_info reply (status
    "ok") on the shell channel when the machine is slow, so replies are matched by parent id."""
    deadline = time.monotonic() + timeout
    while True:
        reply = client.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def _server_pids_started_by(kernel_pid: int) -> list[int]:
    pids = []
    for proc in vllm_processes():
        try:
            if any(p.pid == kernel_pid for p in proc.parents()):
                pids.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


def test_interrupting_the_kernel_during_start_up_leaves_no_server():
    manager, client = _kernel()
    try:
        msg_id = client.execute(KERNEL_CODE)
        pids = []
        for _ in range(100):  # wait until the kernel has launched the server
            pids = _server_pids_started_by(manager.provisioner.process.pid)
            if pids:
                break
            time.sleep(0.2)
        assert pids, "the kernel never launched a server"
        time.sleep(3)
        manager.interrupt_kernel()
        reply = _execute_reply(client, msg_id, timeout=60)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert wait_until_gone(pids, timeout=20) == []
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_killed_kernel_leaves_no_server_behind():
    manager, client = _kernel()
    try:
        msg_id = client.execute(KERNEL_CODE + "print(server.process.pid)")
        reply = _execute_reply(client, msg_id, timeout=240)
        assert reply["content"]["status"] == "ok"
        pids = _server_pids_started_by(manager.provisioner.process.pid)
        assert pids
        family = pids + [c.pid for pid in pids for c in psutil.Process(pid).children(recursive=True)]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)  # SIGKILL: no clean-up code runs in the kernel
    assert wait_until_gone(family, timeout=30) == []


def test_a_server_with_an_api_key_refuses_requests_without_it():
    import openai

    with start_server(api_key="classroom-key", max_num_seqs=2, quiet=True, **QUICK_START) as keyed:
        hello = {"model": keyed.model_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        assert keyed.client().chat.completions.create(**hello).usage.completion_tokens >= 1
        wrong = openai.OpenAI(base_url=keyed.base_url, api_key="not-the-key")
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(**hello)
        assert "classroom-key" not in keyed.log_text()


@pytest.mark.skipif(detect_device() == "cuda", reason="the CPU build's dtype choice")
def test_server_on_this_cpu_serves_the_dtype_its_instructions_compute(server):
    from helpers.hardware import detect_cpu

    expected = "bfloat16" if detect_cpu().native_bf16 else "float32"
    assert server.kv_cache.dtype == expected
    assert server.launch.argv[server.launch.argv.index("--dtype") + 1] == expected
    phases = server.startup_phases
    assert list(phases)[-1] == "HTTP server" and sum(phases.values()) == pytest.approx(server.startup_seconds, abs=1.0)


@pytest.mark.skipif(detect_device() == "cuda", reason="the CPU build's kernels")
def test_an_emulated_avx2_cpu_gets_float32_and_vllms_avx2_kernels(monkeypatch):
    from helpers.hardware import detect_cpu
    from helpers.paged.kv_math import kv_bytes_per_token, load_config, tokens_that_fit

    if not detect_cpu().isa.startswith("AVX-512"):
        pytest.skip("this CPU has no AVX-512 to hide: it is an AVX2-class machine already")
    monkeypatch.setenv("VLLM_COURSE_CPU_ISA", "avx2")
    with start_server(max_num_seqs=4, quiet=True) as avx2:
        kv = avx2.kv_cache
        assert (kv.dtype, kv.bytes_per_value) == ("float32", 4)
        # the hand check of notebook 01 in float32: twice the bytes per token, half the tokens
        per_token = kv_bytes_per_token(load_config(avx2.launch.argv[avx2.launch.argv.index("--model") + 1]),
                                       dtype_bytes=kv.bytes_per_value)
        assert per_token == 46_080 and tokens_that_fit(kv.memory_bytes, per_token, kv.block_size) == kv.num_tokens
        assert avx2.kernel_libraries() == {"_C_AVX2.abi3.so"}
        reply = avx2.client().chat.completions.create(
            model=avx2.model_name, messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8, temperature=0)
        assert reply.choices[0].message.content.strip()


@pytest.mark.parametrize("dtype", ["half", "float16"])
def test_float16_on_a_cpu_without_it_is_refused_with_the_dtype_to_use(dtype):
    from helpers.hardware import detect_cpu

    if detect_device() == "cuda" or detect_cpu().native_fp16:
        pytest.skip("this machine computes float16")
    before, began = set(running_servers()), time.monotonic()  # the module's shared server may be running
    with pytest.raises(ConfigError, match=r"no float16 arithmetic .* Use dtype='(bfloat16|float32)'"):
        start_server(dtype=dtype, quiet=True)
    assert time.monotonic() - began < 5 and set(running_servers()) == before


def test_float16_on_a_cpu_with_it_is_served_in_float16():
    """The other side of the refusal above: a CPU with AVX-512 FP16 (Sapphire Rapids and later) is let through."""
    from helpers.hardware import detect_cpu

    if detect_device() == "cuda" or not detect_cpu().native_fp16:
        pytest.skip("this machine has no float16 arithmetic: the refusal above is its case")
    with start_server(dtype="half", max_num_seqs=4, quiet=True) as half:
        assert (half.kv_cache.dtype, half.kv_cache.bytes_per_value) == ("float16", 2)
        assert half.launch.argv[half.launch.argv.index("--dtype") + 1] == "float16"
        reply = half.client().chat.completions.create(
            model=half.model_name, messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8, temperature=0)
        assert reply.choices[0].message.content.strip()


def test_the_step_budget_is_read_from_the_log_and_the_kv_pool_checks_by_hand_exactly(server):
    from helpers.paged.kv_math import check_pool, kv_bytes_per_token, load_config
    from helpers.serve.budget import VLLM_UNLOGGED_DEFAULT, step_budget
    from helpers.serve.model import resolve_model

    budget = step_budget(server.log_text())
    if server.device == "cpu":  # vLLM's default, which it does not log (helpers.serve.budget)
        assert (budget.tokens, budget.source) == (VLLM_UNLOGGED_DEFAULT, "vLLM's default, which it does not log")
    else:  # a GPU's budget is its own (8,192 on the H200 with vLLM 0.26), and logged
        assert budget.source == "the server's log" and budget.tokens >= VLLM_UNLOGGED_DEFAULT
    kv = server.kv_cache
    check = check_pool(kv, kv_bytes_per_token(load_config(resolve_model().model), dtype_bytes=kv.bytes_per_value))
    assert kv.memory_rounding_bytes == 0 and check.lands and check.blocks[0] == kv.num_blocks
