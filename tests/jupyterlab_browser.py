"""A private JupyterLab driven by headless Chromium, for tests/test_browser_widgets.py.

:class:`JupyterLab` runs ``python -m jupyter lab`` on 127.0.0.1, a free port and a random token,
with its config, runtime, data, settings and workspace folders in a temporary folder, so it
never reads or writes the user's. Its settings turn off what a browser test must not have:
autosave (the notebooks are copies anyway), windowed rendering (every cell stays in the page),
and the news and update checks (this machine has no internet).

:func:`launch_chromium` starts the system's Chromium (Debian's ``chromium``, installed by
``scripts/setup_browser.sh``) through Playwright, with a fresh profile and every feature that
phones home turned off: Playwright's own browser download is not used.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

CHROMIUM = os.environ.get("VLLM_COURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # No internet here: without these, Chromium's own connections are refused and retried.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--metrics-recording-only",
]

# User settings of the private JupyterLab: {plugin id: settings}.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension/plugin": {"enabled": False},
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def lab_command(port: int, token: str, root_dir: Path, dirs: dict[str, Path],
                base_env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the private JupyterLab. The token travels in the environment
    (JUPYTER_TOKEN, which jupyter_server's IdentityProvider reads), not argv: /proc/<pid>/cmdline, and so
    `ps`, shows argv to every user of the machine."""
    env = {
        **(os.environ if base_env is None else base_env),
        "JUPYTER_TOKEN": token,
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),  # no user kernelspec can replace this venv's python3
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
        "IPYTHONDIR": str(dirs["ipython"]),
    }
    env.pop("JUPYTER_TOKEN_FILE", None)  # JUPYTER_TOKEN wins anyway; no second source to wonder about
    argv = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root_dir}",
        "--ServerApp.terminals_enabled=False",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: read the notebook model from the page
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",  # never asks PyPI for extensions
    ]
    if os.geteuid() == 0:
        argv.append("--allow-root")  # CI runs as root
    return argv, env


class JupyterLab:
    """One JupyterLab server serving ``root_dir``; ``start()``, then ``stop()`` (or ``with``)."""

    def __init__(self, root_dir: Path, home: Path, log_path: Path) -> None:
        self.root_dir, self.home, self.log_path = root_dir, home, log_path
        self.token = uuid.uuid4().hex
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def page_url(self, notebook: str) -> str:
        """The address that opens a notebook (relative to root_dir) in a fresh workspace."""
        return f"{self.url}/lab/tree/{notebook}?reset&token={self.token}"

    def start(self, timeout_s: float = 120) -> "JupyterLab":
        dirs = {name: self.home / name for name in ("config", "runtime", "data", "settings", "workspaces", "ipython")}
        for folder in dirs.values():
            folder.mkdir(parents=True, exist_ok=True)
        for plugin, values in LAB_SETTINGS.items():
            path = dirs["settings"] / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        argv, env = lab_command(self.port, self.token, self.root_dir, dirs)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(argv, env=env, cwd=self.root_dir, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.process.returncode}; log: {self.log_path}\n"
                                   + self.log_path.read_text(errors="replace")[-3000:])
            try:
                self.api("GET", "/api/status")
                return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer within {timeout_s:.0f} s; log: {self.log_path}")

    def api(self, method: str, path: str, timeout: float = 30) -> object:
        """Call the server's REST API with the token; the decoded JSON (None when empty)."""
        request = urllib.request.Request(self.url + path, method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Shut every kernel down the way JupyterLab's own button does (its clean-up code runs)."""
        for session in self.api("GET", "/api/sessions") or []:
            self.api("DELETE", f"/api/sessions/{session['id']}", timeout=60)
        for kernel in self.api("GET", "/api/kernels") or []:
            self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=60)

    def stop(self, timeout_s: float = 30) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.shutdown_kernels()
        except OSError:
            pass  # the server is in trouble; the signals below still stop it
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=timeout_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> "JupyterLab":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def launch_chromium(playwright, profile_dir: Path, viewport: tuple[int, int] = (1400, 1000)):
    """A headless Chromium context with a fresh profile in ``profile_dir``."""
    return playwright.chromium.launch_persistent_context(
        str(profile_dir), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
        viewport={"width": viewport[0], "height": viewport[1]}, timeout=60_000,
    )
