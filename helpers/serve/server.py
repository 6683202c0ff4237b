"""Start, watch and stop a real vLLM OpenAI-compatible server from Python or a notebook.

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server`` in a session of its own, logging, and:

- refuses bad settings before launching (:class:`helpers.serve.config.ServerConfig`);
- waits until *its own* process answers ``/health`` and lists the expected model, showing
  start-up milestones as they happen; another server on the same port cannot fool it;
- on failure raises :class:`helpers.errors.ServerStartError` naming the cause found in the
  log, with the log's last lines;
- stops every process of the server (SIGTERM, then SIGKILL; bounded) and removes its files, on
  ``stop()``, at the end of a ``with`` block, on an interrupted cell, at interpreter exit, and,
  through a watchdog process, when the kernel itself is killed or any one of the server's
  processes dies (:attr:`VLLMServer.death_note` then says which);
- reports the engine's KV-cache capacity as a :class:`helpers.serve.log.KVCacheReport`.

The checks before launch are in :mod:`helpers.serve.preflight`, the process plumbing in
:mod:`helpers.serve.process`, the reading of the log in :mod:`helpers.serve.log`, several servers
started at once in :mod:`helpers.serve.together`. Taught in ``notebooks/01_start_server.ipynb``.

Example::

    >>> with start_server(max_num_seqs=8) as server:      # doctest: +SKIP
    ...     reply = server.client().chat.completions.create(
    ...         model=server.model_name, messages=[{"role": "user", "content": "Hi"}])
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from helpers.errors import ConfigError, ServerStartError, StartupTimeoutError
from helpers.hardware import Device
from helpers.serve import group, preflight, process, standby
from helpers.serve.access import ServerAccess
from helpers.serve.config import Launch, ServerConfig, build_launch
from helpers.serve.live import LIVE, ports_taken, running_servers, stop_all_servers  # noqa: F401 (imported from here)
from helpers.serve.log import (Diagnosis, KVCacheReport, diagnose, milestone, parse_kv_cache_report, startup_phases, tail,
                               watchdog_note)
from helpers.serve.model import ModelChoice, resolve_model

PORT_ATTEMPTS = 3  # launches tried when a port chosen as free is taken before vLLM binds it
STARTING_GRACE_S = 3.0  # SIGTERM to SIGKILL for a server stopped before it was ready
POLL_S = 0.5  # between looks at a starting server
Say = Callable[[str], None]  # where a start's progress lines go


class VLLMServer(ServerAccess):
    """One vLLM server process. Create it with a config, then ``start()`` (or ``with``)."""

    def __init__(self, config: ServerConfig | None = None, **settings: Any) -> None:
        self.config = with_settings(config, settings)
        self.requested_config = self.config  # as asked for: a server started ahead is found by it (helpers.serve.ahead)
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
        self.last_stop: group.GroupEnd | None = None  # how the last stop() went
        self._guard: subprocess.Popen[bytes] | None = None
        self._temp_dir: Path | None = None
        self._cores: dict[int, str] = {}  # pid -> name of the processes the server cannot lose
        self._choice: ModelChoice | None = None  # the model, once checked before launch
        self._attempts = self._seen_lines = 0  # launches (a port taken before vLLM bound it: again); log lines read
        self._checks_s = self._began = self._launched = self._last_news = 0.0  # the start's clock (monotonic s)

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

    def is_running(self) -> bool:
        """True while the API server and every engine process it started are alive."""
        if self.process is None or self.process.poll() is not None:
            return False
        live = {proc.pid for proc in group.members(self.process.pid)}
        return live.issuperset(self._cores)

    @property
    def death_note(self) -> str | None:
        """What the watchdog wrote when a process of this server died, else None."""
        return watchdog_note(self.log_text())

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def log_tail(self, lines: int = 25) -> str:
        return tail(self.log_text(), lines)

    def __enter__(self) -> VLLMServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        running = self.is_running()
        state = "running" if running else "stopped"
        if not running and self.death_note:
            state += f" ({self.death_note.split(';')[0]})"
        return f"<VLLMServer {state} {self.model_name or self.config.model} on {self.url if self.port else '-'}>"

    # ----- lifecycle ---------------------------------------------------------------------
    def start(self, *, quiet: bool = False) -> VLLMServer:
        """Launch the server and block until it is ready; raise with the cause if it is not."""
        self.check_not_started()
        say = (lambda text: None) if quiet else progress_printer(time.monotonic())
        standby.check_none_passed_over([self])
        if standby.hand_over(self, say):  # started ahead (helpers.serve.ahead): this object becomes that server
            return self
        try:
            with process.interruptible():  # Ctrl-C in a cell with ``await`` too
                self.check_before_launch(say)
                self.launch_on_free_port(say)
                while not self.poll_start(say):
                    time.sleep(POLL_S)
        except BaseException:
            # Also on KeyboardInterrupt. A server still starting may not heed SIGTERM yet: a short grace.
            self.stop(timeout=STARTING_GRACE_S)
            raise
        return self

    def check_before_launch(self, say: Say, starting_with_gib: float = 0.0) -> None:
        """The checks before launch: device, options, memory (beside ``starting_with_gib`` starting with it), model, dtype."""
        checks_began = time.monotonic()
        self.device = preflight.choose_device(self.config)
        preflight.check_device_options(self.config, self.device)
        preflight.check_memory(self.config, self.device, starting_with_gib)
        self._choice = resolve_model(self.config.model)
        preflight.check_model_device(self._choice, self.device, self.config.gpu_memory_utilization)
        self.config, why = preflight.with_serving_dtype(self.config, self.device)
        if why:
            say(why)
        self.model_name = self._choice.served_name
        self.model_source = self._choice.source
        self._checks_s = time.monotonic() - checks_began  # counted in startup_seconds, whenever the launch comes

    def launch_on_free_port(self, say: Say) -> None:
        """Launch vLLM on a free port (none this kernel's other servers hold) and return at once."""
        choice, self._attempts = self._choice, self._attempts + 1
        if self._attempts == 1:
            self._began = time.monotonic() - self._checks_s
        self.port = preflight.choose_port(self.config, taken=ports_taken())
        self.launch = build_launch(replace(self.config, port=self.port), device=self.device, model=choice.model,
                                  served_name=choice.served_name, load_format=choice.load_format)
        self.log_path = process.new_log_path(self.config.log_dir, self.port)
        say(f"starting vLLM on {self.device.upper()}: {' '.join(self.launch.display_command())}")
        say(f"log: {self.log_path}")
        self._launched, self._seen_lines, self._last_news = time.monotonic(), 0, time.monotonic()
        self.startup_timeline = []
        self._spawn()

    def poll_start(self, say: Say) -> bool:
        """One look at a launched server: its new milestones said and timed; True once ready. Raises with the cause
        when the start failed (the server is stopped); launches again elsewhere when another program took its port."""
        try:
            if not self._answers(say):
                return False
        except ServerStartError as error:
            # vLLM binds its port seconds after launch; another program may take a free
            # port in between. Only a port the helper chose itself is worth choosing again.
            if error.cause != "port in use" or self.config.port is not None or self._attempts == PORT_ATTEMPTS:
                raise
            say(f"port {self.port} was taken while vLLM started; trying the next free port")
            self.process = None
            self.launch_on_free_port(say)
            return False
        self.startup_seconds = time.monotonic() - self._began
        self.kv_cache = parse_kv_cache_report(self.log_text(), self._cache_config_labels())
        say(f"ready in {self.startup_seconds:.1f} s: {self.base_url} serves {self.model_name!r}")
        return True

    def stop(self, timeout: float = 15.0) -> group.GroupEnd | None:
        """Stop the server and every process it started, and remove its files; safe to call twice.
        Returns once the last process is gone (SIGTERM, ``timeout`` s, SIGKILL) with what it took
        (``print(server.stop())``); a second Ctrl-C kills what is left at once, then goes through."""
        ended = process.stop_started(self.process, self._guard, timeout, self._temp_dir)
        if ended is not None:
            self.last_stop = ended
        LIVE.discard(self)
        return ended

    def _spawn(self) -> None:
        assert self.launch is not None and self.log_path is not None
        self._temp_dir = process.new_temp_dir(self.port)
        self.process = process.spawn_server(self.launch, self.log_path, self._temp_dir)
        LIVE.add(self)
        self._guard = process.start_orphan_guard(self.process.pid, self.log_path, self._temp_dir)

    def kernel_libraries(self) -> set[str]:
        """Which of vLLM's CPU kernel libraries its processes loaded: ``_C.abi3.so`` (AVX-512 with
        bf16), ``_C_AVX512.abi3.so`` or ``_C_AVX2.abi3.so``; read from ``/proc/PID/maps``, so empty off Linux."""
        if self.process is None:
            raise RuntimeError("This server has not been started: call start() first.")
        return process.loaded_kernel_libraries(self.process.pid)

    @property
    def startup_phases(self) -> dict[str, float]:
        """Seconds spent in each phase of the last start (imports, engine, weights, ...)."""
        return startup_phases(self.startup_timeline, self.startup_seconds)

    def check_not_started(self) -> None:
        if self.process is not None:  # checked before a start's clean-up, which would stop what is running
            raise RuntimeError("This server was already started; create a new VLLMServer to start another.")

    def _answers(self, say: Say) -> bool:
        assert self.process is not None
        lines = self.log_text().splitlines()
        for line in lines[self._seen_lines:]:
            label = milestone(line)
            if label:
                say(label)
                self._last_news = time.monotonic()
                self.startup_timeline.append((self._last_news - self._launched, label))
        self._seen_lines = len(lines)
        if self.process.poll() is not None:
            self._fail(ServerStartError, "exited during start-up")
        if process.answers_as_ours(self):
            self.startup_timeline.append((time.monotonic() - self._launched, "ready"))
            self._cores = group.core_processes(group.members(self.process.pid), self.process.pid)
            return True
        if process.port_held_by_another(self):
            # Another server took the port between our check and vLLM's listen(): ours
            # would never answer there, so fail now instead of at the timeout.
            self._fail(ServerStartError, f"lost port {self.port} to another process",
                       found=diagnose("Address already in use", None))
        limit = self.config.startup_timeout(self.device or "cpu")
        if time.monotonic() > self._began + limit:
            self._fail(StartupTimeoutError, f"was not ready after {limit:.0f} s")
        if time.monotonic() - self._last_news > 15:
            say("still starting...")
            self._last_news = time.monotonic()
        return False

    def _fail(self, error: type[ServerStartError], what: str, found: Diagnosis | None = None) -> None:
        returncode = self.process.poll() if self.process else None
        text = self.log_text()
        found = found or diagnose(text, returncode)
        self.stop(timeout=STARTING_GRACE_S)
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


def with_settings(config: ServerConfig | None, settings: dict[str, Any]) -> ServerConfig:
    """``config`` (default :class:`ServerConfig`) with ``settings`` on top; a name it lacks is refused with the list."""
    known = [f.name for f in fields(ServerConfig)]
    if unknown := sorted(set(settings) - set(known)):
        raise ConfigError(f"{', '.join(unknown)} is not a server setting; the settings are {', '.join(known)}.")
    return replace(config or ServerConfig(), **settings)


def progress_printer(began: float, label: str = "") -> Say:
    """Where a start's progress goes in a notebook: each line after the seconds since ``began`` and a ``label``."""
    def say(text: str) -> None:
        print(f"[{time.monotonic() - began:6.1f} s] {label}{text}", flush=True)

    return say
