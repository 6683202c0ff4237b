"""Start, watch and stop vLLM's router (``vllm-router``) in front of running course servers.

:class:`VLLMRouter` runs the router (through :mod:`helpers.route._launch`) the way
:class:`helpers.serve.server.VLLMServer` runs vLLM, with the same plumbing
(:mod:`helpers.serve.process`): a session of its own, a log file, the watchdog of
:mod:`helpers.serve._orphan_guard` that ends it when the kernel dies, and a bounded stop
(SIGTERM, then SIGKILL). It:

- refuses in a second, with what to do: vllm-router not installed, a policy it does not have,
  no replicas, a port already taken, a network-facing router without a key
  (:mod:`helpers.route.command`), a cache-aware router in front of a replica that does not render
  prompts for it (:mod:`helpers.route.render_check`);
- binds 127.0.0.1 and a free port unless told otherwise, waits (bounded) until *its own*
  process answers ``/health`` and ``/v1/models`` with the replicas' model, and on failure raises
  :class:`helpers.errors.ServerStartError` with the router's log tail;
- when the replicas have an API key, makes the router check it on every route and send it to
  the replicas; the key goes through the router's environment only, as a server's reaches its key guard, never
  its command line, log or files (see :func:`helpers.route.command.build_router_launch`).

The router is a target for the load tester (``url``, ``base_url``, ``model_name``, ``api_key``,
``config.max_model_len``, the OpenAI clients of :class:`~helpers.serve.access.ServerAccess`).

Example::

    >>> with start_replicas(2) as replicas, start_router(replicas, policy="round_robin") as router:  # doctest: +SKIP
    ...     run = asyncio.run(run_load_test(router, build_workload(replicas[0], num_requests=8)))
"""

from __future__ import annotations

import atexit
import importlib.util
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from helpers import validate
from helpers.errors import ConfigError, RouterNotInstalledError, ServerStartError, StartupTimeoutError
from helpers.route.command import (
    WORKER_STARTUP_TIMEOUT_S,
    build_router_launch,
    check_policy,
    check_replica_urls,
    check_replicas_demand_key,
    check_router_host,
    replica_key,
)
from helpers.route.render_check import check_replicas_render
from helpers.serve import group, process
from helpers.serve.access import ServerAccess
from helpers.serve.config import LOOPBACK
from helpers.serve.live import ports_taken
from helpers.serve.log import tail
from helpers.serve.preflight import pick_port

FIRST_PORT = 30000  # vllm-router's own default port; later routers take the next free one
STOP_GRACE_S = 5.0  # the router exits within a second of SIGTERM
INSTALL_HINT = "pip install vllm-router==0.1.17"
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_LIVE: set[VLLMRouter] = set()  # routers this process started and has not stopped yet

# (cause, pattern in the router's log, advice); the first match wins
_CAUSES = (
    ("port in use", r"Address already in use|AddrInUse",
     "Another program took the router's port. Stop it, or start with port=None to take a free one."),
    ("replica not healthy", r"(?i)timeout.*(worker|healthy)|(worker|healthy).*timeout|failed to become healthy",
     ("A replica did not answer /health: check that every replica is running (server.is_running()) "
      "and that its URL is right.")),
)


