"""Start, watch and stop a real vLLM OpenAI-compatible server from Python or a notebook.

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server`` as a child process
in its own process group, logging to a file, and:

- refuses bad settings before launching (:class:`helpers.serve.config.ServerConfig`);
- waits until *its own* process answers ``/health`` and lists the expected model, showing
  start-up milestones as they happen; another server on the same port cannot fool it;
- on failure raises :class:`helpers.errors.ServerStartError` naming the cause found in the
  log, with the log's last lines;
- stops the whole process group (SIGTERM, then SIGKILL), on ``stop()``, at the end of a
  ``with`` block, on an interrupted cell, at interpreter exit, and, through a watchdog
  process, when the kernel itself is killed;
- reports the engine's KV-cache capacity as a :class:`helpers.serve.log.KVCacheReport`.

Taught in ``notebooks/01_start_server.ipynb``.

Example::

    >>> with start_server(max_num_seqs=8) as server:      # doctest: +SKIP
    ...     reply = server.client().chat.completions.create(
    ...         model=server.model_name, messages=[{"role": "user", "content": "Hi"}])
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from helpers.errors import NoGPUError, NotEnoughMemoryError, PortInUseError, ServerStartError, StartupTimeoutError
from helpers.hardware import Device, detect_cpu, detect_device, detect_gpus
from helpers.serve.model import resolve_model
from helpers.paths import COURSE_ROOT, build_dir
from helpers.serve.config import DEFAULT_CPU_KV_CACHE_GIB, Launch, ServerConfig, build_launch, cpu_dtype, gpu_dtype
from helpers.serve.log import (Diagnosis, KVCacheReport, diagnose, milestone, parse_kv_cache_report,
                                startup_phases, tail)

FIRST_PORT = 8000  # the port the seed's commands use; later servers take the next free one
PORT_ATTEMPTS = 3  # launches tried when a port chosen as free is taken before vLLM binds it
# vLLM's CPU build loads one of these, chosen by the CPU's instruction sets
CPU_KERNEL_LIBRARIES = ("_C.abi3.so", "_C_AVX512.abi3.so", "_C_AVX2.abi3.so")
SERVER_RSS_GIB = 2.5  # measured resident memory of the CPU server before its KV cache
_LIVE: set["VLLMServer"] = set()  # servers this process started and has not stopped yet


class VLLMServer:
    """One vLLM server process. Create it with a config, then ``start()`` (or ``with``)."""

    def __init__(self, config: ServerConfig | None = None, **settings: Any) -> None:
        self.config = replace(config or ServerConfig(), **settings)
        self.process: subprocess.Popen[bytes] | None = None
        self.device: Device | None = None
        self.model_name: str | None = None  # what clients send as ``model=``
        self.model_source: str | None = None  # "embedded", "local", "hub" or "dummy" (random weights)
        self.port: int | None = None
        self.log_path: Path | None = None
        self.launch: Launch | None = None
        self.kv_cache: KVCacheReport | None = None
        self.startup_seconds: float | None = None
        self.startup_timeline: list[tuple[float, str]] = []  # (seconds since launch, milestone)
        self._guard: subprocess.Popen[bytes] | None = None

    # ----- what a notebook uses -------------------------------------------------------
    @property
    def client_host(self) -> str:
        """The address clients on this machine connect to (a wildcard bind is reached on loopback)."""
        return "127.0.0.1" if self.config.host in ("0.0.0.0", "::") else self.config.host

    @property
    def url(self) -> str:
        """The server's root URL, e.g. ``http://127.0.0.1:8000``."""
        return f"http://{self.client_host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What the OpenAI client needs: the root URL plus ``/v1``."""
        return f"{self.url}/v1"

    @property
    def api_key(self) -> str:
        # vLLM ignores the key when it was started without one, but the client needs a value.
        return self.config.api_key or "not-needed"

    def client(self, **kwargs: Any):  # -> openai.OpenAI
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def async_client(self, **kwargs: Any):  # -> openai.AsyncOpenAI
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def log_tail(self, lines: int = 25) -> str:
        return tail(self.log_text(), lines)

    def get(self, path: str, timeout: float = 5.0) -> bytes:
        """GET a path of the server (``/metrics``, ``/v1/models``) and return the body."""
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.api_key}"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()

    def __enter__(self) -> "VLLMServer":
        return self.start() if self.process is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<VLLMServer {state} {self.model_name or self.config.model} on {self.url if self.port else '-'}>"

    # ----- lifecycle ---------------------------------------------------------------------
    def start(self, *, quiet: bool = False) -> "VLLMServer":
        """Launch the server and block until it is ready; raise with the cause if it is not."""
        if self.process is not None:
            raise RuntimeError("This server was already started; create a new VLLMServer to start another.")
        began = time.monotonic()
        say = (lambda text: None) if quiet else _printer(began)
        self.device = _choose_device(self.config)
        _check_device_options(self.config, self.device)
        _check_memory(self.config, self.device)
        choice = resolve_model(self.config.model)
        if choice.source == "dummy" and self.device == "cpu":
            raise NoGPUError(
                f"{choice.served_name} is an 8-billion-parameter architecture with random weights, "
                "meant for GPU throughput labs: it needs about 14 GiB for its weights and a GPU to "
                "run at a useful speed. On this CPU, use the embedded model (unset VLLM_COURSE_MODEL)."
            )
        if self.device == "cpu":
            dtype, why = cpu_dtype(detect_cpu(), self.config.dtype)
            say(why)
            self.config = replace(self.config, dtype=dtype)
        elif self.config.dtype is None and (dtype := gpu_dtype(detect_gpus())):
            say(f"this GPU has no bf16 (compute capability below 8.0): serving in float16 (--dtype {dtype})")
            self.config = replace(self.config, dtype=dtype)
        self.model_name = choice.served_name
        self.model_source = choice.source
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.port = _choose_port(self.config)
            self.launch = build_launch(replace(self.config, port=self.port), device=self.device,
                                       model=choice.model, served_name=choice.served_name,
                                       load_format=choice.load_format)
            self.log_path = _new_log_path(self.config.log_dir, self.port)
            say(f"starting vLLM on {self.device.upper()}: {' '.join(self.launch.display_command())}")
            say(f"log: {self.log_path}")
            launched = time.monotonic()
            try:
                self._spawn()
                self._wait_until_ready(began, launched, say)
                break
            except ServerStartError as error:
                # vLLM binds its port seconds after launch; another program may take a free
                # port in between. Only a port the helper chose itself is worth choosing again.
                if error.cause != "port in use" or self.config.port is not None or attempt == PORT_ATTEMPTS:
                    raise
                say(f"port {self.port} was taken while vLLM started; trying the next free port")
                self.process = None
            except BaseException:
                # Also on KeyboardInterrupt: an interrupted cell must not leave a server behind.
                self.stop()
                raise
        self.startup_seconds = time.monotonic() - began
        self.kv_cache = parse_kv_cache_report(self.log_text(), self._cache_config_labels())
        say(f"ready in {self.startup_seconds:.1f} s: {self.base_url} serves {self.model_name!r}")
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server and every process it started; safe to call twice."""
        process, self.process = self.process, None
        if process is not None:
            _stop_process_group(process, timeout)
            self.process = process  # keep the exit code readable; poll() is no longer None
        if self._guard is not None and self._guard.poll() is None:
            self._guard.kill()
            self._guard.wait()
        _LIVE.discard(self)

    def _spawn(self) -> None:
        assert self.launch is not None and self.log_path is not None
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.launch.argv,
                env={**os.environ, **self.launch.env},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so stop() reaches every child
            )
        _LIVE.add(self)
        me = psutil.Process()
        self._guard = subprocess.Popen(
            [sys.executable, "-m", "helpers.serve._orphan_guard", str(me.pid), repr(me.create_time()), str(self.process.pid)],
            env={**os.environ, "PYTHONPATH": _package_root()},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # survives the kernel's own process group being killed
        )

    def kernel_libraries(self) -> set[str]:
        """Which of vLLM's CPU kernel libraries its processes loaded: ``_C.abi3.so`` (AVX-512 with
        bf16), ``_C_AVX512.abi3.so`` or ``_C_AVX2.abi3.so``; read from ``/proc/PID/maps``, so empty off Linux."""
        assert self.process is not None
        root = psutil.Process(self.process.pid)
        found = set()
        for proc in [root, *root.children(recursive=True)]:
            try:
                maps = Path(f"/proc/{proc.pid}/maps").read_text()
            except OSError:
                continue
            found.update(name for name in CPU_KERNEL_LIBRARIES if f"/vllm/{name}" in maps)
        return found

    @property
    def startup_phases(self) -> dict[str, float]:
        """Seconds spent in each phase of the last start (imports, engine, weights, ...)."""
        return startup_phases(self.startup_timeline, self.startup_seconds)

    def _wait_until_ready(self, began: float, launched: float, say) -> None:
        assert self.process is not None
        deadline = began + self.config.startup_timeout_s
        seen_lines, last_news = 0, time.monotonic()
        self.startup_timeline = []
        while True:
            lines = self.log_text().splitlines()
            for line in lines[seen_lines:]:
                label = milestone(line)
                if label:
                    say(label)
                    last_news = time.monotonic()
                    self.startup_timeline.append((last_news - launched, label))
            seen_lines = len(lines)
            if self.process.poll() is not None:
                self._fail(ServerStartError, "exited during start-up")
            if self._answers_as_ours():
                self.startup_timeline.append((time.monotonic() - launched, "ready"))
                return
            if self._port_held_by_another_process():
                # Another server took the port between our check and vLLM's listen(): ours
                # would never answer there, so fail now instead of at the timeout.
                self._fail(ServerStartError, f"lost port {self.port} to another process",
                           found=diagnose("Address already in use", None))
            if time.monotonic() > deadline:
                self._fail(StartupTimeoutError, f"was not ready after {self.config.startup_timeout_s:.0f} s")
            if time.monotonic() - last_news > 15:
                say("still starting...")
                last_news = time.monotonic()
            time.sleep(0.5)

    def _answers_as_ours(self) -> bool:
        """Healthy, serving our model name, and the listening socket belongs to our process."""
        try:
            if self.get("/health", timeout=2) is None:
                return False
            models = json.loads(self.get("/v1/models", timeout=5))
        except (OSError, ValueError):
            return False
        names = {entry.get("id") for entry in models.get("data", [])}
        return self.model_name in names and self._owns_port()

    def _port_held_by_another_process(self) -> bool:
        """True when something listens on our port and it is not our server."""
        try:
            socket.create_connection((self.client_host, self.port), timeout=1).close()
        except OSError:
            return False
        return not self._owns_port()

    def _owns_port(self) -> bool:
        assert self.process is not None
        try:
            root = psutil.Process(self.process.pid)
            for proc in [root, *root.children(recursive=True)]:
                for conn in proc.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr.port == self.port:
                        return True
        except psutil.AccessDenied:
            return True  # cannot inspect sockets here (e.g. macOS without root): trust the checks above
        except psutil.NoSuchProcess:
            return False
        return False

    def _fail(self, error: type[ServerStartError], what: str, found: Diagnosis | None = None) -> None:
        returncode = self.process.poll() if self.process else None
        text = self.log_text()
        found = found or diagnose(text, returncode)
        self.stop()
        raise error(
            f"The vLLM server {what} ({found.cause}). {found.advice}",
            cause=found.cause if error is ServerStartError else "timeout",
            log_tail=tail(text), log_path=str(self.log_path),
        )

    def _cache_config_labels(self) -> dict[str, str] | None:
        from helpers.load.prometheus import cache_config_labels  # here: its parser import is not needed at start-up

        try:
            return cache_config_labels(self.get("/metrics").decode()) or None
        except OSError:
            return None


def start_server(config: ServerConfig | None = None, *, quiet: bool = False, **settings: Any) -> VLLMServer:
    """Create and start a server in one call; use it in a ``with`` block or call ``stop()``."""
    return VLLMServer(config, **settings).start(quiet=quiet)


def running_servers() -> list[VLLMServer]:
    """The servers this Python process started and has not stopped."""
    return [server for server in _LIVE if server.is_running()]


def stop_all_servers() -> None:
    for server in list(_LIVE):
        server.stop()


atexit.register(stop_all_servers)


# ----- checks made before anything is launched ----------------------------------------------
def _choose_device(config: ServerConfig) -> Device:
    found = detect_device()
    if config.device == "cuda" and found != "cuda":
        raise NoGPUError(
            "device='cuda' was asked for, but no NVIDIA GPU is visible (nvidia-smi found none). "
            "Use device='auto' to run on the CPU build, or move to a GPU machine (e.g. Colab "
            "with Runtime > Change runtime type > GPU)."
        )
    return "cpu" if config.device == "cpu" else found


def _check_device_options(config: ServerConfig, device: Device) -> None:
    if device == "cpu" and config.quantization and config.quantization.startswith("fp8"):
        # Measured: vLLM 0.32's CPU build starts loading, then dies in a kernel it lacks.
        raise NoGPUError(
            f"quantization={config.quantization!r} needs an NVIDIA GPU: vLLM's CPU build has "
            "no FP8 kernels. Drop the option on CPU, or run on a GPU."
        )


def _check_memory(config: ServerConfig, device: Device) -> None:
    if device != "cpu":
        return  # vLLM measures GPU memory itself and says so clearly
    kv_gib = config.kv_cache_space_gib or DEFAULT_CPU_KV_CACHE_GIB
    wanted = kv_gib + SERVER_RSS_GIB
    available = psutil.virtual_memory().available / 2**30
    if wanted > available:
        raise NotEnoughMemoryError(
            f"A {kv_gib:g} GiB KV cache plus about "
            f"{SERVER_RSS_GIB:g} GiB for the server needs {wanted:.1f} GiB, but only "
            f"{available:.1f} GiB of memory is free. Lower kv_cache_space_gib, or stop other "
            "servers (helpers.serve.server.running_servers() lists this kernel's)."
        )


def _choose_port(config: ServerConfig) -> int:
    if config.port is not None:
        if not _port_free(config.host, config.port, strict=False):
            raise PortInUseError(
                f"Port {config.port} on {config.host} is already in use (often a server from an "
                "earlier kernel or another notebook). Stop that process, choose another port, "
                "or pass port=None to take the first free one."
            )
        return config.port
    for port in range(FIRST_PORT, FIRST_PORT + 100):
        if _port_free(config.host, port, strict=True):
            return port
    raise PortInUseError(f"Ports {FIRST_PORT}-{FIRST_PORT + 99} are all in use on {config.host}.")


def _port_free(host: str, port: int, *, strict: bool) -> bool:
    """Whether vLLM could bind the port. ``strict`` also avoids ports that are only bound:
    a starting vLLM binds its port about a minute before it listens, and only a probe without
    SO_REUSEADDR sees that (it also skips ports still in TIME_WAIT, which is fine when choosing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        if not strict:
            # vLLM sets SO_REUSEADDR too, so a port left in TIME_WAIT is free for it.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


# ----- process plumbing ----------------------------------------------------------------------
def _stop_process_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        members = [process.pid, *(child.pid for child in psutil.Process(process.pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        members = [process.pid]
    for sig, wait_s in ((15, timeout), (9, 5.0)):  # SIGTERM lets vLLM reap its engine; SIGKILL if it hangs
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


def _new_log_path(log_dir: Path | None, port: int) -> Path:
    folder = Path(log_dir) if log_dir else build_dir("server-logs")
    folder.mkdir(parents=True, exist_ok=True)
    # Microseconds keep two servers started in the same second (two kernels) from sharing a log.
    return folder / f"vllm-{datetime.now():%Y%m%d-%H%M%S-%f}-port{port}.log"


def _package_root() -> str:
    return str(COURSE_ROOT)


def _printer(began: float):
    def say(text: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {text}", flush=True)

    return say