class VLLMRouter(ServerAccess):
    """One vllm-router process in front of ``replicas`` (running servers or their URLs)."""

    def __init__(self, replicas: Sequence[Any], policy: str = "cache_aware", *, host: str = LOOPBACK,
                 port: int | None = None, api_key: str | None = None, model_name: str | None = None,
                 startup_timeout_s: float = 60.0, log_dir: Path | None = None) -> None:
        if isinstance(replicas, str):
            check_replica_urls(replicas)  # refuses a lone URL, saying to pass a list
        replicas = list(replicas)
        self.replica_urls = check_replica_urls([getattr(r, "url", r) for r in replicas])
        self.policy = check_policy(policy)
        startup_timeout_s = validate.positive_number(startup_timeout_s, "startup_timeout_s", unit="seconds")
        self._key = api_key if api_key is not None else _shared_key(replicas)
        check_router_host(host, self._key)
        self._replicas_to_ask = replicas  # check_replicas_demand_key, as the router starts
        self.replicas = [r for r in replicas if not isinstance(r, str)]
        self.model_name = model_name or _shared(replicas, "model_name", "model_name=")
        if self.model_name is None:
            raise ConfigError("Pass model_name=... when the replicas are given as URLs (the router serves theirs).")
        # what the load tester reads: the replicas' context length, where known
        self.config = SimpleNamespace(max_model_len=_shared(replicas, "config", None, attr="max_model_len"),
                                      host=host, port=port, startup_timeout_s=startup_timeout_s, log_dir=log_dir)
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.startup_seconds: float | None = None
        self._guard: subprocess.Popen[bytes] | None = None
        self._temp_dir: Path | None = None

    # ----- what a notebook uses ---------------------------------------------------------
    @property
    def url(self) -> str:
        host = LOOPBACK if self.config.host in ("0.0.0.0", "::") else self.config.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def api_key(self) -> str:
        return self._key or "not-needed"

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        """The router's log so far, without the terminal colours vllm-router writes even to a file."""
        text = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
        return ANSI_COLOUR.sub("", text)

    def __enter__(self) -> VLLMRouter:
        return self.start() if self.process is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        where = self.url if self.port else "-"
        return f"<VLLMRouter {state} {self.policy} on {where} -> {len(self.replica_urls)} replica(s)>"

    # ----- lifecycle ---------------------------------------------------------------------
    def start(self, *, quiet: bool = False) -> VLLMRouter:
        """Launch the router and block until it answers; raise with the cause if it does not."""
        if self.process is not None:
            raise RuntimeError("This router was already started; create a new VLLMRouter to start another.")
        if importlib.util.find_spec("vllm_router") is None:
            raise RouterNotInstalledError(
                f"vLLM's router is not installed in this environment. Install it with `{INSTALL_HINT}` "
                "(the version the course was tested with), then run this cell again.")
        check_replicas_demand_key(self.config.host, self._key, self._replicas_to_ask)
        check_replicas_render(self.policy, self._replicas_to_ask, self.model_name, self._key)
        began = time.monotonic()
        self.port = choose_router_port(self.config.host, self.config.port)
        self.metrics_port = choose_router_port(LOOPBACK, None, after=self.port)
        launch = build_router_launch(self.replica_urls, self.policy, host=self.config.host, port=self.port,
                                     metrics_port=self.metrics_port, api_key=self._key,
                                     # the router gives up on a silent replica first, so its log can say which
                                     replicas_timeout_s=max(1, min(WORKER_STARTUP_TIMEOUT_S,
                                                                   int(self.config.startup_timeout_s / 2))))
        self.log_path = process.new_log_path(self.config.log_dir, self.port, name="vllm-router")
        if not quiet:
            print(f"starting vllm-router ({self.policy}) on {self.url} in front of {', '.join(self.replica_urls)}",
                  flush=True)
        self._temp_dir = process.new_temp_dir(self.port)
        try:
            with process.interruptible():  # Ctrl-C in a cell with ``await`` too
                self.process = process.spawn_server(launch, self.log_path, self._temp_dir)
                _LIVE.add(self)
                self._guard = process.start_orphan_guard(self.process.pid, self.log_path, self._temp_dir)
                self._wait_until_ready(began)
        except BaseException:  # also KeyboardInterrupt: an interrupted cell leaves no router behind
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        if not quiet:
            print(f"router ready in {self.startup_seconds:.1f} s: {self.base_url} serves {self.model_name!r}",
                  flush=True)
        return self

    def stop(self, timeout: float = STOP_GRACE_S) -> group.GroupEnd | None:
        """Stop the router (SIGTERM, ``timeout`` s, SIGKILL) and remove its files; safe to call twice.
        The replicas keep running: stop them on their own. A second Ctrl-C kills what is left at once."""
        ended = process.stop_started(self.process, self._guard, timeout, self._temp_dir)
        _LIVE.discard(self)
        return ended

    def _wait_until_ready(self, began: float) -> None:
        assert self.process is not None
        deadline = began + self.config.startup_timeout_s
        while True:
            if self.process.poll() is not None:
                self._fail("exited during start-up")
            if process.answers_as_ours(self):  # healthy, the replicas' model, and its own port
                return
            if time.monotonic() > deadline:
                self._fail(f"was not ready after {self.config.startup_timeout_s:.0f} s", timeout=True)
            time.sleep(0.2)

    def _fail(self, what: str, timeout: bool = False) -> None:
        text = self.log_text()
        cause, advice = "router failed", "Read the router's log below for the reason."
        for label, pattern, hint in _CAUSES:
            if re.search(pattern, text):
                cause, advice = label, hint
                break
        self.stop()
        error = StartupTimeoutError if timeout else ServerStartError
        raise error(f"vllm-router {what} ({cause}). {advice}", cause="timeout" if timeout else cause,
                    log_tail=tail(text), log_path=str(self.log_path))


def start_router(replicas: Sequence[Any], policy: str = "cache_aware", *, quiet: bool = False,
                 **settings: Any) -> VLLMRouter:
    """Create and start a router in one call; use it in a ``with`` block or call ``stop()``."""
    return VLLMRouter(replicas, policy, **settings).start(quiet=quiet)


def choose_router_port(host: str, port: int | None, after: int | None = None) -> int:
    """``port`` if free (else :class:`PortInUseError`), or the first free one from :data:`FIRST_PORT` (or ``after``
    + 1), past the ports of servers this kernel is starting (:func:`helpers.serve.preflight.pick_port`)."""
    return pick_port(host, port, first=FIRST_PORT if after is None else after + 1, skip=ports_taken(), kind="router")


def stop_all_routers() -> None:
    """Stop every router this Python process started (also run at interpreter exit); a Ctrl-C
    during one stop stops the rest at once (:func:`helpers.serve.process.stop_each`)."""
    process.stop_each(_LIVE)


atexit.register(stop_all_routers)


def _shared(replicas: Sequence[Any], name: str, hint: str | None, attr: str | None = None) -> Any:
    """The one value of ``name`` (or ``name.attr``) the replicas agree on; None when no replica has it."""
    values = set()
    for replica in replicas:
        value = getattr(replica, name, None)
        value = getattr(value, attr, None) if attr and value is not None else value
        if value is not None:
            values.add(value)
    if len(values) > 1 and hint:
        raise ConfigError(f"The replicas differ in {name} ({sorted(map(str, values))}); a router needs "
                          f"replicas that serve the same thing. Pass {hint}... or start them alike.")
    return values.pop() if len(values) == 1 else None


def _shared_key(replicas: Sequence[Any]) -> str | None:
    """The replicas' one API key (:func:`helpers.route.command.replica_key`), or None."""
    keys = {key for key in map(replica_key, replicas) if key}
    if len(keys) > 1:
        raise ConfigError("The replicas have different API keys; a router in front of them needs one key for all.")
    return keys.pop() if keys else None
